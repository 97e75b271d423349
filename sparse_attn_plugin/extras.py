"""The optional parts of sparse-attn (pip extras), and which of them each command needs.

``pip install .`` gives the library alone, with torch and numpy: the normalisers,
their functional API, the losses and the Hugging Face attention functions. Everything else
is an extra named for what it serves (:data:`EXTRAS`); :data:`COMMANDS` is the one table of
what each command needs. Every command's module imports :mod:`.extras_check` first, which
ends a command lacking one in one line, exit status 1, before any work
(:func:`refuse_missing_extras`). fairseq itself is no extra: its metadata pulls torchaudio
and its isolated build another torch, so ``make install`` installs it (README, Installing).

Standard library only, and Python 3.8's: setup.py and tools/install.py read this file by
path (without importing the package) for the extras' requirements.
"""

import importlib.util
import os
import sys
from functools import lru_cache
from typing import Dict, NamedTuple, Optional, Sequence, Tuple

DISTRIBUTION = "sparse-attn"
#: fairseq as ``make install`` installs it (the Makefile's FAIRSEQ_SPEC; tested equal).
FAIRSEQ = "fairseq-fixed==0.12.3.1"

#: The extras: name -> its requirements, each a pip spec and the top-level module it
#: installs (what the check looks for; None for a tool no command imports). ``fairseq``
#: is fairseq's real needs, not fairseq; ``test`` is entmax, the independent reference
#: the tests compare with, plus requirements-dev.txt's tools (setup.py adds them; entmax
#: needs torch, which ``make wheels`` must not download, so it is not in that file).
EXTRAS: Dict[str, Tuple[Tuple[str, Optional[str]], ...]] = {
    "metrics": (("sacrebleu>=2.3", "sacrebleu"), ("sil-thot>=3.5.3", "thot"),
                ("tqdm", "tqdm")),
    "data": (("sacremoses>=0.1", "sacremoses"), ("subword-nmt>=0.3.8", "subword_nmt"),
             ("sentencepiece>=0.2", "sentencepiece"), ("tqdm", "tqdm")),
    "plots": (("matplotlib>=3.8", "matplotlib"),),
    "hf": (("transformers>=5.24,<6", "transformers"),),
    "fairseq": (("hydra-core==1.3.2", "hydra"), ("omegaconf==2.3.0", "omegaconf"),
                ("bitarray", "bitarray"), ("cffi", "cffi"), ("regex", "regex"),
                ("sacrebleu", "sacrebleu"), ("scikit-learn", "sklearn"), ("tqdm", "tqdm"),
                ("packaging", "packaging"), ("tensorboardX", "tensorboardX")),
    "lint": (("ruff>=0.6", None),),
    "test": (("entmax>=1.3", "entmax"),),
}
#: The extras for working on the project, not for running it.
DEVELOPMENT = ("lint", "test")


class Needs(NamedTuple):
    """What a command needs: the extras every run needs, and those an option adds."""

    always: Tuple[str, ...] = ()
    options: Dict[str, Tuple[str, ...]] = {}


#: The one table: the module a command runs (a console script of setup.py runs its
#: module's ``main``, as ``python -m MODULE`` does; a package stands for every module in
#: it without an entry of its own) -> what it needs. The corpus recipes and parallel
#: binarise with fairseq; they, tokenize and results-index import the metrics package.
COMMANDS: Dict[str, Needs] = {
    "sparse_attn_data": Needs(("data", "metrics", "fairseq")),
    "sparse_attn_data.synthetic": Needs((), {"--bin": ("fairseq",)}),
    "sparse_attn_data.tokenize": Needs(("data", "metrics")),
    "sparse_attn_experiments.compare": Needs(("metrics", "plots", "fairseq")),
    "sparse_attn_experiments.reproduce": Needs(("metrics", "fairseq")),
    "sparse_attn_experiments.results_index": Needs(("metrics",)),
    "sparse_attn_experiments.toy_example": Needs(),
    "sparse_attn_plugin.evaluation.cli": Needs(("metrics",)),
    "sparse_attn_plugin.evaluation.align_cli": Needs(("metrics",)),
    "sparse_attn_plugin.analysis.cli": Needs(("plots", "fairseq")),
    "sparse_attn_plugin.flag_listing": Needs(("fairseq",)),
}


def specs(*extras: str) -> Tuple[str, ...]:
    """The pip specs of ``extras``, in order, each once."""
    found = [spec for extra in extras for spec, _ in EXTRAS[extra]]
    return tuple(spec for i, spec in enumerate(found) if spec not in found[:i])


