"""A fast_align word aligner (both directions) on sil-thot, with explicit symmetrisation.

    aligner = train_aligner(src_lines, tgt_lines, sink=True)   # 5 EM iterations per direction
    aligner.save("aligner/")                                   # later: Aligner.load("aligner/")
    links = aligner.align("das haus", "the house", symmetrize="forward")  # {(0, 0), (1, 1)}

Dyer et al.'s (2013) fast_align as ``fast_align -d -o -v`` runs it (sil-thot's
``FastAlignModel`` defaults). Links are 0-based ``(source, target)`` positions; the
symmetrisations (:data:`SYMMETRIZATIONS`), the sink and the limits: docs/scoring.md, "The
word aligner".
"""

import hashlib
import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Sequence, Set, Tuple, Union

import numpy as np

from ..errors import SparseAttnError
from ..files import atomic_path, write_json_atomic

#: The sink token (Malaviya et al. 2018) sparse_attn_data's ``--sink`` appends to every source
#: sentence and the aligner appends with ``sink=True``: never a word to align or score.
SINK = "<SINK>"
SYMMETRIZATIONS = ("grow-diag-final-and", "intersection", "union", "forward", "reverse")
#: What ``align`` and ``sparse-attn-align align`` give when not told: grow-diag-final-and
#: (Koehn et al. 2003), the symmetrisation fast_align's documentation applies to its two
#: directions (``atools -c grow-diag-final-and``), for Pharaoh files other tools read. Not
#: DROP's default (``drop.DROP_SYMMETRIZATION``, forward) nor the fertilities'
#: (:data:`FERTILITY_SYMMETRIZATION`).
ALIGN_SYMMETRIZATION = "grow-diag-final-and"
#: The symmetrisation fertilities are counted on: it agrees best with gold fertilities
#: (``tests/unit/test_aligner.py``).
FERTILITY_SYMMETRIZATION = "forward"
MANIFEST = "manifest.json"
FORMAT = "sparse-attn-aligner"
FORMAT_VERSION = 1
UNSEEN_WARNING_THRESHOLD = 0.5  # warn when more than this share of tokens is unseen
_PREFIXES = ("src_trg", "trg_src")  # sil-thot file prefixes of the two directions
_SPECIAL = ("NULL", "UNKNOWN_WORD", "<UNUSED_WORD>")  # sil-thot's reserved vocabulary ids 0-2
_SAMPLE = 20  # most frequent words kept in the manifest

Link = Tuple[int, int]
Tokens = Union[str, Sequence[str]]


class AlignerError(SparseAttnError, ValueError):
    """A model directory that cannot be used, or input the aligner cannot take; one line."""


def _thot():
    try:
        import thot.alignment as alignment
    except ImportError:  # pragma: no cover - sil-thot is a declared dependency
        raise AlignerError("the word aligner needs sil-thot: pip install sil-thot") from None
    return alignment


def tokens_of(tokens: Tokens) -> List[str]:
    return tokens.split() if isinstance(tokens, str) else list(tokens)


def check_symmetrize(symmetrize: str) -> str:
    if symmetrize not in SYMMETRIZATIONS:
        raise ValueError(f"unknown symmetrization {symmetrize!r}; choose from "
                         + ", ".join(SYMMETRIZATIONS))
    return symmetrize


def _vocab_digest(words: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(sorted(words)).encode("utf-8")).hexdigest()


def _model_vocab(model, side: str) -> List[str]:
    """The words of one side of a sil-thot model, its reserved entries left out."""
    size = model.src_vocab_size if side == "src" else model.trg_vocab_size
    get = model.get_src_word if side == "src" else model.get_trg_word
    words = [get(k) for k in range(size)]
    return [w for k, w in enumerate(words) if not (k < len(_SPECIAL) and w == _SPECIAL[k])]


