"""``make demo``: every kind of attention on the synthetic corpus, side by side.

Builds the bundled synthetic corpus, trains one small transformer per kind of attention
(:data:`ROWS`: the five normalisers, hard retrieval in the decoder, constrained
sparsemax in cross-attention, an RBF kernel smoother) with ``fairseq-train`` (same
settings, same number of updates), translates the test set with ``fairseq-generate``
(beam 5) and reports per model: BLEU with sacrebleu's signature, METEOR (Meteor 1.5,
``other`` preset: the toy target language has no stems or paraphrases), REP and DROP (a
fast_align model trained on the training pairs, forward alignments), validation loss,
the fraction of exactly-zero attention weights per site, learned alpha per site, and
training words/s and generation sentences/s as ratios to softmax measured in the same
run. Writes ``results/demo/README.md``, ``results/demo/demo.json`` and three figures:
BLEU and sparsity per model, the learned alphas, and one sentence's cross-attention
under softmax and 1.5-entmax.
"""

import logging
import math
import shlex
import sys
import time
from pathlib import Path
from typing import List

from data_prep.command_line import CommandParser
from data_prep.synthetic import binarize, write_corpus

from . import pipeline
from .evaluation import Meteor, corpus_bleu, corpus_rep
from .evaluation.aligner import train_aligner
from .evaluation.drop import RECOMMENDED_SYMMETRIZATION, corpus_drop
from .normalizers import SITES
from .pipeline import device_flags
from .provenance import REPO_ROOT, provenance_header
from .results_io import markdown_table, write_json_atomic, write_text_atomic

#: The demo model: a 2+2-layer transformer, 4 heads, small enough for 2 CPU cores.
MODEL_FLAGS = [
    "--arch", "sparse_transformer",
    "--encoder-layers", "2", "--decoder-layers", "2",
    "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",
    "--encoder-ffn-embed-dim", "256", "--decoder-ffn-embed-dim", "256",
    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
    "--share-decoder-input-output-embed", "--dropout", "0.1",
    "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "3e-3",
    "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "100",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--max-tokens", "4096", "--seed", "1", "--log-interval", "50",
    "--no-epoch-checkpoints",
]
#: Synthetic words have fertility 3 at most, so every reference fits in 3 |source| + 5
#: tokens (fairseq's default cap of 200 only lets an untrained model ramble).
GENERATE_FLAGS = ["--beam", "5", "--batch-size", "128", "--gen-subset", "test",
                  "--max-len-a", "3", "--max-len-b", "5"]
_CONSTRAINED = ["--task", "sparse_translation"]
#: Each row: the flags that choose its attention (after MODEL_FLAGS) and the ones its
#: decoding needs too.
ROWS = {
    **{name: (["--attn-fn", name], []) for name in
       ("softmax", "topk", "sparsemax", "entmax15", "entmax_alpha")},
    "hard": (["--decoder-self-attn-fn", "hard", "--decoder-cross-attn-fn", "hard"], []),
    "csparsemax": ([*_CONSTRAINED, "--decoder-cross-attn-fn", "csparsemax", "--sink-token",
                    "--exhaustion-c", "0.2", "--fertility", "constant", "--fertility-value",
                    "2"], _CONSTRAINED),
    "kernel_rbf": (["--arch", "kernel_transformer", "--kernel", "rbf"], []),
}
ROW_TITLES = {"hard": "hard (decoder self + cross)", "csparsemax": "csparsemax (cross, f = 2)",
              "kernel_rbf": "RBF kernel smoother"}
SITE_LABELS = {"encoder_self": "enc-self", "decoder_self": "dec-self", "decoder_cross": "cross"}


def site_statistics(checkpoint: Path, data: Path, subset: str = "test"):
    """Zero fraction and learned alphas per site, under teacher forcing on ``subset``
    (none for a model without attention normalisers, e.g. a kernel smoother)."""
    from .analysis import attention_statistics
    from .analysis.cli import dataset, load

    model, task = load(checkpoint, data)
    batches = task.get_batch_iterator(dataset(task, subset), max_tokens=4096).next_epoch_itr(
        shuffle=False)
    try:
        return attention_statistics(model, batches)
    except ValueError:
        return {}


