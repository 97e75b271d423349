"""Fertilities from a word aligner (Malaviya et al. 2018): per source token, the target
tokens aligned to it; the ``.fert`` files ``--task sparse_translation`` reads, and the
GUIDED table (per word type, the largest fertility seen) ``--fertility-table`` reads.
"""

from typing import Dict, Iterable, List, Sequence

from .aligner import FERTILITY_SYMMETRIZATION, SINK, Aligner, Link, Tokens, tokens_of


def token_fertilities(links: Iterable[Link], src_len: int, slack: int = 0) -> List[int]:
    """Per source position, the number of target positions linked to it, plus ``slack``."""
    counts = [slack] * src_len
    for i, _ in set(links):
        if 0 <= i < src_len:
            counts[i] += 1
    return counts


def aligner_fertilities(aligner: Aligner, sources: Sequence[Tokens], targets: Sequence[Tokens],
                        symmetrize: str = FERTILITY_SYMMETRIZATION) -> List[List[int]]:
    """Per sentence, per source token, the target tokens ``aligner`` links to it; target
    tokens a sink model gives to its sink count for no source token."""
    links = aligner.align_batch(sources, targets, symmetrize)
    return [token_fertilities(lk, len(tokens_of(src))) for lk, src in zip(links, sources)]


def fertility_text(fertilities: Sequence[Sequence[int]], slack: int = 0) -> str:
    """The ``.fert`` file ``--task sparse_translation`` reads: a line of counts (plus
    ``slack``) per sentence."""
    return "".join(" ".join(str(f + slack) for f in ferts) + "\n" for ferts in fertilities)


def guided_text(table: Dict[str, int]) -> str:
    """The GUIDED table file ``--fertility-table`` reads: ``word<TAB>fertility`` lines."""
    return "".join(f"{word}\t{fert}\n" for word, fert in sorted(table.items()))


def guided_fertilities(sources: Sequence[Tokens],
                       fertilities: Sequence[Sequence[int]]) -> Dict[str, int]:
    """Malaviya et al.'s GUIDED table: per source word type the largest fertility seen,
    at least 1 (the sink is left out)."""
    table: Dict[str, int] = {}
    for src, ferts in zip(sources, fertilities):
        for word, fert in zip(tokens_of(src), ferts):
            if word != SINK:
                table[word] = max(table.get(word, 1), int(fert))
    return table

