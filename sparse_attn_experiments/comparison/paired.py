"""Each row's BLEU against softmax's on the same sentences: the paired bootstrap of
:mod:`...evaluation.significance` on every test split, from the rows' translations (their
work folders' generate logs, else the ones the report keeps: :mod:`.translations`).

Only rows trained to the same point as softmax's are tested (:func:`stopped_apart`): a
row that trained another number of updates because the time budget ended it (how far it
got hangs on the machine's speed and load) or because it met another update cap gets its
difference with the reason and no test (:data:`UNTESTED`), since the test would credit the
attention with a gap the training length made.
"""

from pathlib import Path
from typing import Dict, Optional, Sequence

from sparse_attn_plugin.evaluation.significance import paired_bootstrap

from ..pipeline import STOPPED
from . import translations

#: The key of a row's record that holds it: ``{split: PairedBleu.record()}``.
KEY = "bleu_vs_softmax"
#: The key of a row trained to another point than softmax's, in place of :data:`KEY`:
#: ``{"why": stopped_apart(...), "difference": {split: BLEU - softmax's}}``.
UNTESTED = "bleu_vs_softmax_untested"


def stopped_apart(row: dict, base: dict) -> Optional[str]:
    """Why ``row`` and ``base`` (softmax's) did not train to the same point, or None where
    they did: the same number of updates, both converged, or one converged before the
    update cap the other reached (each stopped by the same rule). Another number of
    updates where the time budget ended either (the machine's speed and load chose it),
    or where both met the update cap, or one met it before the other converged, is
    another point."""
    if row.get("updates") == base.get("updates"):
        return None
    ended = {r["stopped"]: r["updates"] for r in (row, base)}
    if set(ended) == {"converged"} or (set(ended) == {"converged", "cap"}
                                       and ended["cap"] >= ended["converged"]):
        return None
    return (f"{row['attention']} trained {row['updates']} updates "
            f"({STOPPED[row['stopped']]}), softmax {base['updates']} "
            f"({STOPPED[base['stopped']]})")


def untested(why: str, bleu: Dict[str, float], base_bleu: Dict[str, float]) -> Dict:
    """The :data:`UNTESTED` record: ``why`` and the BLEU differences on every split."""
    return {"why": why, "difference": {split: bleu[split] - base_bleu[split]
                                       for split in bleu}}


def pair_with_softmax(rows: Sequence[dict], work: Path, out: Path,
                      tests: Dict[str, str]) -> None:
    """Set :data:`KEY` on every row but softmax's trained to the same point: computed
    where both rows' translations of every split are at hand (in ``work`` or kept in
    ``out``) and a row in ``work`` gives the references; else the row's recorded one, while
    it still matches the two rows' BLEU (a row trained again since makes it stale); else
    none. A row trained to another point (:func:`stopped_apart`) gets :data:`UNTESTED`."""
    base = next((row for row in rows if row["attention"] == "softmax"), None)
    if base is None:
        return
    names = [row["attention"] for row in rows]
    # Read once: every row is paired against the same references and softmax output.
    refs = {split: translations.references(split, work, names) for split in tests}
    baseline = {split: translations.hypotheses("softmax", split, work, out, tests)
                for split in tests}
    for row in rows:
        if row is base:
            continue
        why = stopped_apart(row, base)
        paired = None if why else (
            _from_translations(row["attention"], refs, baseline, work, out, tests)
            or _recorded(row, base))
        row.pop(KEY, None)
        row.pop(UNTESTED, None)
        if why:
            row[UNTESTED] = untested(why, row["bleu"], base["bleu"])
        elif paired:
            row[KEY] = paired


def _from_translations(name: str, refs: Dict, baseline: Dict, work: Path, out: Path,
                       tests: Dict[str, str]) -> Optional[Dict]:
    paired = {}
    for split in tests:
        system = translations.hypotheses(name, split, work, out, tests)
        if system is None or baseline[split] is None or refs[split] is None:
            return None
        if not len(system) == len(baseline[split]) == len(refs[split]):
            raise ValueError(f"{split}: {name} has {len(system)} translations, softmax "
                             f"{len(baseline[split])}, for {len(refs[split])} references")
        paired[split] = paired_bootstrap(system, baseline[split], refs[split]).record()
    return paired


def _recorded(row: dict, base: dict) -> Optional[Dict]:
    paired = row.get(KEY)
    if not paired or set(paired) != set(row["bleu"]):
        return None
    return paired if still_matches(paired, row["bleu"], base["bleu"]) else None


def still_matches(paired: Dict, bleu: Dict, base_bleu: Dict) -> bool:
    """Whether a recorded pairing ``{split: PairedBleu.record()}`` still gives the
    difference of the two BLEUs it paired (one row trained or tuned again makes it stale)."""
    return all(abs(paired[split]["difference"] - (bleu[split] - base_bleu[split])) < 1e-6
               for split in paired)
