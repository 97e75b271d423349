"""DROP: the share of source words a translation leaves out (Malaviya et al. 2018, "Sparse
and Constrained Attention for Neural Machine Translation").

With a word aligner trained on the training data, for every test sentence R is the set of
source positions linked to the reference and M the set linked to the hypothesis::

    DROP = 100 * sum |R \\ M| / sum |R|

The paper symmetrises with grow-diag-final-and (:data:`PUBLISHED_SYMMETRIZATION`), which
hides drops; ``forward`` (:data:`DROP_SYMMETRIZATION`) is the default here. Why, measured on
gold alignments: docs/scoring.md, "DROP".
"""

from dataclasses import dataclass
from typing import List, Sequence, Set, Tuple, Union

from tqdm import tqdm

from .aligner import SINK, check_symmetrize

Tokens = Union[str, Sequence[str]]

#: DROP's default: the symmetrisation whose DROP tracks the true rate on the synthetic corpus
DROP_SYMMETRIZATION = "forward"
#: Malaviya et al.'s symmetrisation, for figures comparable with the paper's
PUBLISHED_SYMMETRIZATION = "grow-diag-final-and"
CHUNK = 5000  # sentence pairs aligned per call when a progress bar is shown


@dataclass(frozen=True)
class DropResult:
    """Corpus DROP (a percentage), per-sentence ``(|R \\ M|, |R|)``, the symmetrisation."""

    score: float
    sentences: List[Tuple[int, int]]
    symmetrize: str

    @property
    def dropped(self) -> int:
        return sum(d for d, _ in self.sentences)

    @property
    def aligned(self) -> int:
        return sum(r for _, r in self.sentences)


def _tokens(tokens: Tokens) -> List[str]:
    return tokens.split() if isinstance(tokens, str) else list(tokens)


def _aligned_positions(links, src: List[str]) -> Set[int]:
    """Source positions with a link, the sink (a position past the sentence or a
    ``<SINK>`` token) left out."""
    return {i for i, _ in links if 0 <= i < len(src) and src[i] != SINK}


def _align_all(aligner, sources, targets, symmetrize, desc, progress):
    batch = getattr(aligner, "align_batch", None)
    if not callable(batch):
        return [aligner.align(s, t, symmetrize) for s, t in zip(sources, targets)]
    links = []
    with tqdm(total=len(sources), desc=desc, unit="sent", disable=not progress) as bar:
        for start in range(0, len(sources), CHUNK):
            links += batch(sources[start:start + CHUNK], targets[start:start + CHUNK], symmetrize)
            bar.update(min(CHUNK, len(sources) - start))
    return links


def corpus_drop(aligner, sources: Sequence[Tokens], hypotheses: Sequence[Tokens],
                references: Sequence[Tokens],
                symmetrize: str = DROP_SYMMETRIZATION, progress: bool = False) -> DropResult:
    """DROP of ``hypotheses`` against ``references`` for ``sources`` (strings or tokens).

    ``aligner`` is any object with ``align(src_tokens, tgt_tokens, symmetrize)`` returning
    ``(source position, target position)`` links (an ``aligner.Aligner``, or a stand-in in
    tests); ``align_batch(sources, targets, symmetrize)`` is used when it has one.
    The default ``symmetrize`` is ``forward``, which measures drops far more faithfully
    than the paper's grow-diag-final-and (:data:`PUBLISHED_SYMMETRIZATION`).

    An empty hypothesis drops all of R; a sentence with no aligned source word counts
    0 of 0; the score is 0 when no source word of the corpus is aligned.
    """
    check_symmetrize(symmetrize)
    if not len(sources) == len(hypotheses) == len(references):
        raise ValueError(f"DROP needs one hypothesis and one reference per source: "
                         f"{len(sources)} sources, {len(hypotheses)} hypotheses, "
                         f"{len(references)} references")
    srcs = [_tokens(s) for s in sources]
    hyps = [_tokens(h) for h in hypotheses]
    refs = [_tokens(r) for r in references]
    ref_links = _align_all(aligner, srcs, refs, symmetrize, "DROP: align references", progress)
    hyp_links = _align_all(aligner, srcs, hyps, symmetrize, "DROP: align hypotheses", progress)
    sentences = []
    for src, hyp, r_links, h_links in zip(srcs, hyps, ref_links, hyp_links):
        covered = _aligned_positions(r_links, src)
        translated = _aligned_positions(h_links, src) if hyp else set()
        sentences.append((len(covered - translated), len(covered)))
    aligned = sum(r for _, r in sentences)
    score = 100.0 * sum(d for d, _ in sentences) / aligned if aligned else 0.0
    return DropResult(score=score, sentences=sentences, symmetrize=symmetrize)
