"""Reproduce a paper's tables from its file in ``configs/``.

Trains every model the tables need with ``fairseq-train``, decodes every table row
with ``fairseq-generate`` (a row may switch the attention at decoding time with
``--model-overrides``), scores BLEU with sacrebleu, and writes each table with the
paper's figures beside ours, plus decoding sentences/s as a ratio to the table's
first row. ``--smoke`` runs the same pipeline on the bundled synthetic corpus with
the config's small ``smoke`` settings, in minutes on a CPU; its numbers show that
the pipeline works, not what the paper measured.

    python -m sparse_attn_plugin.reproduce configs/xu2021_hard_attention.json [--smoke]

A config is JSON with: ``name`` (results go to ``results/<name>/``), ``paper``,
``settings_note``, ``data`` and ``prepare`` (the binarised corpus and how to make
it), ``train_flags``, ``max_update``, ``generate_flags``, ``bleu`` (options of
:func:`~sparse_attn_plugin.evaluation.corpus_bleu`), ``smoke`` (the same four
settings for the synthetic corpus), ``models`` (name -> extra training flags) and
``tables`` (each a ``title`` and ``rows`` of ``label``, ``model``, optional
``overrides`` and the ``paper``'s figures).
"""

import argparse
import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import List

from data_prep.synthetic import binarize, write_corpus

from . import pipeline
from .evaluation import corpus_bleu
from .pipeline import device_flags
from .provenance import REPO_ROOT, provenance_header
from .results_io import markdown_table, write_json_atomic, write_text_atomic

REQUIRED = ("name", "paper", "settings_note", "data", "prepare", "train_flags", "max_update",
            "generate_flags", "bleu", "smoke", "models", "tables")
SMOKE_REQUIRED = ("train_flags", "max_update", "generate_flags", "bleu")
SMOKE_CORPUS = {"train": 20000, "valid": 500, "test": 1000}


class ConfigError(ValueError):
    """A config that cannot be run; the message is one line naming the file."""


def load_config(path: Path) -> dict:
    """Read and check a config; raise :class:`ConfigError` with one clear line."""
    try:
        config = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: invalid JSON at line {err.lineno}: {err.msg}") from None
    missing = [k for k in REQUIRED if k not in config]
    missing += [f"smoke.{k}" for k in SMOKE_REQUIRED if k not in config.get("smoke", {})]
    if missing:
        raise ConfigError(f"{path}: missing {', '.join(missing)}")
    for table in config["tables"]:
        for row in table["rows"]:
            if row["model"] not in config["models"]:
                raise ConfigError(f"{path}: row {row['label']!r} of {table['title']!r} uses "
                                  f"model {row['model']!r}, which `models` does not define")
    return config


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def override_flags(overrides: dict) -> List[str]:
    return ["--model-overrides", repr(overrides)] if overrides else []


def decoding_key(row: dict) -> str:
    return json.dumps([row["model"], row.get("overrides", {})], sort_keys=True)


def run(config: dict, data: Path, work: Path, smoke: bool, updates: int = None) -> dict:
    """Train the models and decode the rows; {decoding key: measurements}."""
    settings = config["smoke"] if smoke else config
    max_update = updates or settings["max_update"]
    needed = list(dict.fromkeys(row["model"] for t in config["tables"] for row in t["rows"]))
    checkpoints, trained = {}, {}
    for i, model in enumerate(needed, 1):
        print(f"[reproduce] {i}/{len(needed)} train {model!r}: {max_update} updates", flush=True)
        result = pipeline.train(
            data, work / slug(model),
            [*settings["train_flags"], *config["models"][model], *device_flags()],
            max_update, desc=model, fresh=smoke)
        checkpoints[model] = result.checkpoint
        trained[model] = {"updates": result.updates, "valid_loss": result.valid_loss,
                          "words_per_second": result.words_per_second}
    decoded = {}
    rows = [row for table in config["tables"] for row in table["rows"]]
    for row in rows:
        key = decoding_key(row)
        if key in decoded:
            continue
        overrides = row.get("overrides", {})
        print(f"[reproduce] decode {row['model']!r}"
              + (f" with {overrides}" if overrides else ""), flush=True)
        name = slug(row["model"] + "-" + "-".join(f"{k}-{v}" for k, v in overrides.items()))
        generated = pipeline.generate(
            data, checkpoints[row["model"]],
            [*settings["generate_flags"], *device_flags(), *override_flags(overrides)],
            work / f"generate-{name}.log")
        output = generated.output
        bleu = corpus_bleu(output.hypotheses, output.references, **settings["bleu"])
        decoded[key] = {"bleu": bleu.score, "bleu_signature": bleu.signature,
                        "sentences_per_second": generated.sentences_per_second,
                        "sentences": len(output.ids)}
    return {"trained": trained, "decoded": decoded, "max_update": max_update}


