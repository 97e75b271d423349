"""Normaliser kernels fused by ``torch.compile`` (Inductor: C++ loops on a CPU, Triton
kernels on a GPU).

A normaliser's pure kernel functions (elementwise work and row reductions, no control
flow on data) are compiled on first use, once per process, with dynamic shapes: a new
batch size or sentence length reuses the compiled code instead of compiling again. The
first call pays the compilation (seconds per kernel; ``benchmarks/bench_normalizers.py``
reports it); the eager functions stay the reference the compiled ones are tested against.
"""

import functools

import torch


@functools.lru_cache(maxsize=None)
def compiled(fn):
    """``fn`` compiled by ``torch.compile`` with dynamic shapes (one compilation per
    process and function)."""
    return torch.compile(fn, dynamic=True)
