"""Text clean-up the corpus recipes share: markup stripping, Romanian normalisation,
Moses punctuation normalisation and tokenisation, lowercasing and length/ratio cleaning.

Each function works on lists of lines, so a recipe chains them in memory and writes each
stage once (:mod:`sparse_attn_data.steps`). The Moses steps give the Perl scripts' output
byte for byte: sacremoses with the rules where it differs put right (docs/corpora.md,
"Moses without Perl").
"""

import re
import unicodedata
from typing import Callable, List, Sequence, Tuple

from .line_map import map_lines

_SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.IGNORECASE)
#: Lines of an IWSLT ``train.tags`` file holding one of these are metadata, not text.
IWSLT_METADATA = ("<url>", "<talkid>", "<keywords>")
_IWSLT_INLINE = re.compile(r"</?(title|description)>")


def iwslt_train_text(lines: Sequence[str]) -> List[str]:
    """The sentences of an IWSLT ``train.tags.*`` file as fairseq's IWSLT14 recipe keeps
    them: lines with ``<url>``, ``<talkid>`` or ``<keywords>`` dropped, the ``<title>`` and
    ``<description>`` tags removed and their text kept."""
    return [_IWSLT_INLINE.sub("", line).strip() for line in lines
            if not any(tag in line for tag in IWSLT_METADATA)]


def segments(lines: Sequence[str]) -> List[str]:
    """The ``<seg ...>text</seg>`` contents of an XML (IWSLT dev/test) or SGML (WMT)
    file, in order, with the typographic apostrophe made ASCII."""
    out = []
    for line in lines:
        match = _SEG.search(line)
        if match:
            out.append(match.group(1).strip().replace("\u2019", "'"))
    return out


_RO_NORMALISE = str.maketrans({"\u015e": "\u0218", "\u015f": "\u0219",   # s-cedilla -> s-comma
                               "\u0162": "\u021a", "\u0163": "\u021b"})  # t-cedilla -> t-comma
_RO_DIACRITICS = str.maketrans({"\u0218": "S", "\u0219": "s", "\u021a": "T", "\u021b": "t",
                                "\u0102": "A", "\u0103": "a", "\u00c2": "A", "\u00e2": "a",
                                "\u00ce": "I", "\u00ee": "i"})


def romanian(lines: Sequence[str]) -> List[str]:
    """WMT16 Romanian preprocessing (Sennrich et al. 2016, ``normalise-romanian.py`` then
    ``remove-diacritics.py``): cedilla letters to their comma-below forms, then the
    diacritics removed (ș ț ă â î -> s t a a i, capitals alike)."""
    return [line.translate(_RO_NORMALISE).translate(_RO_DIACRITICS) for line in lines]


def remove_non_printing(lines: Sequence[str]) -> List[str]:
    """Moses ``remove-non-printing-char.perl``: every character of Unicode category C
    (control, format, private use, surrogate, unassigned; tab included) replaced by a
    space."""
    return ["".join(" " if unicodedata.category(c)[0] == "C" else c for c in line)
            for line in lines]


#: The versions of Moses' scripts the normaliser and tokeniser reproduce: ``"2019"`` is
#: every commit since f6d7adde (2019-11-25) up to today's master, what fairseq's and
#: Sennrich's preparation scripts get when they clone Moses; ``"2017"`` is commit 3a0631a
#: (2017-12-12), the snapshot Multi30k's ``tok`` files were made with. They differ in
#: three rules: a line's last period (split off unconditionally since 9fc964d,
#: 2018-11-07), ``Rs`` as an English non-breaking prefix (since 4da86c3, 2019-11-05) and
#: ``‘ ‚`` normalised to ``'`` (``"`` before f6d7adde).
MOSES_VERSIONS = ("2019", "2017")


def _check_version(moses: str) -> None:
    if moses not in MOSES_VERSIONS:
        raise ValueError(f"unknown Moses version {moses!r}; choose from "
                         f"{', '.join(MOSES_VERSIONS)}")


def punctuation_normalizer(lang: str, moses: str = "2019") -> Callable[[str], str]:
    r"""Moses ``normalize-punctuation.perl -l LANG`` of one line: sacremoses'
    ``MosesPunctNormalizer`` (``perl_parity=True``) with the rules where it still differs
    from the script put right (docs/corpora.md, "Moses without Perl")."""
    from sacremoses import MosesPunctNormalizer

    _check_version(moses)
    normalizer = MosesPunctNormalizer(lang=lang, perl_parity=True)
    rules = list(normalizer.substitutions)
    if lang not in ("en", "cs", "cz", "de", "es", "fr"):  # sacremoses left them out
        rules[-1:-1] = normalizer.DE_ES_FR_QUOTATION_FOLLOWED_BY_COMMA  # before numbers
    if moses == "2017":
        rules = [(p, '"') if p in ("‘", "‚") else (p, r) for p, r in rules]
    # (?a): ASCII \s and \d, as the script that reads bytes has them
    normalizer.substitutions = [("(?a)" + p, r) for p, r in rules]

    def normalize(line: str) -> str:
        return normalizer.normalize(line + "\n")  # which strips the newline again
    return normalize


