"""Binarising text splits for fairseq with ``fairseq-preprocess``'s own code, run in this
process (no second interpreter start; a caller that binarises often imports fairseq
once)."""

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

from .steps import PrepError

SPLIT_FLAGS = {"train": "--trainpref", "valid": "--validpref", "test": "--testpref"}


def fairseq_preprocess(text_dir: Path, src: str, tgt: str, destdir: Path,
                       splits: Sequence[str] = tuple(SPLIT_FLAGS), joined: bool = False,
                       workers: int = 1) -> None:
    """Binarise ``text_dir/{split}.{src|tgt}`` into ``destdir`` (dictionaries from the
    training split; one dictionary for both languages with ``joined``), as
    ``fairseq-preprocess`` does, its log in ``destdir/preprocess.log``. Further test
    splits ``test1``, ``test2``, ... (in that order, after ``test``) go to fairseq's
    ``--testpref test,test1,...``, which names them so. Raises PrepError naming what
    fairseq could not do."""
    argv = ["--source-lang", src, "--target-lang", tgt, "--destdir", str(destdir),
            "--workers", str(workers)]
    prefixes = {}
    for split in splits:
        flag = SPLIT_FLAGS["test" if split.startswith("test") else split]
        prefixes.setdefault(flag, []).append(str(Path(text_dir) / split))
    for flag, paths in prefixes.items():
        argv += [flag, ",".join(paths)]
    if joined:
        argv.append("--joined-dictionary")
    from fairseq import options
    from fairseq_cli import preprocess

    args = options.get_preprocessing_parser().parse_args(argv)
    with _logged_to_destdir_only(preprocess.logger):
        try:
            preprocess.main(args)
        except (OSError, AssertionError, ValueError) as error:
            raise PrepError(f"fairseq-preprocess failed on {text_dir}: "
                            f"{str(error) or type(error).__name__}") from error


@contextmanager
def _logged_to_destdir_only(logger: logging.Logger):
    """fairseq-preprocess's log in the file handler its ``main`` adds (closed after),
    not on this process's screen; fairseq's other loggers quiet below warnings."""
    fairseq = logging.getLogger("fairseq")
    handlers, propagate, level = list(logger.handlers), logger.propagate, fairseq.level
    logger.propagate = False
    fairseq.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.propagate = propagate
        fairseq.setLevel(level)
        for added in [h for h in logger.handlers if h not in handlers]:
            logger.removeHandler(added)
            added.close()