def run_one(name, data, work, updates, corpus, meteor, aligner):
    attention, decoding = ROWS[name]
    train_flags = [*MODEL_FLAGS, *device_flags(), *attention,
                   "--validate-interval-updates", str(updates)]
    trained = pipeline.train(data, work / name, train_flags, updates, desc=f"{name:>12} train")
    generated = pipeline.generate(data, trained.checkpoint,
                                  [*GENERATE_FLAGS, *decoding, *device_flags()],
                                  work / name / "generate.log")
    hypotheses = generated.output.hypotheses
    references = [corpus["test.tgt"][i] for i in generated.output.ids]
    sources = [corpus["test.src"][i] for i in generated.output.ids]
    bleu = corpus_bleu(hypotheses, references)
    stats = site_statistics(trained.checkpoint, data)
    return {
        "attention": name,
        "bleu": bleu.score,
        "bleu_signature": bleu.signature,
        "meteor": meteor.score(hypotheses, references).corpus if meteor else None,
        "rep": corpus_rep(hypotheses, references).score,
        "drop": corpus_drop(aligner, sources, hypotheses, references,
                            symmetrize=RECOMMENDED_SYMMETRIZATION).score,
        "valid_loss": trained.valid_loss,
        "train_words_per_second": trained.words_per_second,
        "generate_sentences_per_second": generated.sentences_per_second,
        "zero_fraction": {site: stats[site].zero_fraction for site in SITES if site in stats},
        "alphas": {site: stats[site].alphas for site in SITES
                   if site in stats and stats[site].alphas},
        "updates": trained.updates,
    }


def _ratio(value, base):
    return f"{value / base:.2f}" if base else "n/a"


def _alpha_cell(alphas):
    if not alphas:
        return "-"
    return "; ".join(f"{SITE_LABELS[s]} {sum(a) / len(a):.2f} [{min(a):.2f}, {max(a):.2f}]"
                     for s, a in alphas.items())


def _zero_cell(fractions):
    if not fractions:
        return "- (no normaliser)"
    return " / ".join(f"{100 * fractions.get(s, math.nan):.1f}%" for s in SITES)


def render(rows, settings, command, images):
    base = next((r for r in rows if r["attention"] == "softmax"), None)
    table = markdown_table(
        ["attention", "BLEU", "METEOR", "REP", "DROP", "valid loss",
         "zero weights enc-self / dec-self / cross",
         "learned alpha: mean [min, max]", "train words/s ÷ softmax",
         "generate sent/s ÷ softmax"],
        [[ROW_TITLES.get(r["attention"], r["attention"]), f"{r['bleu']:.2f}",
          "n/a" if r["meteor"] is None else f"{r['meteor']:.2f}", f"{r['rep']:.2f}",
          f"{r['drop']:.2f}",
          "n/a" if r["valid_loss"] is None else f"{r['valid_loss']:.3f}",
          _zero_cell(r["zero_fraction"]),
          _alpha_cell(r["alphas"]),
          _ratio(r["train_words_per_second"], base and base["train_words_per_second"]),
          _ratio(r["generate_sentences_per_second"],
                 base and base["generate_sentences_per_second"])] for r in rows])
    signature = rows[0]["bleu_signature"] if rows else ""
    return (
        "# Demo: every kind of attention on the synthetic corpus\n\n"
        f"{provenance_header(command)}\n"
        f"Settings: {settings}. Every model has the same architecture, data, seed and number "
        "of updates; only the attention differs (`ROWS` in `sparse_attn_plugin/demo.py`: "
        "the five normalisers at every site, hard retrieval in the decoder, constrained "
        "sparsemax in cross-attention with fertility 2 and a sink, an RBF kernel smoother "
        "with its positions added to the embeddings). BLEU is tokenised BLEU on the test set "
        f"(`{signature}`); METEOR is Meteor 1.5 with `-l other -lower`; REP counts "
        "repeated bigrams not in the reference (x100 over reference tokens, lower is "
        "better); DROP is the share of aligned source words left unaligned by the "
        f"translation (fast_align, `{RECOMMENDED_SYMMETRIZATION}` alignments, which track "
        "true drops on this corpus; lower is better); zero weights are the share of "
        "exactly-zero attention weights among unmasked keys, teacher-forced on the test "
        "set; speed columns are ratios to softmax measured in this run (fairseq's median "
        "training words/s, and generation sentences/s).\n\n" + table
        + "\n" + "\n".join(f"![{name}]({name})" for name in images) + "\n")


