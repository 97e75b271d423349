"""The corpus a comparison trains on: a folder binarised by ``fairseq-preprocess`` (our
recipes, ``python -m sparse_attn_data.parallel``, or any other), read for its languages, its
test splits, its subword scheme and its training text (for the DROP aligner)."""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from sparse_attn_plugin.errors import SparseAttnError
from sparse_attn_plugin.evaluation.aligner import SINK

#: fairseq-generate's ``--remove-bpe`` value for each of sparse_attn_data's subword schemes.
REMOVE_BPE = {"subword_nmt": "subword_nmt", "sentencepiece": "sentencepiece", "none": None}


class CorpusError(SparseAttnError, ValueError):
    """A data folder the comparison cannot use; the message names it and says why."""


@dataclass
class Corpus:
    """A binarised corpus.

    Attributes:
        data: the folder.
        src, tgt: its languages (file suffixes).
        tests: fairseq's test split names (``test``, ``test1``, ...) -> the corpus's own
            names for them (``PREPARED.json``'s ``test_sets``; else the split names).
        remove_bpe: fairseq-generate's ``--remove-bpe`` value, or None for words.
        generate_flags: length limits for decoding this corpus.
        title: how the report names the corpus.
    """

    data: Path
    src: str
    tgt: str
    tests: Dict[str, str]
    remove_bpe: Optional[str]
    generate_flags: List[str] = field(default_factory=lambda: [
        "--max-len-a", "2", "--max-len-b", "10"])
    title: str = ""

    @property
    def first_test(self) -> str:
        """The test split METEOR, REP and DROP are scored on."""
        return next(iter(self.tests))

    def has_fertilities(self) -> bool:
        return (self.data / f"train.{self.src}-{self.tgt}.fert").exists()

    def training_text(self) -> Tuple[List[str], List[str]]:
        """The training pairs as words (subwords merged, the sink dropped)."""
        return tuple(self.words(self.read_split("train", lang), lang == self.src)
                     for lang in (self.src, self.tgt))

    def read_split(self, split: str, lang: str) -> List[str]:
        """One side of a binarised split as the text it was binarised from."""
        from fairseq.data import Dictionary, data_utils

        dictionary = Dictionary.load(str(self.data / f"dict.{lang}.txt"))
        dataset = data_utils.load_indexed_dataset(
            str(self.data / f"{split}.{self.src}-{self.tgt}.{lang}"), dictionary)
        return [dictionary.string(dataset[i]) for i in range(len(dataset))]

    def words(self, lines: List[str], source: bool = False) -> List[str]:
        """``lines`` with subwords merged as fairseq-generate's ``--remove-bpe`` merges
        them, and on the source side without the sink."""
        from fairseq.data.data_utils import post_process

        if self.remove_bpe:
            lines = [post_process(line, self.remove_bpe) for line in lines]
        return [drop_sink(line) for line in lines] if source else lines


def drop_sink(line: str) -> str:
    return " ".join(token for token in line.split() if token != SINK)


def open_corpus(data: Path, remove_bpe: Optional[str] = None) -> Corpus:
    """The corpus binarised in ``data``; ``remove_bpe`` (a key of :data:`REMOVE_BPE`)
    overrides the scheme ``PREPARED.json`` records (or the subword model the folder
    holds: ``bpe.codes``, ``spm.model``)."""
    data = Path(data)
    if not data.is_dir():
        raise CorpusError(f"{data}: no such data folder")
    trains = sorted(data.glob("train.*-*.*.idx"))
    pairs = {tuple(p.name.split(".")[1].split("-")) for p in trains}
    if len(pairs) != 1 or not all(len(pair) == 2 for pair in pairs):
        raise CorpusError(f"{data}: expected one binarised training split "
                          "(train.SRC-TGT.SRC.idx), found "
                          f"{', '.join(p.name for p in trains) or 'none'}")
    (src, tgt), = pairs
    prepared = _prepared(data)
    splits = sorted((p.name.split(".")[0] for p in data.glob(f"test*.{src}-{tgt}.{src}.idx")),
                    key=lambda name: (len(name), name))
    if not (data / f"valid.{src}-{tgt}.{src}.idx").exists():
        raise CorpusError(f"{data}: no binarised validation split (valid.{src}-{tgt}.{src}.idx)")
    if not splits:
        raise CorpusError(f"{data}: no binarised test split (test.{src}-{tgt}.{src}.idx)")
    names = prepared.get("test_sets", {})
    scheme = remove_bpe or prepared.get("settings", {}).get("subwords") or (
        "subword_nmt" if (data / "bpe.codes").exists()
        else "sentencepiece" if (data / "spm.model").exists() else "none")
    return Corpus(data, src, tgt, {split: names.get(split, split) for split in splits},
                  REMOVE_BPE[scheme], title=prepared.get("settings", {}).get("corpus",
                                                                               data.name))


def _prepared(data: Path) -> dict:
    path = data / "PREPARED.json"
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CorpusError(f"{path}: not JSON ({err})") from None


#: The demo's synthetic language pair: 50 word types a side and sentences of 3 to 12
#: source words, small enough for the demo's tiny model to learn within its short time
#: budget on a CPU (results/demo/); the library's default, 300 types and up to 40 words,
#: takes far longer.
DEMO_LANGUAGE = {"src_vocab": 50, "tgt_vocab": 50, "max_len": 12}


def synthetic_corpus(folder: Path, train: int, held_out: int) -> Corpus:
    """The bundled synthetic corpus (:mod:`sparse_attn_data.synthetic`) in the demo's language
    (:data:`DEMO_LANGUAGE`), built under ``folder`` once for each size: words, no
    subwords; every reference fits in 3 |source| + 5 tokens (a synthetic word has
    fertility 3 at most)."""
    from sparse_attn_data.synthetic import binarize, write_corpus

    sizes = f"{train}-{held_out}-" + "-".join(map(str, DEMO_LANGUAGE.values()))
    raw = Path(folder) / f"raw-{sizes}"
    write_corpus(raw, train=train, valid=held_out, test=held_out, **DEMO_LANGUAGE)
    return synthetic_corpus_at(binarize(raw, Path(folder) / f"bin-{sizes}"))


def synthetic_corpus_at(data: Path) -> Corpus:
    """The synthetic corpus binarised (or to be binarised) in ``data``."""
    return Corpus(Path(data), "src", "tgt", {"test": "test"}, None,
                  ["--max-len-a", "3", "--max-len-b", "5"], "the synthetic corpus")
