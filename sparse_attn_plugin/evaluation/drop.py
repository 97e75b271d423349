"""DROP: the share of source words a translation leaves out (Malaviya et al. 2018, "Sparse
and Constrained Attention for Neural Machine Translation").

With a word aligner trained on the training data, for every test sentence R is the set of
source positions linked to the reference and M the set linked to the hypothesis::

    DROP = 100 * sum |R \\ M| / sum |R|

The paper symmetrises with grow-diag-final-and (:data:`PUBLISHED_SYMMETRIZATION`), which
hides drops; ``forward`` (:data:`DROP_SYMMETRIZATION`) is the default here. Why, measured on
gold alignments: docs/scoring.md, "DROP".
"""

import importlib.util
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

from tqdm import tqdm

from .aligner import SINK, SYMMETRIZATIONS, check_symmetrize
from .metric import Inputs, Metric, Report, Resource, Setting

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


# -- the metric's entry (:data:`.scoring.METRICS`) --------------------------------------------
#: What ``drop`` options hold where not given: the symmetrisations (one, or a list whose
#: first is the translation's DROP) and the EM iterations of an aligner a driver trains.
DEFAULTS = {"symmetrize": DROP_SYMMETRIZATION, "iterations": 5}


def symmetrizations(options: dict) -> List[str]:
    """The ``symmetrize`` option as a list, the translation's DROP first."""
    names = options["symmetrize"]
    return [names] if isinstance(names, str) else list(names)


def _check(setting: Setting, options: dict) -> Optional[str]:
    """Why DROP cannot be had here (sil-thot, a word aligner), or None."""
    if importlib.util.find_spec("thot") is None:
        return "DROP needs sil-thot: pip install sil-thot"
    if setting.aligner is None:
        return ("DROP needs a word aligner: --aligner MODEL_DIR (train one with "
                "sparse-attn-align train)")
    return None


def _check_options(options: dict, where: str) -> Optional[str]:
    names = options.get("symmetrize", DEFAULTS["symmetrize"])
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not names or any(n not in SYMMETRIZATIONS for n in names):
        return (f"`{where}.symmetrize` must be one or a list of {', '.join(SYMMETRIZATIONS)}, "
                f"not {names!r}")
    iterations = options.get("iterations", DEFAULTS["iterations"])
    if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
        return f"`{where}.iterations` must be a positive integer, not {iterations!r}"
    return None


def _score(inputs: Inputs) -> Dict[str, DropResult]:
    """DROP under each symmetrisation asked for; the first is the translation's DROP."""
    return {name: corpus_drop(inputs.resource, inputs.sources, inputs.hypotheses,
                              inputs.references, symmetrize=name, progress=inputs.progress)
            for name in symmetrizations(inputs.options)}


def _first(by_symmetrization: Dict[str, DropResult]) -> DropResult:
    return next(iter(by_symmetrization.values()))


def _note(report: Report) -> str:
    names, options = symmetrizations(report.options), report.options
    others = f" (also {', '.join(names[1:])}, in columns of their own)" if names[1:] else ""
    return ("DROP: % of the source words aligned to the reference that nothing in the "
            "translation is aligned to; fast_align (sil-thot) trained by this run on "
            f"{', '.join(report.aligners) or '?'} training pairs with `{SINK}` appended to "
            f"every source sentence, {options['iterations']} EM iterations per direction; "
            f"**symmetrisation: {names[0]}**{others}. The paper's DROP used "
            f"{PUBLISHED_SYMMETRIZATION}, which hides drops that the forward direction shows "
            "(see docs/scoring.md).")


def _column(name: str):
    return f"DROP, {name}", lambda record: record["drop_by_symmetrization"][name]


DROP = Metric(
    "DROP", "drop", False, _score, value=lambda by: _first(by).score,
    details=lambda by: {"symmetrize": _first(by).symmetrize,
                        "aligned_source_words": _first(by).aligned},
    fields=lambda by: {"drop_by_symmetrization": {name: result.score
                                                  for name, result in by.items()}},
    sentences=lambda by: [f"{dropped}/{aligned}" for dropped, aligned in _first(by).sentences],
    unmet=lambda inputs: None if inputs.sources is not None else "DROP needs the sources",
    resource=Resource(make=lambda setting, options: setting.aligner(), check=_check),
    needs_sources=True, defaults=DEFAULTS, check_options=_check_options,
    arguments=(("--symmetrize", "symmetrize", {
        "choices": SYMMETRIZATIONS, "default": DROP_SYMMETRIZATION,
        "help": f"DROP's alignment symmetrisation (default {DROP_SYMMETRIZATION}, which "
                f"tracks true drops best; the paper's is {PUBLISHED_SYMMETRIZATION}, see "
                "docs/scoring.md)"}),),
    summary=("the share of aligned source words the translation leaves unaligned: "
             f"fast_align trained on the training pairs, `{DROP_SYMMETRIZATION}` alignments, "
             "lower is better"),
    header=lambda options: f"DROP ({symmetrizations(options)[0]})",
    note=_note, columns=lambda options: [_column(name)
                                         for name in symmetrizations(options)[1:]])
