"""Read ``fairseq-generate`` (and ``fairseq-interactive``) output without a
grep/sort/cut pipeline.

fairseq prints, per sentence and in batch order, ``S-id`` (source), ``T-id``
(reference; ``fairseq-interactive`` prints none), ``H-id<TAB>score<TAB>tokens``
(hypothesis, post-processed as ``--post-process``/``--remove-bpe`` asks), ``D-id``
(detokenised hypothesis) and ``P-id`` (positional scores). Only the best (first)
hypothesis per id is kept. Ids run from 0: a missing one is a sentence fairseq did not
translate (its last-batch bug, docs/scoring.md), and such partial output is refused
rather than scored.
"""

import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from ..reading import InputError

#: How fairseq writes an out-of-vocabulary word in T- lines (``escape_unk``): the
#: reference word itself is lost.
ESCAPED_UNK = "<<unk>>"

_LINE_KINDS = {"S": "source", "T": "reference", "H": "hypothesis"}
#: What fairseq-generate writes after the sentences (its log shares the output): how many
#: it translated, and, with references, its BLEU line.
TRANSLATED = re.compile(r"\bTranslated ([\d,]+) sentences\b")
FINISHED = re.compile(r"^Generate \S+ with beam=\d+: ")


def unknown_words(references: Optional[List[str]], name) -> Optional[str]:
    """A warning where fairseq's T- lines hold ``<<unk>>`` (None where none do): they are
    not the references, and scores against them differ from the real ones'."""
    unknown = sum(ESCAPED_UNK in line for line in references or ())
    return (f"{unknown} of the {len(references)} references (T- lines) in {name} hold "
            f"{ESCAPED_UNK}, fairseq's mark for a word outside the model's vocabulary: they are "
            "not the real references, and the scores differ from theirs") if unknown else None


@dataclass(frozen=True)
class GenerateOutput:
    """Sources, references, hypotheses and their scores, ordered by sentence id; sources
    or references None where the output holds no S- or T- lines."""

    ids: List[int]
    sources: Optional[List[str]]
    references: Optional[List[str]]
    hypotheses: List[str]
    scores: List[float]


def _fields(lines: Iterable[str]) -> Tuple[Dict[str, Dict[int, Tuple[int, List[str]]]],
                                          Optional[int], bool]:
    """``{"S"|"T"|"H": {id: (line number, tab-separated fields)}}``, the first line of
    each kind and id (the best hypothesis); the count of fairseq's ``Translated N
    sentences`` line (None without one); and whether a closing line (that, or ``Generate
    ... with beam=N: ...``) is there."""
    fields: Dict[str, Dict[int, Tuple[int, List[str]]]] = {kind: {} for kind in _LINE_KINDS}
    translated, closed = None, False
    for number, line in enumerate(lines, 1):
        tag, sep, rest = line.rstrip("\n").partition("\t")
        kind, dash, sentence = tag.partition("-")
        if sep and dash and kind in fields and sentence.isdigit():
            fields[kind].setdefault(int(sentence), (number, rest.split("\t")))
        elif (count := TRANSLATED.search(line)) is not None:
            translated, closed = int(count.group(1).replace(",", "")), True
        elif FINISHED.match(line):
            closed = True
    return fields, translated, closed
    return fields


def _score(name: str, sentence: int, number: int, fields: List[str]) -> float:
    """The score of the H- line ``number`` (its first field)."""
    try:
        return float(fields[0])
    except ValueError:
        raise InputError(f"{name}: line {number}: the score of H-{sentence}, {fields[0]!r}, "
                         "is not a number") from None


def _check_complete(name: str, fields, kind: str, ids: List[int]) -> None:
    """:class:`InputError` naming the first of ``ids`` without a ``kind`` line."""
    missing = [i for i in ids if i not in fields[kind]]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise InputError(f"{name}: sentence {missing[0]}{more} has no {kind}- line "
                         f"({_LINE_KINDS[kind]}) of ids 0-{ids[-1]}: the output is incomplete")


def _texts(name: str, fields, kind: str, ids: List[int]) -> Optional[List[str]]:
    """The ``kind`` lines' texts for ``ids``; None where there are none;
    :class:`InputError` naming the first id without one where some are missing."""
    if not fields[kind]:
        return None
    _check_complete(name, fields, kind, ids)
    return [fields[kind][i][1][-1] for i in ids]


def read_generate_output(lines: Iterable[str], name: str = "fairseq-generate output",
                         references: bool = True, closed: bool = False) -> GenerateOutput:
    """Parse the output (``name`` is the file, for the error messages). Every sentence id
    from 0 to the largest must have its H- line, and S- and T- lines where the output
    has any; as many sentences as fairseq's ``Translated N sentences`` line says, where
    there is one; with ``closed``, that line or fairseq-generate's BLEU line must be there
    (a file cut after its sentence ``k`` is otherwise whole for ids ``0-k``); without
    ``references``, output with no T- lines at all is accepted (``fairseq-interactive``'s).
    :class:`InputError`, one line naming ``name``, the id and (for a bad score) the line,
    where it is not so."""
    fields, translated, finished = _fields(lines)
    if not fields["H"]:
        raise InputError(f"{name}: no hypotheses (H- lines): not fairseq-generate output")
    seen = set().union(*fields.values())
    ids = list(range(max(seen) + 1))
    if translated is not None and translated != len(ids):
        raise InputError(f"{name}: fairseq translated {translated} sentences, the output holds "
                         f"{len(ids)} (ids 0-{ids[-1]}): the output is incomplete")
    if closed and not finished:
        raise InputError(f"{name}: no 'Translated N sentences' or 'Generate ... with beam=' "
                         f"line, which fairseq-generate writes after the sentences: the output "
                         f"looks cut (--partial scores it as it is)")
    _check_complete(name, fields, "H", ids)
    if references and not fields["T"]:
        raise InputError(f"{name}: no references (T- lines), as fairseq-interactive prints "
                         "none: score against a references file (--ref FILE)")
    hypotheses = fields["H"]
    return GenerateOutput(
        ids=ids,
        sources=_texts(name, fields, "S", ids),
        references=_texts(name, fields, "T", ids),
        hypotheses=[hypotheses[i][1][-1] if len(hypotheses[i][1]) > 1 else "" for i in ids],
        scores=[_score(name, i, *hypotheses[i]) for i in ids],
    )
