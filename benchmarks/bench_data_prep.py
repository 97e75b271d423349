"""Time and disk of corpus preparation, measured on an IWSLT14-sized stand-in and scaled
to each corpus (the corpora themselves cannot be downloaded on the machine that ran it).

The stand-in is a ``de-en.tgz`` in IWSLT14's real layout whose training talks are the
synthetic corpus (``sparse_attn_data.synthetic``: 10k-word Zipfian vocabularies, its largest;
3-40 tokens a sentence) at IWSLT14's size. ``python -m sparse_attn_data.iwslt14_de_en`` runs on
it offline, with the aligner's fertilities, and the seconds and bytes of each stage are
read from its ``PREPARED.json``. The estimates for the other corpora multiply the
per-pair cost of each stage their recipe runs by their published pair counts: linear for
tokenising, subwords, binarising and the aligner, rough for learning BPE (which grows
with the vocabulary, not the pairs). Real text has more characters per token than the
stand-in, so read the estimates as lower bounds.

    python benchmarks/bench_data_prep.py --out results/bench [--pairs 160000] [--workers 2]
"""

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

from sparse_attn_data import (
    iwslt14_de_en,
    iwslt15_en_vi,
    kftt_ja_en,
    recipe,
    wmt14_en_de,
    wmt16_ro_en,
)
from sparse_attn_data.synthetic import write_corpus
from sparse_attn_experiments.provenance import provenance_header
from sparse_attn_plugin.files import write_json_atomic, write_text_atomic
from sparse_attn_plugin.markdown import markdown_table
from sparse_attn_plugin.reading import read_lines

# the archives the tests run the recipes on (tests/helpers/archives.py), here at full size
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "helpers"))
import archives  # noqa: E402

CORPORA = (iwslt14_de_en, iwslt15_en_vi, wmt14_en_de, kftt_ja_en, wmt16_ro_en)
#: Published training pairs where the recipe does not list them (before cleaning).
TRAIN_PAIRS = {"wmt14_en_de": 4_500_000, "wmt16_ro_en": 600_000}


def stand_in(folder: Path, pairs: int, seed: int) -> None:
    """The IWSLT14-format archive of ``pairs`` synthetic training pairs (and IWSLT14's
    6,750 test sentences, made up)."""
    write_corpus(folder / "synthetic", seed=seed, train=pairs, valid=1, test=1,
                 src_vocab=10000, tgt_vocab=10000)
    train = list(zip(read_lines(folder / "synthetic" / "train.src"),
                     read_lines(folder / "synthetic" / "train.tgt")))
    archives.iwslt14_archive(folder / "raw", test_each=1350, pairs=train)


def measure(folder: Path, workers: int) -> dict:
    started = time.time()
    dest = recipe.main(iwslt14_de_en.RECIPE, [
        "--raw-dir", folder / "raw", "--dest-dir", folder / "data-bin", "--work-dir",
        folder / "work", "--fertility", "--keep-intermediates", "--workers", workers])
    prepared = json.loads((dest / "PREPARED.json").read_text())
    prepared["total_seconds"] = time.time() - started
    return prepared


def estimates(prepared: dict) -> list:
    """Per corpus: estimated minutes of the stages its recipe runs, minutes of the
    aligner's fertilities (``--fertility``), and gigabytes (archives excluded)."""
    pairs = sum(prepared["sentences"].values())
    per_pair = {name: s / pairs for name, s in prepared["seconds"].items()}
    stage = {name.split(" ")[0]: cost for name, cost in per_pair.items()}
    per_pair_b = (prepared["bytes"]["intermediates"] + prepared["bytes"]["data-bin"]) / pairs
    rows = []
    for module in CORPORA:
        r = module.RECIPE
        total = sum(r.expected.values()) + TRAIN_PAIRS.get(r.name, 0)
        cost = stage["raw"] + stage["binarise"] + (stage["normalise,"] if r.tokenize else 0)
        if r.subwords != "none":
            cost += stage["learn"] + stage["apply"]
        rows.append([r.title, f"{total:,}", f"{total * cost / 60:.0f}",
                     f"{total * stage['aligner'] / 60:.0f}", f"{total * per_pair_b / 1e9:.1f}"])
    return rows


def render(prepared: dict, command: str, workers: int) -> str:
    pairs = prepared["sentences"]
    stage_rows = [[name, f"{s:.1f}"] for name, s in prepared["seconds"].items()]
    disk = prepared["bytes"]
    return "\n".join([
        "# Corpus preparation: time and disk", "", provenance_header(command),
        "Measured: `python -m sparse_attn_data.iwslt14_de_en --fertility "
        f"--workers {workers}` on an "
        "IWSLT14-format archive of synthetic text at IWSLT14's size (training "
        f"{pairs['train']:,} pairs after cleaning, valid {pairs['valid']:,}, test "
        f"{pairs['test']:,}; 10k-word vocabularies, 10k BPE merges), offline, in "
        f"{prepared['total_seconds'] / 60:.1f} min.", "",
        markdown_table(["stage", "seconds"], stage_rows), "",
        f"Disk: archive {disk['archives'] / 1e6:.0f} MB, intermediates (raw, tokenised, "
        f"subword text) {disk['intermediates'] / 1e6:.0f} MB, data-bin "
        f"{disk['data-bin'] / 1e6:.0f} MB.", "",
        "## Estimates for each corpus (scaled from the measurement above, not measured)", "",
        "Per-pair cost of the stages above times the corpus's published pairs (WMT14 "
        "En-De and WMT16 Ro-En training counts are approximate, before cleaning); disk is "
        "intermediates plus data-bin, without the archives. Real sentences have more "
        "characters than the stand-in's: read these as lower bounds.", "",
        markdown_table(["corpus", "pairs", "minutes (its recipe's stages)",
                        "+ minutes with --fertility", "GB"], estimates(prepared)), ""])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(".work/bench"),
                        help="default .work/bench; the project publishes with --out "
                             "results/bench")
    parser.add_argument("--pairs", type=int, default=167_500,
                        help="training pairs of the stand-in (default: IWSLT14's before "
                             "the validation split)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.pairs < 100 or args.workers < 1:
        parser.error("--pairs must be at least 100 and --workers at least 1")
    command = "python benchmarks/bench_data_prep.py " + shlex.join(argv)
    with tempfile.TemporaryDirectory() as tmp:
        stand_in(Path(tmp), args.pairs, args.seed)
        prepared = measure(Path(tmp), args.workers)
    report = render(prepared, command, args.workers)
    write_text_atomic(args.out / "data_prep.md", report)
    write_json_atomic(args.out / "data_prep.json", {"command": command, **prepared})
    print(report)


if __name__ == "__main__":
    main()
