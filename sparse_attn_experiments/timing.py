"""Timing for the benchmarks: calls measured in interleaved rounds, medians kept.

Taking turns round by round means drift in machine load hits every call alike, so
the ratios between them (the only speed figures we report) stay meaningful.
"""

import statistics
import time
from functools import partial
from typing import Callable, Dict, List, Optional

#: How a sample is timed: seconds per call of ``fn`` over ``inner`` back-to-back calls.
Clock = Callable[[Callable[[], object], int], float]


def time_per_call(fn: Callable[[], object], inner: int, sync: Callable[[], None]) -> float:
    """Seconds per call of ``fn`` over ``inner`` back-to-back calls."""
    sync()
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    sync()
    return (time.perf_counter() - start) / inner


def cuda_time_per_call(fn: Callable[[], object], inner: int) -> float:
    """Seconds per call of ``fn`` over ``inner`` back-to-back calls, by CUDA events: the
    device's time from before the first call's work (the device idle) to after the
    last's."""
    import torch

    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    torch.cuda.synchronize()
    start.record()
    for _ in range(inner):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / inner


def device_clock(device: str) -> Clock:
    """How ``device``'s samples are timed: CUDA events on CUDA, ``perf_counter`` on the
    CPU."""
    return cuda_time_per_call if device == "cuda" else partial(time_per_call,
                                                               sync=lambda: None)


def interleaved_medians(calls: Dict[str, Callable[[], object]], rounds: int, sample_s: float = 0.0,
                        sync: Callable[[], None] = lambda: None,
                        clock: Optional[Clock] = None) -> Dict[str, float]:
    """Median seconds per call of each of ``calls``, over ``rounds`` rounds in which
    they take turns (starting one later each round). Each sample repeats a call
    enough times (at most 200) to last about ``sample_s`` seconds (once if 0), timed by
    ``clock`` (default: ``perf_counter`` with ``sync`` before and after)."""
    samples = interleaved_samples(calls, rounds, sample_s, sync, clock)
    return {name: statistics.median(s) for name, s in samples.items()}


def interleaved_samples(calls: Dict[str, Callable[[], object]], rounds: int,
                        sample_s: float = 0.0, sync: Callable[[], None] = lambda: None,
                        clock: Optional[Clock] = None) -> Dict[str, List[float]]:
    """Seconds per call of each of ``calls`` in each of ``rounds`` interleaved rounds
    (round ``r``'s sample is the ``r``-th of every list), as :func:`interleaved_medians`
    takes them: for spreads, and for ratios paired round by round."""
    clock = clock or partial(time_per_call, sync=sync)
    names = list(calls)
    inner = dict.fromkeys(names, 1)
    for name in names if sample_s > 0 else ():
        once = min(clock(calls[name], 1) for _ in range(2))
        inner[name] = max(1, min(200, round(sample_s / max(once, 1e-9))))
    samples = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(clock(calls[name], inner[name]))
    return samples


def summary(values: List[float]) -> dict:
    """Median, minimum and maximum of per-round ``values``, and the values (``rounds``)."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "rounds": list(values)}


def paired_ratios(samples: Dict[str, List[float]], base: str,
                  speed: bool = False) -> Dict[str, dict]:
    """Per call of :func:`interleaved_samples`, its time over ``base``'s in each round (or,
    ``speed``, ``base``'s over its), :func:`summary` of them, and of its ``seconds``."""
    found = {}
    for name, times in samples.items():
        pairs = zip(times, samples[base])
        per_round = [b / t if speed else t / b for t, b in pairs]
        found[name] = dict(summary(per_round), seconds=summary(times))
    return found


def spread(values: List[float], digits: int = 2) -> str:
    """``median [min–max]`` of ``values``."""
    return (f"{statistics.median(values):.{digits}f} "
            f"[{min(values):.{digits}f}–{max(values):.{digits}f}]")


def warmed_medians(calls: Dict[str, Callable[[], object]], mode: str, warmup: int, rounds: int,
                   sample_s: float, sync: Callable[[], None]) -> Dict[str, float]:
    """:func:`interleaved_medians` after ``warmup`` untimed calls of each; ``mode``
    ``"infer"`` runs under ``torch.inference_mode()``, ``"train"`` with gradients."""
    import torch

    with torch.inference_mode() if mode == "infer" else torch.enable_grad():
        for fn in calls.values():
            for _ in range(warmup):
                fn()
        return interleaved_medians(calls, rounds, sample_s, sync)