def needs_of(module: str) -> Optional[Needs]:
    """:data:`COMMANDS`' entry for ``module``, else its nearest package's; None if none."""
    parts = module.split(".")
    return next((COMMANDS[".".join(parts[:n])] for n in range(len(parts), 0, -1)
                 if ".".join(parts[:n]) in COMMANDS), None)


def _given(option: str, argv: Sequence[str]) -> bool:
    """Whether ``argv`` gives ``option``, as argparse reads it (``--opt=V``, or a prefix
    of it, which argparse takes for it where unambiguous)."""
    names = (word.split("=", 1)[0] for word in argv if word.startswith("--"))
    return any(len(name) > 2 and option.startswith(name) for name in names)


def needed(module: str, argv: Sequence[str]) -> Tuple[str, ...]:
    """The extras ``module``'s command needs when given ``argv``, sorted."""
    needs = needs_of(module) or Needs()
    return tuple(sorted({*needs.always, *(extra for option, extras in needs.options.items()
                                          if _given(option, argv) for extra in extras)}))


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def missing(extras: Sequence[str]) -> Tuple[Tuple[str, ...], bool]:
    """Those of ``extras`` with a module not installed (found, not imported), and whether
    fairseq itself is missing (where ``extras`` holds ``fairseq``)."""
    absent = tuple(extra for extra in extras
                   if not all(_installed(module) for _, module in EXTRAS[extra] if module))
    return absent, "fairseq" in extras and not _installed("fairseq")


def install_hint(extras: Sequence[str], fairseq: bool = False) -> str:
    """What is missing and how to install it, e.g. ``needs the 'metrics' extra: pip
    install 'sparse-attn[metrics]'``; with ``fairseq``, fairseq itself too (no extra has it:
    ``make install``, or the pip line README gives)."""
    names = [f"'{extra}'" for extra in extras]
    listed = " and ".join([", ".join(names[:-1]), *names[-1:]] if len(names) > 1 else names)
    listed = f"the {listed} extra{'s' if len(names) > 1 else ''}"
    pip = f"pip install '{DISTRIBUTION}[{','.join(extras)}]'"
    if not fairseq:
        return f"needs {listed}: {pip}"
    return (f"needs fairseq{f' and {listed}' if extras else ''}: make install, or "
            f"{f'{pip}, then ' if extras else ''}pip install --no-deps --no-build-isolation "
            f"{FAIRSEQ} (README, Installing)")


def _console_script_module(name: str) -> Optional[str]:
    """The module that this distribution's console script ``name`` runs, if it has one."""
    try:
        from importlib import metadata

        entries = metadata.distribution(DISTRIBUTION).entry_points
    except Exception:  # not installed (a checkout on PYTHONPATH) or unreadable metadata
        return None
    return next((entry.value.split(":")[0].strip() for entry in entries
                 if entry.group == "console_scripts" and entry.name == name), None)


@lru_cache(maxsize=None)
def running_command() -> Optional[Tuple[str, str]]:
    """The command this process runs, as (what its user typed, the module it runs):
    ``python -m MODULE`` (while MODULE's packages are imported too), or a console script;
    None for anything else (a Python program or test importing the package)."""
    argv = getattr(sys, "argv", None) or [""]
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None:  # python -m MODULE, running
        module = spec.name
    elif argv[0] == "-m":  # python -m MODULE, its packages being imported
        words = getattr(sys, "orig_argv", [])
        at = next((i for i, word in enumerate(words) if word.startswith("-m")), None)
        if at is None:
            return None
        module = words[at][2:] or (words[at + 1] if at + 1 < len(words) else "")
    else:  # a console script
        name = os.path.basename(argv[0])
        module = _console_script_module(name) if name else None
        return (name, module) if module else None
    return f"python -m {module}", module


def refuse_missing_extras() -> None:
    """End this process in one line, ``COMMAND: error: needs ...``, exit status 1, if it
    runs a command of :data:`COMMANDS` and an extra (or fairseq) that command needs with
    its arguments is not installed; else do nothing."""
    command = running_command()
    if command is None or needs_of(command[1]) is None:
        return
    absent, no_fairseq = missing(needed(command[1], sys.argv[1:]))
    if absent or no_fairseq:
        raise SystemExit(f"{command[0]}: error: {install_hint(absent, no_fairseq)}")
