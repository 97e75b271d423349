"""Put on ``PYTHONPATH`` of a subprocess by the tests: Python imports it at start-up, and
from then on ``torch.compile`` raises, so a command that compiles anything fails."""

import torch


def _refuse(*args, **kwargs):
    raise RuntimeError("torch.compile was called in a run that must not compile")


torch.compile = _refuse
