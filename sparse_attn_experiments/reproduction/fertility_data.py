"""The corpus a run reads, its aligners (for DROP and fertilities) and the fertility data
models train on: the corpus's own (gold) or the aligner's."""

import json
import logging
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from sparse_attn_plugin.evaluation.aligner import Aligner, train_aligner
from sparse_attn_plugin.evaluation.fertilities import (
    aligner_fertilities,
    fertility_text,
    guided_fertilities,
    guided_text,
)
from sparse_attn_plugin.files import write_text_atomic

from .plan import slug

logger = logging.getLogger(__name__)

#: Splits that get the aligner's fertility files (training, and validation loss).
FERTILITY_SPLITS = ("train", "valid")


def language_pair(data: Path) -> Tuple[str, str]:
    """(source, target) language of a binarised corpus, from its training files."""
    pairs = set()
    for index in Path(data).glob("train.*.idx"):
        match = re.fullmatch(r"train\.([^.]+)-([^.]+)\.([^.]+)\.idx", index.name)
        if match and match.group(3) == match.group(1):
            pairs.add((match.group(1), match.group(2)))
    if len(pairs) != 1:
        raise RuntimeError(f"{data}: expected the binarised training data of one language "
                           f"pair (train.SRC-TGT.SRC.idx), found {len(pairs) or 'none'}")
    return pairs.pop()


def target_tokens(data: Path) -> int:
    """How many target tokens a binarised corpus's training split holds (end-of-sentence
    included, as fairseq counts them)."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    src, tgt = language_pair(data)
    dataset = MMapIndexedDataset(str(Path(data) / f"train.{src}-{tgt}.{tgt}"))
    return int(dataset.sizes.sum())  # ``sizes`` reads the dataset's memory map: keep it open


class Corpus:
    """A binarised corpus and the text of its splits: the tokens the model reads, or
    post-processed like fairseq-generate's output (``--remove-bpe``)."""

    def __init__(self, data: Path, work: Path):
        self.data, self.work = Path(data), Path(work)
        self.src, self.tgt = language_pair(self.data)
        self._lines: Dict[tuple, List[str]] = {}

    def _prefix(self, split: str, lang: str) -> Path:
        return self.data / f"{split}.{self.src}-{self.tgt}.{lang}"

    def has(self, split: str) -> bool:
        return Path(f"{self._prefix(split, self.src)}.idx").is_file()

    def fertility_file(self, split: str, data: Optional[Path] = None) -> Path:
        """Where ``--task sparse_translation`` reads a split's fertilities."""
        return Path(data or self.data) / f"{split}.{self.src}-{self.tgt}.fert"

    def lines(self, split: str, lang: str, post_process: Optional[str] = None) -> List[str]:
        key = (split, lang, post_process)
        if key not in self._lines:
            from fairseq.data import Dictionary, data_utils

            dictionary = Dictionary.load(str(self.data / f"dict.{lang}.txt"))
            dataset = data_utils.load_indexed_dataset(str(self._prefix(split, lang)),
                                                      dictionary)
            if dataset is None:
                raise RuntimeError(f"{self._prefix(split, lang)}: no binarised data")
            self._lines[key] = [dictionary.string(dataset[i], post_process)
                                for i in range(len(dataset))]
        return self._lines[key]


class Aligners:
    """The run's fast_align models (with the sink), each trained once on the training
    text and saved under the work directory: the tokens the model reads (fertilities)
    or the text post-processed like the translations (DROP); one model when they
    agree."""

    def __init__(self, corpus: Corpus, work: Path, iterations: int):
        self.corpus, self.work, self.iterations = corpus, Path(work), iterations
        self.models: Dict[Optional[str], Path] = {}
        self._loaded: Dict[Optional[str], Aligner] = {}

    def model(self, post_process: Optional[str] = None) -> Path:
        if post_process not in self.models:
            out = self.work / ("aligner" if post_process is None
                               else f"aligner-{slug(post_process)}")
            c = self.corpus
            logger.info("train the aligner on the training data"
                        + (f" post-processed with {post_process}" if post_process else ""))
            started = time.time()
            aligner = train_aligner(c.lines("train", c.src, post_process),
                                    c.lines("train", c.tgt, post_process),
                                    iterations=self.iterations, sink=True)
            aligner.save(out)
            logger.info(f"aligner trained on {aligner.manifest['pairs']} pairs in "
                        f"{time.time() - started:.1f} s; saved to {out}")
            self.models[post_process] = out
            self._loaded[post_process] = aligner
        return self.models[post_process]

    def load(self, post_process: Optional[str] = None) -> Aligner:
        if post_process not in self._loaded:
            self._loaded[post_process] = Aligner.load(self.model(post_process))
        return self._loaded[post_process]

    def describe(self) -> Dict[str, dict]:
        keep = ("pairs", "iterations", "sink_token", "model", "src_vocab_size",
                "tgt_vocab_size")
        return {str(path): {k: v for k, v in json.loads((path / "manifest.json").read_text())
                            .items() if k in keep} | {"post_process": scheme}
                for scheme, path in self.models.items()}


@dataclass(frozen=True)
class FertilityData:
    """Where a fertility source's models train: the corpus directory with its
    ``.fert`` files, and the GUIDED table that replaces ``{guided_table}``."""

    data: Path
    guided_table: Path


def _write_guided(path: Path, sources: List[str], fertilities: List[List[int]]) -> Path:
    return write_text_atomic(path, guided_text(guided_fertilities(sources, fertilities)))


def gold_fertility_data(corpus: Corpus, work: Path) -> FertilityData:
    """The corpus as it is; the GUIDED table from its own training fertilities."""
    path = corpus.fertility_file("train")
    if not path.is_file():
        raise RuntimeError(f"{path} does not exist: gold fertilities come with the synthetic "
                           'corpus only; use "fertility_source": "aligner"')
    fertilities = [[int(v) for v in line.split()] for line in path.read_text().splitlines()]
    guided = _write_guided(Path(work) / "fertility-gold" / "guided.tsv",
                           corpus.lines("train", corpus.src), fertilities)
    return FertilityData(corpus.data, guided)


def aligner_fertility_data(corpus: Corpus, aligners: Aligners, work: Path) -> FertilityData:
    """A copy of the corpus directory (symlinks to its ``.bin``, ``.idx`` and dictionary
    files) with the aligner's train and valid fertility files, and the aligner's GUIDED
    table."""
    aligner = aligners.load(None)  # on the tokens the model reads (BPE units, if any)
    out, tables = Path(work) / "data-aligner", Path(work) / "fertility-aligner"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for path in sorted(corpus.data.iterdir()):  # the binarised data, nothing gold
        if path.is_file() and (path.suffix in (".bin", ".idx") or path.name.startswith("dict.")):
            (out / path.name).symlink_to(path.resolve())
    for split in FERTILITY_SPLITS:
        if corpus.has(split):
            sources = corpus.lines(split, corpus.src)
            fertilities = aligner_fertilities(aligner, sources, corpus.lines(split, corpus.tgt))
            write_text_atomic(corpus.fertility_file(split, out), fertility_text(fertilities))
            _write_guided(tables / ("guided.tsv" if split == "train" else f"guided-{split}.tsv"),
                          sources, fertilities)
            logger.info(f"aligner fertilities of {len(sources)} {split} sentences")
    return FertilityData(out, tables / "guided.tsv")


def fill_placeholders(flags: List[str], fertility: Optional[FertilityData]) -> List[str]:
    if fertility is None:
        return list(flags)
    return [f.replace("{guided_table}", str(fertility.guided_table)) for f in flags]

