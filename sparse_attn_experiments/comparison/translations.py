"""Each row's translations kept with its report, ``OUT/translations/ROW/TEST.txt``: the
best checkpoint's beam-5 output of every test split, one line a sentence in the split's
order, subwords merged (the text BLEU scores). A published comparison so carries what
its scores come from: a reader scores them with another metric or test, and a later
comparison that reuses a recorded row (its checkpoints and logs gone, as on a fresh
clone) still pairs it with softmax (:mod:`.paired`). The systems' output only: the
references stay with the corpus (and its licence)."""

import shutil
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from sparse_attn_plugin.evaluation import read_generate_output
from sparse_attn_plugin.files import write_lines
from sparse_attn_plugin.reading import read_lines

#: The report's subfolder that holds them.
FOLDER = "translations"


def generate_log(work: Path, name: str, split: str) -> Path:
    """Where row ``name``'s work folder keeps fairseq-generate's output of ``split``."""
    return Path(work) / name / f"generate-{split}.log"


def kept(out: Path, name: str, test: str) -> Path:
    """Where the report keeps row ``name``'s translations of the test set named ``test``."""
    return Path(out) / FOLDER / name / f"{test}.txt"


def keep(names: Sequence[str], work: Path, out: Path, tests: Dict[str, str]) -> List[str]:
    """Write the translations of every row of ``names`` whose work folder holds its
    generate logs (a row reused without them keeps the files ``out`` has), remove the
    folders of rows the comparison no longer holds, and return the rows whose
    translations ``out`` holds for every test split."""
    folder = Path(out) / FOLDER
    for stale in sorted(folder.iterdir()) if folder.is_dir() else []:
        if stale.name in names:
            continue
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink()
    for name in names:
        for split, test in tests.items():
            log = generate_log(work, name, split)
            if log.exists():
                write_lines(kept(out, name, test),
                            read_generate_output(read_lines(log)).hypotheses)
    return [name for name in names
            if all(kept(out, name, test).exists() for test in tests.values())]


def hypotheses(name: str, split: str, work: Path, out: Path,
               tests: Dict[str, str]) -> Optional[List[str]]:
    """Row ``name``'s translations of ``split``: from its work folder's generate log,
    else from the report's kept file, else None."""
    log = generate_log(work, name, split)
    if log.exists():
        return read_generate_output(read_lines(log)).hypotheses
    path = kept(out, name, tests[split])
    return read_lines(path) if path.exists() else None


def references(split: str, work: Path, names: Sequence[str]) -> Optional[List[str]]:
    """The references of ``split`` as fairseq-generate printed them, from the generate
    logs of the rows of ``names`` the work folder holds (None if it holds none);
    ValueError when two of them translated different sentences."""
    found = None
    for name in names:
        log = generate_log(work, name, split)
        if not log.exists():
            continue
        refs = read_generate_output(read_lines(log)).references
        if found is not None and refs != found[1]:
            raise ValueError(f"{log} and {found[0]} translate different sentences")
        found = found or (log, refs)
    return found[1] if found else None