class Aligner:
    """Two trained fast_align directions; ``align`` / ``align_batch`` give link sets."""

    def __init__(self, direct, inverse, manifest: Dict):
        self._direct, self._inverse = direct, inverse
        self.manifest = dict(manifest)
        self.sink = bool(manifest["sink"])
        self.iterations = int(manifest["iterations"])
        self._symmetrized = {}
        self._vocab = None

    # -- aligning ---------------------------------------------------------------------------
    def _symmetrized_model(self, symmetrize: str):
        if symmetrize not in self._symmetrized:
            alignment = _thot()
            model = alignment.SymmetrizedAlignmentModel(self._direct, self._inverse)
            # sil-thot defaults to Och's heuristic: always say which one we mean
            model.heuristic = {
                "grow-diag-final-and": alignment.SymmetrizationHeuristic.GROW_DIAG_FINAL_AND,
                "intersection": alignment.SymmetrizationHeuristic.INTERSECTION,
                "union": alignment.SymmetrizationHeuristic.UNION,
            }[symmetrize]
            self._symmetrized[symmetrize] = model
        return self._symmetrized[symmetrize]

    def align(self, src_tokens: Tokens, tgt_tokens: Tokens,
              symmetrize: str = ALIGN_SYMMETRIZATION) -> Set[Link]:
        """Links ``(i, j)`` (source position, target position) of one sentence pair."""
        return self.align_batch([src_tokens], [tgt_tokens], symmetrize, check_vocabulary=False)[0]

    def align_batch(self, sources: Sequence[Tokens], targets: Sequence[Tokens],
                    symmetrize: str = ALIGN_SYMMETRIZATION,
                    check_vocabulary: bool = True) -> List[Set[Link]]:
        """Links of many sentence pairs at once (one sil-thot call; 10k pairs in about a
        second). Warns when most tokens were never seen in training."""
        check_symmetrize(symmetrize)
        if len(sources) != len(targets):
            raise ValueError(f"align_batch needs as many targets as sources: {len(sources)} "
                             f"sources, {len(targets)} targets")
        srcs = [tokens_of(s) for s in sources]
        tgts = [tokens_of(t) for t in targets]
        if check_vocabulary:
            self.check_vocabulary(srcs, tgts)
        result: List[Set[Link]] = [set() for _ in srcs]
        todo = [k for k, (s, t) in enumerate(zip(srcs, tgts)) if s and t]
        if not todo:
            return result
        with_sink = [srcs[k] + [SINK] if self.sink else srcs[k] for k in todo]
        sub_tgts = [tgts[k] for k in todo]
        if symmetrize == "forward":
            matrices = [m.to_numpy() for _, m in
                        self._direct.get_best_alignments(with_sink, sub_tgts)]
        elif symmetrize == "reverse":
            matrices = [m.to_numpy().T for _, m in
                        self._inverse.get_best_alignments(sub_tgts, with_sink)]
        else:
            model = self._symmetrized_model(symmetrize)
            matrices = [m.to_numpy() for _, m in model.get_best_alignments(with_sink, sub_tgts)]
        for k, matrix in zip(todo, matrices):
            n_src = len(srcs[k])
            result[k] = {(i, j) for i, j in np.argwhere(matrix).tolist() if i < n_src}
        return result

    # -- vocabulary --------------------------------------------------------------------------
    def vocabulary(self) -> Tuple[frozenset, frozenset]:
        """(source words, target words) seen in training (the sink left out)."""
        if self._vocab is None:
            src = frozenset(_model_vocab(self._direct, "src")) - {SINK}
            tgt = frozenset(_model_vocab(self._direct, "trg"))
            self._vocab = (src, tgt)
        return self._vocab

    def unseen_rates(self, sources: Iterable[Tokens],
                     targets: Iterable[Tokens]) -> Tuple[float, float]:
        """Shares of source and of target tokens that never occurred in training."""
        src_vocab, tgt_vocab = self.vocabulary()
        rates = []
        for sentences, vocab in ((sources, src_vocab), (targets, tgt_vocab)):
            total = unseen = 0
            for sentence in sentences:
                words = tokens_of(sentence)
                total += len(words)
                unseen += sum(1 for w in words if w not in vocab)
            rates.append(unseen / total if total else 0.0)
        return rates[0], rates[1]

    def check_vocabulary(self, sources, targets,
                         threshold: float = UNSEEN_WARNING_THRESHOLD) -> Tuple[float, float]:
        """Warn (``UserWarning``) when more than ``threshold`` of the source or target
        tokens are unseen: the model was probably trained on another language pair or
        another preprocessing (BPE, case). Returns the two unseen rates."""
        src_rate, tgt_rate = self.unseen_rates(sources, targets)
        parts = [f"{round(100 * rate)}% of {side} tokens"
                 for side, rate in (("source", src_rate), ("target", tgt_rate))
                 if rate > threshold]
        if parts:
            warnings.warn(f"aligner vocabulary mismatch: {' and '.join(parts)} unseen in "
                          "training; was it trained on this language pair?", stacklevel=3)
        return src_rate, tgt_rate

    # -- saving and loading ------------------------------------------------------------------
    def save(self, directory) -> Path:
        """Write the model to ``directory`` atomically (a temporary directory beside it,
        then a rename). An existing model directory there is replaced; any other
        non-empty directory is refused."""
        directory = Path(directory)
        check_model_destination(directory)
        with atomic_path(directory) as tmp:
            tmp.mkdir()
            for prefix, model in zip(_PREFIXES, (self._direct, self._inverse)):
                if not model.print(str(tmp / prefix)):
                    raise AlignerError(f"{directory}: sil-thot could not write the model")
            write_json_atomic(tmp / MANIFEST, self.manifest)
        return directory

    @classmethod
    def load(cls, directory) -> "Aligner":
        """Load a model written by ``save``; one-line ``AlignerError`` if unusable."""
        directory = Path(directory)
        manifest_path = directory / MANIFEST
        if not directory.is_dir():
            raise AlignerError(f"{directory}: no such aligner model directory")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise AlignerError(f"{directory}: not an aligner model (no readable "
                               f"{MANIFEST}); train one with sparse-attn-align train") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise AlignerError(f"{manifest_path}: not an aligner manifest")
        if manifest.get("version") != FORMAT_VERSION:
            raise AlignerError(f"{manifest_path}: format version {manifest.get('version')} "
                               f"is not {FORMAT_VERSION}; retrain the aligner")
        alignment = _thot()
        models = []
        for prefix in _PREFIXES:
            model = alignment.FastAlignModel()
            if not (directory / f"{prefix}.yml").exists() or not model.load(
                    str(directory / prefix)):
                raise AlignerError(f"{directory}: cannot load the {prefix} model files")
            models.append(model)
        direct, inverse = models
        for side, name, words in (("src", "source", _model_vocab(direct, "src")),
                                  ("tgt", "target", _model_vocab(direct, "trg"))):
            if (len(words) != manifest.get(f"{side}_vocab_size")
                    or _vocab_digest(words) != manifest.get(f"{side}_vocab_sha256")):
                raise AlignerError(f"{directory}: the {name} vocabulary does not match "
                                   f"{MANIFEST}; the model files are damaged or mixed up")
        if (direct.src_vocab_size != inverse.trg_vocab_size
                or direct.trg_vocab_size != inverse.src_vocab_size):
            raise AlignerError(f"{directory}: the two directions have different vocabularies")
        return cls(direct, inverse, manifest)


