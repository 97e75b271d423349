"""Each row's BLEU against softmax's on the same sentences: the paired bootstrap of
:mod:`...evaluation.significance` on every test split, from the translations the rows
keep in their work folders (``generate-SPLIT.log``)."""

from pathlib import Path
from typing import Dict, Optional, Sequence

from ...evaluation import read_generate_output
from ...evaluation.significance import paired_bootstrap
from ...files import read_lines

#: The key of a row's record that holds it: ``{split: PairedBleu.record()}``.
KEY = "bleu_vs_softmax"


def pair_with_softmax(rows: Sequence[dict], work: Path, tests: Sequence[str]) -> None:
    """Set :data:`KEY` on every row but softmax's: computed where both rows'
    translations of every split are in ``work``; else the row's recorded one, while it
    still matches the two rows' BLEU (a row trained again since makes it stale); else
    none."""
    base = next((row for row in rows if row["attention"] == "softmax"), None)
    for row in rows:
        if base is None or row is base:
            continue
        paired = _from_translations(work, row["attention"], tests) or _recorded(row, base)
        if paired:
            row[KEY] = paired
        else:
            row.pop(KEY, None)


def _from_translations(work: Path, name: str, tests: Sequence[str]) -> Optional[Dict]:
    logs = {split: (work / name / f"generate-{split}.log", work / "softmax" /
                    f"generate-{split}.log") for split in tests}
    if not all(ours.exists() and theirs.exists() for ours, theirs in logs.values()):
        return None
    paired = {}
    for split, (ours, theirs) in logs.items():
        system = read_generate_output(read_lines(ours))
        baseline = read_generate_output(read_lines(theirs))
        if system.references != baseline.references:
            raise ValueError(f"{ours} and {theirs} translate different sentences")
        paired[split] = paired_bootstrap(system.hypotheses, baseline.hypotheses,
                                         system.references).record()
    return paired


def _recorded(row: dict, base: dict) -> Optional[Dict]:
    paired = row.get(KEY)
    if not paired or set(paired) != set(row["bleu"]):
        return None
    fresh = all(abs(paired[split]["difference"] - (row["bleu"][split] - base["bleu"][split]))
                < 1e-6 for split in paired)
    return paired if fresh else None
