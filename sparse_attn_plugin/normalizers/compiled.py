"""Normaliser kernels fused by ``torch.compile`` (Inductor: C++ loops on a CPU, Triton
kernels on a GPU).

A normaliser's pure kernel functions (elementwise work and row reductions, no control
flow on data) are compiled on first use, once per process, with dynamic shapes: a new
batch size or sentence length reuses the compiled code instead of compiling again. The
first call pays the compilation (seconds per kernel; ``benchmarks/bench_normalizers.py``
reports it); the eager functions stay the reference the compiled ones are tested against.
"""

import functools
import inspect

import torch

#: Graphs one kernel may keep. Each kind of alpha (sparsemax, 1.5-entmax, learned), grad
#: mode and class of shape (square, rectangular, one query) needs its own: more than
#: dynamo's default of 8, past which it would run the function eagerly without a word.
#: (Set per function where ``torch.compile`` takes it; elsewhere dynamo's own limit holds.)
RECOMPILE_LIMIT = 64


@functools.lru_cache(maxsize=None)
def compiled(fn):
    """``fn`` compiled by ``torch.compile`` with dynamic shapes (one compilation per
    process and function, and one more per new kind of input, up to
    :data:`RECOMPILE_LIMIT`)."""
    options = {"dynamic": True}
    if "recompile_limit" in inspect.signature(torch.compile).parameters:
        options["recompile_limit"] = RECOMPILE_LIMIT
    return torch.compile(fn, **options)
