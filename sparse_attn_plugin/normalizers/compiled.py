"""Normaliser kernels fused by ``torch.compile`` (Inductor: C++ loops on a CPU, Triton
kernels on a GPU).

A normaliser's pure kernel functions (elementwise work and row reductions, no control
flow on data) are compiled on first use, once per process, with dynamic shapes: a new
batch size or sentence length reuses the compiled code instead of compiling again. The
first call pays the compilation (seconds per kernel; ``benchmarks/bench_normalizers.py``
reports it); the eager functions stay the reference the compiled ones are tested against.

The callers give every kernel one kind of input, so that a kernel keeps one graph per
dtype and autograd mode, well under dynamo's recompile limit (8 per function, past which it
would run the function eagerly with only a warning): scores as rows ``(N, S)``, alpha as a
tensor with one value per row (never a Python float, which torch versions that specialise
floats would make a constant of the graph), all detached (no view's base, no grad flag).
"""

import functools

import torch


@functools.lru_cache(maxsize=None)
def compiled(fn):
    """``fn`` compiled by ``torch.compile`` with dynamic shapes (one compilation per
    process and function, and one more per dtype and autograd mode of its input)."""
    return torch.compile(fn, dynamic=True)
