"""Let torch>=2.6 load fairseq checkpoints.

torch 2.6 made ``torch.load`` default to ``weights_only=True``, which refuses any
object that is not a tensor or a plain container. fairseq 0.12 checkpoints hold an
``argparse.Namespace`` (legacy model args) and, when ``--eval-bleu`` or other
meters are saved, numpy scalars; ``fairseq-generate`` then fails on every
checkpoint. Allow-listing these few types keeps weights-only loading (no arbitrary
code runs) and makes the checkpoints load.
"""

import argparse

import numpy as np
import torch


def _numpy_globals():
    scalar = getattr(np, "_core", np.core).multiarray.scalar
    dtypes = [type(np.dtype(name)) for name in ("float64", "float32", "int64", "int32", "bool")]
    return [scalar, np.dtype, *dtypes]


def allow_fairseq_checkpoint_globals() -> None:
    """Add the globals fairseq checkpoints need to torch's weights-only allow-list."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:  # torch < 2.4 loads everything anyway
        add([argparse.Namespace, *_numpy_globals()])
