"""What a step runs, not how long it takes: the aten operations dispatched, the launches of
the fused attention kernels, and the kinds the fused attention is called with."""

from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes


class Ops(TorchDispatchMode):
    """The names of the operations dispatched while it is active; with :meth:`kernels`
    standing in for ``fused_attention._kernels``, each fused launch as ``fused kernel``
    (run outside the mode: Triton's interpreter's own tensor work is not the step's)."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))

    def kernels(self, kernels):
        """A stand-in for ``fused_attention._kernels`` whose kernels count launches."""
        ops = self

        class Launch:
            def __init__(self, kernel):
                self.kernel = kernel

            def __getitem__(self, grid):
                def launch(*args, **kwargs):
                    ops.names.append("fused kernel")
                    with _disable_current_modes():
                        return self.kernel[grid](*args, **kwargs)
                return launch
        return lambda: tuple(Launch(kernel) for kernel in kernels)


def fused_calls(monkeypatch, module) -> list:
    """The kinds ``module.fused_attention`` is called with from now on (it still runs)."""
    calls = []
    real = module.fused_attention

    def spy(q, k, v, kind, **arguments):
        calls.append(kind)
        return real(q, k, v, kind, **arguments)

    monkeypatch.setattr(module, "fused_attention", spy)
    return calls