def normalize_punctuation(lines: Sequence[str], lang: str, moses: str = "2019",
                          workers: int = 1) -> List[str]:
    """:func:`punctuation_normalizer` over ``lines`` (``workers`` processes, progress bar)."""
    return map_lines(punctuation_normalizer, (lang, moses), lines, workers,
                     f"normalise {lang}")


class PerlMosesTokenizer:
    r"""Moses ``tokenizer.perl -l LANG [-a]`` of one line: sacremoses' ``MosesTokenizer``
    with what differs from the script put right (docs/corpora.md, "Moses without Perl"):
    the 2019 version splits off a line's final period, the 2017 one lacks English ``Rs``."""

    def __init__(self, lang: str, aggressive_dashes: bool = False, moses: str = "2019"):
        from sacremoses import MosesTokenizer

        _check_version(moses)
        self.aggressive_dashes = aggressive_dashes
        self.tokenizer = MosesTokenizer(lang=lang)
        self._keep_or_split = self.tokenizer.handles_nonbreaking_prefixes
        if moses == "2017":
            self.tokenizer.NONBREAKING_PREFIXES = [
                p for p in self.tokenizer.NONBREAKING_PREFIXES if p != "Rs" or lang != "en"]
        else:
            self.tokenizer.handles_nonbreaking_prefixes = self._split_final_period

    def _split_final_period(self, text: str) -> str:
        return _FINAL_PERIOD.sub(r"\1 .", self._keep_or_split(text))

    def __call__(self, line: str) -> str:
        return self.tokenizer.tokenize(_PERL_JUNK.sub("", line), return_str=True,
                                       aggressive_dash_splits=self.aggressive_dashes)


#: A line's last token ending in a period (not the period alone).
_FINAL_PERIOD = re.compile(r"(\S)\.$")
#: ASCII controls that Perl's ``\s`` leaves to tokenizer.perl's junk removal.
_PERL_JUNK = re.compile("[\x1c-\x1f]")


def moses_tokenizer(lang: str, normalize_punctuation: bool = False,
                    aggressive_dashes: bool = False, moses: str = "2019"
                    ) -> Callable[[str], str]:
    """:class:`PerlMosesTokenizer` of one line (``tokenizer.perl -l LANG``; ``-a`` with
    ``aggressive_dashes``), after :func:`punctuation_normalizer` with
    ``normalize_punctuation``."""
    tokenize = PerlMosesTokenizer(lang, aggressive_dashes, moses)
    if not normalize_punctuation:
        return tokenize
    normalize = punctuation_normalizer(lang, moses)
    return lambda line: tokenize(normalize(line))


def moses_tokenize(lines: Sequence[str], lang: str, normalize_punctuation: bool = False,
                   aggressive_dashes: bool = False, workers: int = 1,
                   moses: str = "2019") -> List[str]:
    """:func:`moses_tokenizer` over ``lines`` (``workers`` processes, progress bar)."""
    return map_lines(moses_tokenizer, (lang, normalize_punctuation, aggressive_dashes, moses),
                     lines, workers, f"tokenise {lang}")


def lowercase(lines: Sequence[str]) -> List[str]:
    """Moses ``lowercase.perl`` (Perl's ``lc``): Python's ``str.lower`` but without its
    final-sigma rule (``lc`` makes every ``Σ`` a ``σ``)."""
    return [line.replace("\u03a3", "\u03c3").lower() for line in lines]


def clean_pairs(src: Sequence[str], tgt: Sequence[str], min_len: int = 1, max_len: int = 175,
                ratio: float = 1.5) -> Tuple[List[str], List[str]]:
    """Moses ``clean-corpus-n.perl`` on a tokenised corpus: whitespace collapsed; pairs
    dropped when a side has fewer than ``min_len`` or more than ``max_len`` tokens, or
    one side has more than ``ratio`` times the tokens of the other."""
    if len(src) != len(tgt):
        raise ValueError(f"{len(src)} source lines but {len(tgt)} target lines")
    kept_src, kept_tgt = [], []
    for s, t in zip(src, tgt):
        s, t = " ".join(s.split()), " ".join(t.split())
        ns, nt = len(s.split()), len(t.split())
        if not (min_len <= ns <= max_len and min_len <= nt <= max_len):
            continue
        if ns > ratio * nt or nt > ratio * ns:
            continue
        kept_src.append(s)
        kept_tgt.append(t)
    return kept_src, kept_tgt
