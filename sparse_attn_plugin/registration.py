"""The plugin's models, tasks and criterions registered with fairseq.

fairseq's ``--user-dir`` imports the package after fairseq, and the package then
registers them at once (``sparse_attn_plugin/__init__.py``). Importing the package
without fairseq imported does nothing else: the normalisers, the functional API, the
metrics and the corpus commands start without torch's or fairseq's models. A Python
caller who builds or loads fairseq models itself calls :func:`register` once.
"""


def register() -> None:
    """Import fairseq and register the plugin's models, tasks and criterions with it, and
    let torch>=2.6 load fairseq checkpoints. Calling it again does nothing more."""
    from . import criterions, models, tasks  # noqa: F401  (their decorators register them)
    from .checkpoint_globals import allow_fairseq_checkpoint_globals

    allow_fairseq_checkpoint_globals()
