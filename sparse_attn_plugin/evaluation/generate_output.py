"""Read ``fairseq-generate`` output without a grep/sort/cut pipeline.

fairseq prints, per sentence and in batch order, ``S-id`` (source), ``T-id``
(reference), ``H-id<TAB>score<TAB>tokens`` (hypothesis, post-processed as
``--post-process``/``--remove-bpe`` asks), ``D-id`` (detokenised hypothesis) and
``P-id`` (positional scores). Only the best (first) hypothesis per id is kept.
"""

from dataclasses import dataclass
from typing import Dict, Iterable, List


@dataclass(frozen=True)
class GenerateOutput:
    """Sources, references, hypotheses and their scores, ordered by sentence id."""

    ids: List[int]
    sources: List[str]
    references: List[str]
    hypotheses: List[str]
    scores: List[float]


def read_generate_output(lines: Iterable[str]) -> GenerateOutput:
    """Parse fairseq-generate's stdout; raise ValueError if an id lacks a hypothesis."""
    fields: Dict[str, Dict[int, List[str]]] = {"S": {}, "T": {}, "H": {}}
    for line in lines:
        tag, sep, rest = line.rstrip("\n").partition("\t")
        kind, dash, number = tag.partition("-")
        if not sep or not dash or kind not in fields or not number.isdigit():
            continue
        fields[kind].setdefault(int(number), rest.split("\t"))
    ids = sorted(fields["H"])
    if not ids:
        raise ValueError("no hypotheses (H- lines) in the fairseq-generate output")
    missing = sorted(set(fields["S"]) - set(ids))
    if missing:
        raise ValueError(f"sentence ids without a hypothesis: {missing[:10]}")

    def text(kind, i):
        return fields[kind].get(i, [""])[-1]

    return GenerateOutput(
        ids=ids,
        sources=[text("S", i) for i in ids],
        references=[text("T", i) for i in ids],
        hypotheses=[fields["H"][i][-1] if len(fields["H"][i]) > 1 else "" for i in ids],
        scores=[float(fields["H"][i][0]) for i in ids],
    )
