"""A warning for a model argument that no flag defines.

``fairseq-generate --model-overrides`` sets every key it is given on a checkpoint's
arguments (a legacy ``Namespace``) before the model is built, so a mistyped key
(``attn_fnn``) would change nothing, silently. A key is known when it is a flag of the
model, of fairseq's train or generate commands, or of any registered task, criterion,
optimizer, scheduler, tokenizer, BPE or scorer (a hub's ``bpe_codes``), or a name the
model's build sets itself.
"""

import argparse
import dataclasses
import difflib
import functools
import logging
from typing import Iterable

logger = logging.getLogger(__name__)


def flag_names(add_args) -> set:
    """The destinations of the flags ``add_args(parser)`` adds."""
    parser = argparse.ArgumentParser(add_help=False, conflict_handler="resolve")
    add_args(parser)
    return {action.dest for action in parser._actions}


@functools.lru_cache(maxsize=None)
def fairseq_flag_names() -> frozenset:
    """Every flag of fairseq's commands and registered components but the models'."""
    from fairseq import options
    from fairseq.registry import REGISTRIES
    from fairseq.tasks import TASK_REGISTRY

    names = set()
    for parser in (options.get_training_parser(), options.get_interactive_generation_parser()):
        names |= {action.dest for action in parser._actions}
    components = [*TASK_REGISTRY.values()]
    for registry in REGISTRIES.values():
        components += registry["registry"].values()
    for component in components:
        config = getattr(component, "__dataclass", None)
        if config is not None:
            names |= {field.name for field in dataclasses.fields(config)}
        if hasattr(component, "add_args"):
            names |= flag_names(component.add_args)
    return frozenset(names)


def names_set_by(architecture) -> set:
    """The names an architecture function sets on arguments that have none."""
    args = argparse.Namespace()
    architecture(args)
    return set(vars(args))


def warn_unknown_arguments(args, model, set_by_build: Iterable[str] = ()) -> None:
    """Log one warning per key of ``args`` that names no flag of ``model`` (a fairseq
    model class) or of fairseq, nor one of ``set_by_build``."""
    own = flag_names(model.add_args) | set(set_by_build)
    unknown = set(vars(args)) - own - fairseq_flag_names()
    for key in sorted(name for name in unknown if not name.startswith("_")):
        close = difflib.get_close_matches(key, own, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        logger.warning("model argument %r (a --model-overrides key?) is no argument of "
                       "%s or fairseq and changes nothing%s", key, args.arch, hint)
