"""The plugin's models, tasks and criterions registered with fairseq as soon as fairseq is
imported, and not before.

fairseq's ``--user-dir`` imports the package after fairseq, so they register at once. A
program that imports the package first (our console scripts, a notebook) registers them
when it imports fairseq, if ever: scoring a file or preparing a corpus then starts
without torch and fairseq (about 5 s on 2 cores), and a Python caller who loads a
checkpoint finds the architectures registered all the same.
"""

import importlib.abc
import importlib.util
import sys


def register() -> None:
    """Register with fairseq (already imported) and let torch load its checkpoints."""
    from . import criterions, models, tasks  # noqa: F401  (their decorators register them)
    from .checkpoint_globals import allow_fairseq_checkpoint_globals

    allow_fairseq_checkpoint_globals()


def register_with_fairseq() -> None:
    """:func:`register` now if fairseq is imported, else right after it is."""
    if "fairseq" in sys.modules:
        register()
    elif not any(isinstance(finder, _AfterFairseq) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterFairseq())


class _AfterFairseq(importlib.abc.MetaPathFinder):
    """Finds fairseq as the other finders do, and runs :func:`register` once its package
    has finished executing; then leaves ``sys.meta_path``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "fairseq":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRegister(spec.loader)
        return spec


class _ThenRegister(importlib.abc.Loader):
    """fairseq's own loader, followed by :func:`register`."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        register()

    def __getattr__(self, name):  # get_filename, get_resource_reader, ...: fairseq's loader's
        return getattr(self.loader, name)