def ratios_to(medians: Dict[str, float], reference: str = "softmax") -> Dict[str, dict]:
    """Each call's median seconds with its time and throughput ratios to ``reference``."""
    base = medians[reference]
    return {name: {"median_s": s, "time_ratio": s / base, "throughput_ratio": base / s}
            for name, s in medians.items()}


def device_sync(device: str) -> Callable[[], None]:
    """What waits for ``device``'s queued work: ``torch.cuda.synchronize`` on CUDA."""
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def start_timing(args):
    """Apply the timing flags (threads, seed): ``(dtype, sync, generator)`` for the run,
    ``sync`` waiting for the device's queued work."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    sync = device_sync(args.device)
    torch.manual_seed(args.seed)  # upstream gradients
    return getattr(torch, args.dtype), sync, torch.Generator().manual_seed(args.seed)


def add_timing_args(parser, subject: str) -> None:
    """The flags every op-level benchmark takes: device, dtype, threads, rounds,
    warm-up calls, sample length and seed (``subject``: what is timed, for the help)."""
    import torch

    parser.add_argument("--device", choices=["cpu", "cuda"],
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"],
                        default="float32")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds (median kept)")
    parser.add_argument("--warmup", type=int, default=3, help=f"untimed calls per {subject}")
    parser.add_argument("--sample-s", type=float, default=0.005,
                        help=f"aim for at least this long a timed sample of each {subject}")
    parser.add_argument("--seed", type=int, default=0)


def decode_batches(task, batch_size: int, device: str) -> list:
    """The task's test set in batches of ``batch_size`` sentences, on ``device``."""
    from fairseq import utils

    task.load_dataset("test")
    dataset = task.dataset("test")
    batches = [dataset.collater([dataset[i] for i in range(start, min(start + batch_size,
                                                                      len(dataset)))])
               for start in range(0, len(dataset), batch_size)]
    return [utils.move_to_cuda(b) for b in batches] if device == "cuda" else batches


def generation_seconds(task, model, sample, beam: int, length: int,
                       sync: Callable[[], None] = lambda: None) -> float:
    """Seconds for fairseq's beam search to decode ``sample`` with every hypothesis forced
    to ``length`` tokens (so that every model does the same work)."""
    import torch
    from fairseq.sequence_generator import SequenceGenerator

    generator = SequenceGenerator([model], task.target_dictionary, beam_size=beam,
                                  min_len=length, max_len_a=0, max_len_b=length)
    sync()
    start = time.perf_counter()
    with torch.inference_mode():
        generator.generate([model], sample)
    sync()
    return time.perf_counter() - start


def prepare_for_inference(model, beam: int):
    """``model`` prepared as fairseq-generate prepares it: ``prepare_for_inference_`` with
    fairseq's default generation settings and ``beam`` (eval mode, and no attention
    weights asked of cross-attention, as without ``--print-alignment``)."""
    from fairseq.dataclass.configs import GenerationConfig
    from omegaconf import OmegaConf

    model.prepare_for_inference_(OmegaConf.create({"generation": GenerationConfig(beam=beam)}))
    return model


def forced_steps(length: int) -> int:
    """Decoding steps of fairseq's beam search on a batch whose hypotheses are forced to
    ``length`` tokens: one per token, and one that places EOS."""
    return length + 1


def kernel_launches(fn: Callable[[], object]) -> int:
    """Kernels one call of ``fn`` runs on the CUDA device, as torch's profiler lists them
    (:func:`count_kernels`)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return count_kernels(prof.events())


def count_kernels(events) -> int:
    """The kernels among profiler ``events``: those on a CUDA device, less copies and
    fills (no kernel launched) and the device-side marks of annotated regions (left out
    of torch's own device-time total too)."""
    from torch.autograd import DeviceType

    return sum(1 for e in events if e.device_type == DeviceType.CUDA
               and not e.is_user_annotation and not e.name.startswith(("Memcpy", "Memset")))