def check_model_destination(directory) -> None:
    """AlignerError unless ``directory`` is absent, empty or an aligner model (which
    ``Aligner.save`` may replace): never overwrite anything else."""
    directory = Path(directory)
    if not directory.exists():
        return
    if directory.is_dir():
        if not any(directory.iterdir()):
            return
        try:
            manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            manifest = None
        if isinstance(manifest, dict) and manifest.get("format") == FORMAT:
            return
    raise AlignerError(f"{directory}: exists and is not an aligner model; "
                       "refusing to overwrite it")


def _train_direction(model, iterations: int, progress, label: str) -> int:
    used = model.start_training()  # the number of pairs within length limits, not iterations
    for _ in range(iterations):
        model.train()
        if progress is not None:
            progress.set_postfix_str(label)
            progress.update(1)
    model.end_training()
    return used


def train_aligner(src_lines: Sequence[Tokens], tgt_lines: Sequence[Tokens],
                  iterations: int = 5, sink: bool = False, progress: bool = False) -> Aligner:
    """Train fast_align in both directions on parallel sentences (strings or token lists).

    Pairs with an empty side are skipped. ``sink=True`` appends ``<SINK>`` to every
    source sentence. ``progress=True`` shows tqdm bars (pairs, then EM iterations).
    """
    if len(src_lines) != len(tgt_lines):
        raise ValueError(f"train_aligner needs as many target as source sentences: "
                         f"{len(src_lines)} sources, {len(tgt_lines)} targets")
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, not {iterations}")
    alignment = _thot()
    direct, inverse = alignment.FastAlignModel(), alignment.FastAlignModel()
    src_counts, tgt_counts = Counter(), Counter()
    pairs = skipped = 0
    rows = zip(src_lines, tgt_lines)
    if progress:
        from tqdm import tqdm

        rows = tqdm(rows, total=len(src_lines), desc="reading pairs", unit="pair")
    for src, tgt in rows:
        src, tgt = tokens_of(src), tokens_of(tgt)
        if not src or not tgt:
            skipped += 1
            continue
        src_counts.update(src)
        tgt_counts.update(tgt)
        if sink:
            src = src + [SINK]
        direct.add_sentence_pair(src, tgt)
        inverse.add_sentence_pair(tgt, src)
        pairs += 1
    if pairs == 0:
        raise ValueError("train_aligner got no sentence pair with words on both sides")
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=2 * iterations, desc="EM iterations", unit="it")
    try:
        used = [_train_direction(direct, iterations, bar, "source->target"),
                _train_direction(inverse, iterations, bar, "target->source")]
    finally:
        if bar is not None:
            bar.close()
    if min(used) < pairs:
        warnings.warn(f"the aligner left out {pairs - min(used)} of {pairs} sentence pairs "
                      "longer than sil-thot's limit of 1024 tokens", stacklevel=2)
    src_words, tgt_words = _model_vocab(direct, "src"), _model_vocab(direct, "trg")
    try:
        from importlib.metadata import version

        thot_version = version("sil-thot")
    except Exception:  # pragma: no cover - metadata missing in odd installs
        thot_version = "unknown"
    manifest = {
        "format": FORMAT, "version": FORMAT_VERSION, "model": "fast_align (sil-thot)",
        "sil_thot": thot_version, "iterations": iterations, "sink": bool(sink),
        "sink_token": SINK if sink else None, "pairs": pairs, "pairs_used": min(used),
        "pairs_skipped_empty": skipped, "p0": direct.fast_align_p0,
        "src_vocab_size": len(src_words), "tgt_vocab_size": len(tgt_words),
        "src_vocab_sha256": _vocab_digest(src_words),
        "tgt_vocab_sha256": _vocab_digest(tgt_words),
        "src_vocab_sample": [w for w, _ in src_counts.most_common(_SAMPLE)],
        "tgt_vocab_sample": [w for w, _ in tgt_counts.most_common(_SAMPLE)],
    }
    return Aligner(direct, inverse, manifest)


