"""Beam search's length penalty tuned on the validation split, for every row alike
(``sparse-attn-compare --tune-lenpen 1,1.5,2,3``).

fairseq ranks finished hypotheses by log-probability over length to the power ``--lenpen``
(1 by default): a larger penalty favours longer translations, so a row translating short
(hyp/ref below 1, charged by BLEU's brevity penalty) may owe its gap to softmax to where
its beam search ends sentences. Each row's best checkpoint translates ``valid`` at every
penalty of the grid; the best (the first on a tie) translates every test split, paired
with softmax's at its own tuned penalty (Koehn 2004). Tuning on held-out data is the
usual NMT practice (Wu et al. 2016, GNMT, section 7); tuning every row alike keeps the
comparison fair.
"""

from pathlib import Path
from typing import Dict, List, Optional, Sequence

from sparse_attn_plugin.evaluation import read_generate_output, scoring
from sparse_attn_plugin.evaluation.significance import paired_bootstrap
from sparse_attn_plugin.reading import read_lines

from .corpus import Corpus
from .paired import still_matches, stopped_apart, untested
from .run import generate_flags_here, save_row, translate

#: A row's record: ``{"grid": [penalty, ...], "valid": {penalty: BLEU}, "lenpen": chosen,
#: "bleu": {split: BLEU}, "length_ratio": {split: hyp/ref}, "vs_softmax": {split:
#: PairedBleu.record()}}``, penalties as ``str`` (JSON's keys); ``vs_softmax`` on every row
#: but softmax's where both were tuned, :data:`UNTESTED` instead where they stopped apart.
KEY = "tuned_lenpen"
#: The key, in place of ``vs_softmax``, of a row trained to another point than softmax's.
UNTESTED = "vs_softmax_untested"


def parse_grid(text: str) -> List[str]:
    """``"1,1.5,2"`` -> ``["1", "1.5", "2"]``, each a number in its shortest form;
    ValueError naming what is not one, or where the grid is empty or repeats a penalty."""
    grid = []
    for item in text.split(","):
        try:
            grid.append(f"{float(item):g}")
        except ValueError:
            raise ValueError(f"{item.strip()!r} is not a number") from None
        if grid[-1] in ("inf", "-inf", "nan"):
            raise ValueError(f"{item.strip()!r} is not a finite number")
    if len(set(grid)) != len(grid):
        raise ValueError(f"{text!r} repeats a penalty")
    return grid


def lenpen_log(work: Path, row: str, split: str, penalty: str) -> Path:
    """Where row ``row``'s work folder keeps its translations of ``split`` at length
    penalty ``penalty``."""
    return Path(work) / row / f"generate-{split}.lenpen-{penalty}.log"


def tune(row: dict, grid: Sequence[str], work: Path, corpus: Corpus) -> Optional[Dict]:
    """Row ``row``'s :data:`KEY` record over ``grid`` (without ``vs_softmax``): the one it
    holds where that was over the same grid, else made from its best checkpoint; None
    where its work folder holds no checkpoint."""
    held = row.get(KEY)
    if held and held["grid"] == list(grid):
        return held
    checkpoint = Path(work) / row["attention"] / "checkpoint_best.pt"
    if not checkpoint.exists():
        return None
    flags = generate_flags_here(row["spec"])

    def decoded(split, penalty):
        return translate(corpus, checkpoint, [*flags, "--lenpen", penalty], split,
                         lenpen_log(work, row["attention"], split, penalty)).output

    valid = {}
    for penalty in grid:
        out = decoded("valid", penalty)
        valid[penalty] = scoring.score(out.hypotheses, out.references).bleu.score
    chosen = max(grid, key=lambda penalty: valid[penalty])  # the first of equals
    record = {"grid": list(grid), "valid": valid, "lenpen": chosen, "bleu": {},
              "length_ratio": {}}
    for split in corpus.tests:
        out = decoded(split, chosen)
        bleu = scoring.score(out.hypotheses, out.references).bleu
        record["bleu"][split] = bleu.score
        record["length_ratio"][split] = bleu.length_ratio
    return record


def tune_rows(rows: Sequence[dict], grid: Optional[Sequence[str]], work: Path,
              corpus: Corpus) -> None:
    """Set every row's :data:`KEY` to its tuning over ``grid`` (see :func:`tune`), paired
    with softmax's, kept in its work folder's ``row.json`` so a later run reuses it; with
    no ``grid``, the rows carry none (their folders keep theirs)."""
    held = {row["attention"]: row.get(KEY) for row in rows}
    for row in rows:
        record = tune(row, grid, work, corpus) if grid else None
        if record:
            row[KEY] = record
        else:
            row.pop(KEY, None)
    if grid:
        _pair_with_softmax(rows, work, corpus)
        for row in rows:
            if row.get(KEY) != held[row["attention"]]:
                save_row(Path(work) / row["attention"], row)


def _pair_with_softmax(rows: Sequence[dict], work: Path, corpus: Corpus) -> None:
    """Each tuned row's ``vs_softmax``: from both rows' translations at their tuned
    penalties where the work folder holds them, else the recorded one while it matches
    the two rows' tuned BLEU, else none; ``vs_softmax_untested`` instead for a row
    trained to another point than softmax's (:func:`.paired.stopped_apart`)."""
    softmax = next((row for row in rows if row["attention"] == "softmax" and KEY in row),
                   None)
    base = softmax[KEY] if softmax else None
    for row in rows:
        record = row.get(KEY)
        if not record or row["attention"] == "softmax":
            continue
        record = {k: v for k, v in record.items() if k not in ("vs_softmax", UNTESTED)}
        why = stopped_apart(row, softmax) if softmax else None
        if why:
            row[KEY] = {**record, UNTESTED: untested(why, record["bleu"], base["bleu"])}
            continue
        paired = _from_logs(row["attention"], record, base, work, corpus) if base else None
        held = row[KEY].get("vs_softmax")
        if paired is None and base and held and still_matches(held, record["bleu"],
                                                               base["bleu"]):
            paired = held
        row[KEY] = {**record, "vs_softmax": paired} if paired else record


def _from_logs(name: str, record: dict, base: dict, work: Path,
               corpus: Corpus) -> Optional[Dict]:
    paired = {}
    for split in corpus.tests:
        logs = (lenpen_log(work, name, split, record["lenpen"]),
                lenpen_log(work, "softmax", split, base["lenpen"]))
        if not all(log.exists() for log in logs):
            return None
        system, baseline = (read_generate_output(read_lines(log)) for log in logs)
        paired[split] = paired_bootstrap(system.hypotheses, baseline.hypotheses,
                                         baseline.references).record()
    return paired
