"""Each row's best checkpoint decoded again with one other normaliser at every site
(``sparse-attn-compare --decode-with NAME``: ``fairseq-generate --model-overrides``),
scored against the row's own translations of the same sentences.

The train/decode switch of Zhao et al. (2019, Table 5) and Xu et al. (2021, Table 4),
run on any comparison. It tells where a row's gap to softmax comes from: a row that
trails softmax and translates about as well when decoded with softmax learned weights
that translate worse (the gap is in training); one that gains when so decoded loses
BLEU to its normaliser at decoding time.

The record, :data:`KEY` of a row: ``{"attention": NAME, "bleu": {split: BLEU},
"vs_own": {split: PairedBleu.record()}}`` (the switched decoding minus the row's own).
"""

from pathlib import Path
from typing import Dict, List, Optional, Sequence

from sparse_attn_plugin.evaluation import read_generate_output, scoring
from sparse_attn_plugin.evaluation.significance import paired_bootstrap
from sparse_attn_plugin.normalizer_registry import names
from sparse_attn_plugin.reading import read_lines
from sparse_attn_plugin.sites import SITES

from .corpus import Corpus
from .models import Architecture
from .run import generate_flags_here, save_row, translate
from .translations import generate_log

KEY = "decoded_with"


def choices(architecture: Architecture) -> List[str]:
    """The normalisers a whole model of ``architecture`` can be decoded with: those that
    fit every site and that its model can use."""
    return [name for name in names(sites=SITES) if name not in architecture.cannot_use]


def overrides(name: str) -> str:
    """``--model-overrides`` that put normaliser ``name`` at every site: ``--attn-fn``
    and each per-site flag (a site a row chose by its own flag keeps it otherwise)."""
    return repr({"attn_fn": name, **{f"{site}_attn_fn": name for site in SITES}})


def switched_log(work: Path, row: str, split: str, name: str) -> Path:
    """Where row ``row``'s work folder keeps its translations of ``split`` decoded with
    normaliser ``name``."""
    return Path(work) / row / f"generate-{split}.decoded-{name}.log"


def decode_with(row: dict, name: str, work: Path, corpus: Corpus) -> Optional[Dict]:
    """Row ``row`` (as :func:`.run.run_row` returns it) decoded with normaliser ``name``:
    its :data:`KEY` record, the one it holds where that was for ``name`` already, or None
    where there is nothing to switch (the row is ``name`` itself, or has no normaliser)
    or nothing to decode (its work folder holds no checkpoint)."""
    held = row.get(KEY)
    if held and held["attention"] == name:
        return held
    checkpoint = Path(work) / row["attention"] / "checkpoint_best.pt"
    if row["attention"] == name or not row["zero_fraction"] or not checkpoint.exists():
        return None
    flags = [*generate_flags_here(row["spec"]), "--model-overrides", overrides(name)]
    record = {"attention": name, "bleu": {}, "vs_own": {}}
    for split in corpus.tests:
        out = translate(corpus, checkpoint, flags, split,
                        switched_log(work, row["attention"], split, name)).output
        own = read_generate_output(read_lines(generate_log(work, row["attention"], split)))
        record["bleu"][split] = scoring.score(out.hypotheses, out.references).bleu.score
        record["vs_own"][split] = paired_bootstrap(out.hypotheses, own.hypotheses,
                                                   out.references).record()
    return record


def switch_rows(rows: Sequence[dict], name: Optional[str], work: Path, corpus: Corpus) -> None:
    """Set every row's :data:`KEY` to its decoding with normaliser ``name`` (see
    :func:`decode_with`), kept in its work folder's ``row.json`` so a later run reuses it;
    with no ``name``, the rows carry none (their folders keep theirs)."""
    for row in rows:
        held = row.get(KEY)
        record = decode_with(row, name, work, corpus) if name else None
        if record:
            row[KEY] = record
        else:
            row.pop(KEY, None)
        if name and record is not held:
            save_row(Path(work) / row["attention"], row)