# -- alignment files, error rate and fertilities ----------------------------------------------
def parse_pharaoh(line: str, where: str = "alignment") -> Set[Link]:
    """``"0-0 1-2"`` -> ``{(0, 0), (1, 2)}``; ValueError naming ``where`` if malformed."""
    links = set()
    for item in line.split():
        left, sep, right = item.partition("-")
        if not (sep and left.isdigit() and right.isdigit()):
            raise ValueError(f"{where}: {item!r} is not an i-j alignment link")
        links.add((int(left), int(right)))
    return links


def format_pharaoh(links: Iterable[Link]) -> str:
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def aer(predicted_links: Sequence[Iterable[Link]], gold_links: Sequence[Iterable[Link]]) -> float:
    """Corpus alignment error rate with sure = possible = gold (Och & Ney 2003):
    ``1 - 2 |A & G| / (|A| + |G|)`` summed over sentences (0 when both are empty).
    Both arguments hold one link collection per sentence."""
    if len(predicted_links) != len(gold_links):
        raise ValueError(f"aer needs one gold alignment per predicted one: "
                         f"{len(predicted_links)} predicted, {len(gold_links)} gold")
    both = sizes = 0
    for predicted, gold in zip(predicted_links, gold_links):
        predicted, gold = set(predicted), set(gold)
        both += len(predicted & gold)
        sizes += len(predicted) + len(gold)
    return 1.0 - 2.0 * both / sizes if sizes else 0.0
