"""The benchmarks' CUDA measurements on the device: kernel launches counted from torch's
profiler (kernels only: no copy, no fill) and samples timed by CUDA events. No timing is
asserted beyond its being a positive number of seconds."""

import torch

from sparse_attn_experiments.timing import (
    cuda_time_per_call,
    device_clock,
    interleaved_samples,
    kernel_launches,
)


def test_kernel_launches_count_kernels_and_not_copies_or_fills():
    x, y = (torch.randn(1000, device="cuda") for _ in range(2))
    host = torch.randn(1000)
    (x + y) * 2                                     # first calls, outside the count
    assert kernel_launches(lambda: (x + y) * 2) == 2
    assert kernel_launches(lambda: x.copy_(host)) == 0


def test_samples_on_cuda_are_timed_by_events():
    x = torch.randn(256, 256, device="cuda")
    assert device_clock("cuda") is cuda_time_per_call
    samples = interleaved_samples({"mm": lambda: x @ x, "add": lambda: x + x}, 3,
                                  clock=device_clock("cuda"))
    assert all(len(s) == 3 and all(t > 0 for t in s) for s in samples.values())