def _cell(value, fmt="{:.2f}"):
    return "-" if value is None else fmt.format(value)


def render(config: dict, results: dict, smoke: bool, command: str) -> str:
    decoded = results["decoded"]
    parts = [f"# {config['paper']}: reproduction"
             + (" (SMOKE RUN on the synthetic corpus)" if smoke else ""), "",
             provenance_header(command)]
    if smoke:
        parts.append(
            "**Smoke run**: the paper's pipeline on the bundled synthetic corpus with a "
            f"small model ({results['max_update']} updates; settings under `smoke` in the "
            "config). It shows that every training and decoding combination runs end to "
            "end; its numbers are NOT comparable to the paper's, which stand beside them "
            "for orientation only.\n")
    parts.append(f"Settings: {config['settings_note']}\n")
    signature = next(iter(decoded.values()))["bleu_signature"] if decoded else ""
    parts.append(f"BLEU: sacrebleu `{signature}`. Decoding speed: fairseq-generate's "
                 "sentences/s divided by the table's first row, same run and machine "
                 "(real output lengths, so this also reflects what each model generates; "
                 "`benchmarks/` hold controlled speed ratios).\n")
    for table in config["tables"]:
        first = decoded[decoding_key(table["rows"][0])]
        rows = []
        for row in table["rows"]:
            ours = decoded[decoding_key(row)]
            paper = row["paper"]
            overrides = row.get("overrides", {})
            rows.append([row["label"], row["model"],
                         ", ".join(f"{k}={v}" for k, v in overrides.items()) or "as trained",
                         f"{ours['bleu']:.2f}", _cell(paper.get("BLEU")),
                         f"{ours['sentences_per_second'] / first['sentences_per_second']:.2f}",
                         _cell(paper.get("speed-up"))])
        parts.append(f"## {table['title']}\n\n" + markdown_table(
            ["row", "model trained", "decoded with", "BLEU (ours)", "BLEU (paper)",
             "sent/s ÷ first row (ours)", "speed-up (paper)"], rows))
    trained = results["trained"]
    parts.append("## Training runs\n\n" + markdown_table(
        ["model", "updates", "valid loss", "words/s"],
        [[m, t["updates"], _cell(t["valid_loss"], "{:.3f}"), _cell(t["words_per_second"], "{:.0f}")]
         for m, t in trained.items()]))
    return "\n".join(parts)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="a file in configs/")
    parser.add_argument("--smoke", action="store_true",
                        help="the same pipeline on the synthetic corpus, small settings")
    parser.add_argument("--data", type=Path, help="binarised corpus (default: the config's)")
    parser.add_argument("--updates", type=int, help="training updates per model "
                                                    "(default: the config's)")
    parser.add_argument("--work-dir", type=Path, help="checkpoints and logs "
                                                      "(default: .work/<name>[-smoke])")
    parser.add_argument("--out", type=Path, help="default: results/<name>")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as err:
        parser.error(str(err))
    if args.updates is not None and args.updates < 1:
        parser.error("--updates must be positive")
    name = config["name"]
    work = args.work_dir or REPO_ROOT / ".work" / (name + ("-smoke" if args.smoke else ""))
    out = args.out or REPO_ROOT / "results" / name
    if args.smoke:
        raw = work / "raw"
        write_corpus(raw, **SMOKE_CORPUS)
        data = args.data or Path(binarize(raw, work / "bin"))
    else:
        data = args.data or REPO_ROOT / config["data"]
        if not (data / "dict.txt").exists() and not list(data.glob("dict.*.txt")):
            parser.error(f"no binarised corpus in {data}: prepare it with "
                         f"`{config['prepare']}` or pass --data DIR")
    started = time.time()
    results = run(config, data, work, args.smoke, args.updates)
    command = "python -m sparse_attn_plugin.reproduce " + shlex.join(argv)
    report_name, record_name = ("smoke.md", "smoke.json") if args.smoke else ("README.md",
                                                                               "results.json")
    report = render(config, results, args.smoke, command)
    write_json_atomic(out / record_name, {"command": command, "config": str(args.config),
                                          "smoke": args.smoke, **results})
    write_text_atomic(out / report_name, report)
    print(report)
    print(f"[reproduce] done in {time.time() - started:.0f} s; wrote {out / report_name}")


if __name__ == "__main__":
    main()
