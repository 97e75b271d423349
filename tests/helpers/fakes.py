"""Stand-ins for ``pipeline.train`` and ``pipeline.generate``: the reproduction driver's
wiring (which data, flags and checkpoints each run gets) checked in seconds."""

from pathlib import Path

import torch

from sparse_attn_experiments import pipeline
from sparse_attn_experiments.reproduction import fertility_data
from sparse_attn_experiments.reproduction.plan import flag_value
from sparse_attn_plugin.evaluation import GenerateOutput


def fake_train(calls):
    """Records each call; saves a tiny checkpoint ``checkpoint_1_U.pt`` per update U (for
    averaging), reports ``1000 + 10 * (number of calls so far)`` words/s, and tells
    ``on_speed`` 0.5 updates/s and 1000 target tokens/s."""
    def train(data, save_dir, flags, max_update, desc="", fresh=True, on_speed=None, **kwargs):
        calls.append({"name": desc, "data": Path(data), "flags": list(flags),
                      "save_dir": Path(save_dir)})
        if on_speed:  # as if measured: 0.5 updates/s, 1000 target tokens/s
            on_speed(0.5, 1000.0)
        Path(save_dir).mkdir(parents=True, exist_ok=True)
        for update in range(1, max_update + 1):
            torch.save({"model": {"w": torch.full((2,), float(update))}},
                       Path(save_dir) / f"checkpoint_1_{update}.pt")
        return pipeline.TrainResult(Path(save_dir) / "checkpoint_last.pt",
                                    1000.0 + 10 * len(calls), None, max_update,
                                    Path(save_dir) / "train.log")
    return train


def fake_generate(calls):
    """Translations of the requested split that repeat a bigram in every third sentence
    and drop the last word of every other one, so that REP and DROP have something to
    find; reports ``100 + (number of calls so far)`` sentences/s."""
    def generate(data, checkpoint, flags, log, env=None):
        calls.append({"data": Path(data), "checkpoint": Path(checkpoint), "flags": list(flags)})
        corpus = fertility_data.Corpus(data, Path(log).parent / "fake")
        subset = flag_value(list(flags), "--gen-subset", "test")
        srcs, refs = corpus.lines(subset, corpus.src), corpus.lines(subset, corpus.tgt)
        hyps = []
        for i, ref in enumerate(refs):
            words = ref.split()
            if i % 3 == 0 and len(words) > 1:
                words = words[:2] + words
            if i % 2 == 0 and len(words) > 1:
                words = words[:-1]
            hyps.append(" ".join(words))
        output = GenerateOutput(list(range(len(refs))), srcs, refs, hyps, [0.0] * len(refs))
        return pipeline.GenerateResult(output, 100.0 + len(calls), Path(log))
    return generate
