"""Normaliser kernels fused by ``torch.compile`` (Inductor: C++ loops on a CPU, Triton
kernels on a GPU).

A normaliser's pure kernel functions (elementwise work and row reductions, no control
flow on data) are compiled on first use, once per process, with dynamic shapes: a new
batch size or sentence length reuses the compiled code instead of compiling again. The
first call pays the compilation (``benchmarks/bench_normalizers.py`` reports how long:
results/bench/normalizers.md); the eager functions stay the reference the compiled ones
are tested against.

The callers give every kernel few kinds of input, so that a kernel keeps one graph per
dtype and autograd mode, well under dynamo's recompile limit (8 per function, past which it
would run the function eagerly with only a warning): scores as contiguous rows ``(N, S)``
(a transposed or strided layout would compile another graph), all detached (no view's
base, no grad flag), and alpha either one of two special numbers
(sparsemax's and 1.5-entmax's, whose steps need no general power) or a tensor with one value
per row (never another Python float, which torch versions that specialise floats would make
a constant of the graph). Each of those three kinds has its own copy of the kernel
(``case``), so that each keeps its own graphs and its own count of recompilations. Sizes
are traced without duck shaping, which would make ``N == S`` (a square batch) a graph of its
own.
"""

import functools
import types

import torch
import torch.fx.experimental._config as symbolic_shapes

#: Tracing with every size its own symbol: by default, sizes equal at the first call share
#: one, and a later call where they differ compiles again.
_no_duck_shapes = symbolic_shapes.patch(use_duck_shape=False)


@functools.lru_cache(maxsize=None)
def compiled(fn, case: str = ""):
    """``fn`` compiled by ``torch.compile`` with dynamic shapes (one compilation per
    process and function, and one more per dtype and autograd mode of its input); with
    ``case``, a copy of ``fn`` with a code object of its own, compiled apart (dynamo keeps
    graphs and counts recompilations per code object)."""
    if case:
        code = fn.__code__.replace(co_name=f"{fn.__name__}[{case}]")
        fn = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__,
                                fn.__closure__)
    return _no_duck_shapes(torch.compile(fn, dynamic=True))
