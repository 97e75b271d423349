"""Each row's BLEU against softmax's on the same sentences: the paired bootstrap of
:mod:`...evaluation.significance` on every test split, from the rows' translations (their
work folders' generate logs, else the ones the report keeps: :mod:`.translations`)."""

from pathlib import Path
from typing import Dict, Optional, Sequence

from sparse_attn_plugin.evaluation.significance import paired_bootstrap

from . import translations

#: The key of a row's record that holds it: ``{split: PairedBleu.record()}``.
KEY = "bleu_vs_softmax"


def pair_with_softmax(rows: Sequence[dict], work: Path, out: Path,
                      tests: Dict[str, str]) -> None:
    """Set :data:`KEY` on every row but softmax's: computed where both rows'
    translations of every split are at hand (in ``work`` or kept in ``out``) and a row in
    ``work`` gives the references; else the row's recorded one, while it still matches the
    two rows' BLEU (a row trained again since makes it stale); else none."""
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
        paired = (_from_translations(row["attention"], refs, baseline, work, out, tests)
                  or _recorded(row, base))
        if paired:
            row[KEY] = paired
        else:
            row.pop(KEY, None)


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
