"""Joint subword segmentation learnt on the training text of both languages: BPE with
subword-nmt (Sennrich et al. 2016; ``@@ `` marks a split, undone by fairseq-generate's
``--remove-bpe``), a sentencepiece BPE model (``--remove-bpe sentencepiece``), or
``none`` (words, as some published corpora are used)."""

import contextlib
import functools
import tempfile
from pathlib import Path
from typing import Callable, Iterator, List, Sequence

from tqdm import tqdm

from .line_map import map_lines

SCHEMES = ("subword_nmt", "sentencepiece", "none")
#: The file each scheme's model is kept in (next to the binarised data).
MODEL_FILE = {"subword_nmt": "bpe.codes", "sentencepiece": "spm.model", "none": "subwords.none"}


def learn(scheme: str, texts: Sequence[Sequence[str]], size: int, out: Path) -> None:
    """Learn one segmentation from all of ``texts`` (the training sides) into ``out``:
    ``size`` merge operations (subword-nmt) or a ``size``-piece vocabulary (sentencepiece)."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown subword scheme {scheme!r}; choose from {', '.join(SCHEMES)}")
    if scheme == "none":
        Path(out).write_text("words: no subword segmentation\n")
        return
    with tempfile.TemporaryDirectory() as tmp:
        joined = Path(tmp) / "train.txt"
        with open(joined, "w", encoding="utf-8") as f:
            for lines in texts:
                f.writelines(line + "\n" for line in lines)
        if scheme == "subword_nmt":
            from subword_nmt import learn_bpe

            with open(joined, encoding="utf-8") as infile, \
                    open(out, "w", encoding="utf-8") as outfile, _quiet_bar(learn_bpe):
                learn_bpe.learn_bpe(infile, outfile, size)
        else:
            import sentencepiece as spm

            spm.SentencePieceTrainer.train(
                input=str(joined), model_prefix=str(Path(tmp) / "spm"), vocab_size=size,
                model_type="bpe", character_coverage=1.0, input_sentence_size=2_000_000,
                shuffle_input_sentence=True, minloglevel=2)
            Path(out).write_bytes((Path(tmp) / "spm.model").read_bytes())


@contextlib.contextmanager
def _quiet_bar(module) -> Iterator[None]:
    """Give ``module``'s progress bar :func:`map_lines`'s manners while inside: shown only
    on a terminal, redrawn at most every 5 seconds (subword-nmt's own bar redraws ten times
    a second, and into a log file each redraw is a few hundred characters)."""
    own = module.tqdm
    module.tqdm = functools.partial(tqdm, disable=None, mininterval=5, desc="learn BPE",
                                    unit="merge")
    try:
        yield
    finally:
        module.tqdm = own


def segmenter(scheme: str, model: Path) -> Callable[[str], str]:
    """A function segmenting one line with the learnt ``model``."""
    if scheme == "none":
        return lambda line: line
    if scheme == "subword_nmt":
        from subword_nmt.apply_bpe import BPE

        with open(model, encoding="utf-8") as codes:
            bpe = BPE(codes)
        return bpe.process_line
    if scheme == "sentencepiece":
        import sentencepiece as spm

        processor = spm.SentencePieceProcessor(model_file=str(model))
        return lambda line: " ".join(processor.encode(line, out_type=str))
    raise ValueError(f"unknown subword scheme {scheme!r}; choose from {', '.join(SCHEMES)}")


def apply(scheme: str, model: Path, lines: Sequence[str], desc: str = "",
          workers: int = 1) -> List[str]:
    """:func:`segmenter` over ``lines`` (``workers`` processes, progress bar)."""
    return map_lines(segmenter, (scheme, str(model)), lines, workers, desc or "subwords")
