"""``sparse-attn-flags ARCH``: the flags fairseq-train takes with
``--user-dir sparse_attn_plugin --arch ARCH``, with ``--task sparse_translation``'s and
our criteria's (the fertility loss's, and ``entmax_loss``'s ``--loss-alpha``).

``fairseq-train --help`` cannot list them: fairseq adds a model's, a task's and a
criterion's flags to its parser only after a first parse has read ``--arch``, ``--task``
and ``--criterion``, and ``--help`` ends that first parse.
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

import argparse
import sys

from .command_line import CommandParser
from .registration import register

PROG = "sparse-attn-flags"


def flag_groups(arch: str) -> argparse.ArgumentParser:
    """A parser holding the flags of ``--arch arch``, of our task and of our criteria,
    each group as fairseq adds it."""
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    from .modules.fertility import CRITERION, TASK
    from .modules.output_normalizer import CRITERION as ENTMAX_LOSS

    parser = argparse.ArgumentParser(
        prog=f"fairseq-train DATA --user-dir sparse_attn_plugin --arch {arch}",
        usage="%(prog)s [FLAGS]", add_help=False, conflict_handler="resolve")
    ARCH_MODEL_REGISTRY[arch].add_args(parser.add_argument_group(f"--arch {arch}"))
    TASK_REGISTRY[TASK].add_args(parser.add_argument_group(f"--task {TASK}"))
    for criterion in (CRITERION, ENTMAX_LOSS):
        CRITERION_REGISTRY[criterion].add_args(
            parser.add_argument_group(f"--criterion {criterion}"))
    return parser


def main(argv=None):
    register()
    from fairseq.models import ARCH_MODEL_REGISTRY

    ours = sorted(arch for arch, model in ARCH_MODEL_REGISTRY.items()
                  if model.__module__.startswith(f"{__package__}.models."))
    parser = CommandParser(prog=PROG, description=__doc__.replace("``", ""),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arch", metavar="ARCH", help=f"one of {', '.join(ours)}")
    arch = parser.parse_args(argv).arch
    if arch not in ours:
        parser.fail(f"unknown ARCH {arch!r}; choose from {', '.join(ours)}")
    sys.stdout.write(flag_groups(arch).format_help())
    return 0