def figures(rows, work: Path, data: Path, out: Path) -> List[Path]:
    """BLEU and sparsity per model; the learned alphas; one test sentence's
    cross-attention (last layer, mean of the heads) under softmax and 1.5-entmax (or the
    first other model with a normaliser)."""
    from .analysis import plots
    from .analysis.cli import load, sentence_attention

    def zero_share(row):
        values = list(row["zero_fraction"].values())
        return sum(values) / len(values) if values else None

    written = [plots.comparison_bars([ROW_TITLES.get(r["attention"], r["attention"])
                                      for r in rows], [r["bleu"] for r in rows],
                                     [zero_share(r) for r in rows], out / "comparison.png")]
    alphas = next((r["alphas"] for r in rows if r["alphas"]), None)
    if alphas:
        written.append(plots.alpha_histograms(alphas, out / "alphas.png"))
    sparse = sorted((r["attention"] for r in rows
                     if r["attention"] != "softmax" and r["zero_fraction"]),
                    key=lambda name: name != "entmax15")
    pair = ["softmax", sparse[0]] if sparse and any(r["attention"] == "softmax"
                                                     for r in rows) else []
    if pair:
        panels = []
        for name in pair:
            model, task = load(work / name / "checkpoint_last.pt", data)
            weights, queries, keys, layer = sentence_attention(
                model, task, "test", 0, "decoder_cross", -1, "mean")
            panels.append((f"{name}: cross-attention, layer {layer}, mean of the heads",
                           weights, queries, keys))
        written.append(plots.attention_maps(panels, out / "attention-maps.png"))
    return written


def main(argv=None):
    parser = CommandParser(prog="sparse-attn-demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "results" / "demo")
    parser.add_argument("--work-dir", type=Path, default=REPO_ROOT / ".work" / "demo",
                        help="corpus, checkpoints and logs (not committed)")
    parser.add_argument("--updates", type=int, default=300, help="training updates per model")
    parser.add_argument("--train-size", type=int, default=20000, help="training sentence pairs")
    parser.add_argument("--eval-size", type=int, default=500,
                        help="validation and test sentence pairs (each)")
    parser.add_argument("--rows", default=",".join(ROWS),
                        help=f"comma-separated models to compare, of {', '.join(ROWS)}")
    args = parser.parse_args(argv)
    names = [n for n in args.rows.split(",") if n]
    unknown = [n for n in names if n not in ROWS]
    if unknown or not names:
        parser.fail(f"unknown --rows {unknown}; choose from {', '.join(ROWS)}")
    if min(args.updates, args.train_size, args.eval_size) < 1:
        parser.fail("--updates, --train-size and --eval-size must be positive")

    logging.getLogger("fairseq").setLevel(logging.WARNING)  # progress is ours to show
    start = time.time()
    print(f"[demo] synthetic corpus ({args.train_size} training pairs) -> {args.work_dir}",
          flush=True)
    sizes = f"{args.train_size}-{args.eval_size}"
    raw = args.work_dir / f"raw-{sizes}"
    write_corpus(raw, train=args.train_size, valid=args.eval_size, test=args.eval_size)
    data = Path(binarize(raw, args.work_dir / f"bin-{sizes}"))
    corpus = {name: (raw / name).read_text().splitlines()
              for name in ("train.src", "train.tgt", "test.src", "test.tgt")}
    print("[demo] training the DROP word aligner", flush=True)
    aligner = train_aligner(corpus["train.src"], corpus["train.tgt"])

    try:
        meteor = Meteor("other")
    except (RuntimeError, FileNotFoundError) as err:
        print(f"[demo] METEOR skipped: {err}", flush=True)
        meteor = None
    rows = []
    try:
        for i, name in enumerate(names, 1):
            print(f"[demo] {i}/{len(names)} {name}: train {args.updates} updates, generate, "
                  "measure", flush=True)
            rows.append(run_one(name, data, args.work_dir, args.updates, corpus, meteor,
                                aligner))
            print(f"[demo]     BLEU {rows[-1]['bleu']:.2f}", flush=True)
    finally:
        if meteor:
            meteor.close()

    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m sparse_attn_plugin.demo", *map(shlex.quote, given)])
    settings = (f"{args.updates} updates of the `MODEL_FLAGS` model in "
                f"`sparse_attn_plugin/demo.py`, {args.train_size} training pairs, beam 5")
    drawn = figures(rows, args.work_dir, data, args.out)
    report = render(rows, settings, command, [p.name for p in drawn])
    write_json_atomic(args.out / "demo.json", {"rows": rows, "settings": settings})
    write_text_atomic(args.out / "README.md", report)
    print(report)
    print(f"[demo] done in {time.time() - start:.0f} s; wrote {args.out / 'README.md'}")


if __name__ == "__main__":
    main()
