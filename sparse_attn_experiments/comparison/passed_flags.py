"""``--train-flags`` and ``--generate-flags``: fairseq flags a comparison passes on, after
its own, to every row's ``fairseq-train`` or ``fairseq-generate`` (``--fp16`` on a GPU,
``--update-freq 2``, ``--no-repeat-ngram-size 3`` ...), split as a shell splits words.

They are checked for every row before anything runs, and refused in one line, never
passed on to override the comparison silently: a flag the comparison sets itself (its
architecture, stopping rule, seed, attention, decoding, files), named with the option of
ours that sets it where there is one; a flag the fairseq command does not know, or a
value it refuses, in fairseq's words; a training flag that needs a GPU where none is
visible (``--fp16`` on a CPU: :func:`.pipeline.cpu_refusal`).
"""

import contextlib
import io
import logging
import shlex
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

from sparse_attn_plugin.errors import SparseAttnError

from .. import pipeline
from .corpus import Corpus
from .models import Architecture
from .run import Schedule, row_flags, translate_flags

#: The comparison's options that set a fairseq flag: a refusal names the one to use.
OURS = {
    "--max-update": "--max-updates", "--patience": "--patience",
    "--stop-time-hours": "--minutes-per-row", "--validate-interval-updates": "--validate-every",
    "--save-interval-updates": "--validate-every", "--seed": "--seed", "--arch": "--model",
    "--task": "--rows", "--attn-fn": "--rows", "--encoder-self-attn-fn": "--rows",
    "--decoder-self-attn-fn": "--rows", "--decoder-cross-attn-fn": "--rows",
    "--remove-bpe": "--remove-bpe", "--lenpen": "--tune-lenpen",
    "--model-overrides": "--decode-with",
}
#: Flags that choose what a row is, refused even where a row's command does not hold them
#: (a softmax row sets no --decoder-cross-attn-fn, and one passed on would change it).
ALWAYS = frozenset(("--arch", "--task", "--attn-fn", "--encoder-self-attn-fn",
                    "--decoder-self-attn-fn", "--decoder-cross-attn-fn", "--remove-bpe",
                    "--model-overrides"))


class FlagError(SparseAttnError, ValueError):
    """Flags the comparison cannot pass on; the message says which and why."""


def split(option: str, text: Optional[str]) -> List[str]:
    """``text`` (the value of ``option``) split into flags as a shell splits words."""
    if text is None:
        return []
    try:
        return shlex.split(text)
    except ValueError as err:
        raise FlagError(f"{option} {text!r}: {err}") from None


def names(arguments: Iterable[str]) -> List[str]:
    """The long flags among ``arguments`` (``--flag`` or ``--flag=value``), in order."""
    return [argument.split("=", 1)[0] for argument in arguments if argument.startswith("--")]


def check(option: str, command: str, passed: Sequence[str], arguments: Sequence[str],
          whose: str) -> None:
    """FlagError where ``passed`` (given with ``option``) names a flag that ``arguments``,
    what the comparison gives ``command`` for one row, holds (or one of :data:`ALWAYS`), or
    where ``command`` would refuse ``passed`` after ``arguments``; ``whose`` says, for the
    message, where the comparison's own flags come from."""
    own = set(names(arguments)) | ALWAYS
    for name in names(passed):
        if name in own:
            instead = f"use {OURS[name]}" if name in OURS else whose
            raise FlagError(f"{option} cannot set {name}: sparse-attn-compare sets it "
                            f"({instead})")
    refusal = fairseq_refusal(command, [*arguments, *passed])
    if refusal:
        raise FlagError(f"{option} {shlex.join(passed)!r}: {refusal}")


def fairseq_refusal(command: str, arguments: Sequence[str]) -> Optional[str]:
    """What ``command`` (fairseq-train or fairseq-generate) would say, in one line, to
    ``arguments`` before it did anything (a flag it does not know, a value it refuses);
    None where it would run. Parsed here by fairseq's own parser, with the plugin's."""
    from fairseq import options

    import sparse_attn_plugin

    sparse_attn_plugin.register()
    parser = (options.get_training_parser() if command == "fairseq-train"
              else options.get_generation_parser())
    said, quiet = io.StringIO(), logging.root.manager.disable
    logging.disable(logging.INFO)  # fairseq's notes on what it imports
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            _, unknown = options.parse_args_and_arch(parser, list(arguments), parse_known=True)
    except SystemExit:  # argparse's error (or help): its last line says why
        last = said.getvalue().strip().splitlines()[-1:] or ["stopped"]
        return f"{command} says: {last[0].split('error: ', 1)[-1]}"
    except SparseAttnError as error:  # the plugin's own checks of its flags, at parse time
        return f"{command} says: {error}"
    finally:
        logging.disable(quiet)
    return f"{command} does not know {' '.join(unknown)}" if unknown else None


def check_rows(passed: Tuple[List[str], List[str]], architecture: Architecture, model: str,
               rows: Sequence[str], schedule: Schedule, seed: int, corpus: Corpus,
               tuning: bool) -> None:
    """:func:`check` the flags ``passed`` on (to fairseq-train, to fairseq-generate) against
    each row's commands as :mod:`.run` builds them (``--lenpen`` too where ``tuning``)."""
    train, generate = passed
    refusal = pipeline.cpu_refusal(train)
    if refusal:
        raise FlagError(f"--train-flags {shlex.join(train)!r}: {refusal}")
    for name in rows:
        own_train, own_generate = row_flags(architecture, name, schedule, seed)
        if train:
            check("--train-flags", "fairseq-train", train,
                  pipeline.train_arguments(corpus.data, Path(name), own_train,
                                           schedule.max_update),
                  f"part of --model {model}")
        if generate:
            decoding = [*translate_flags(corpus, own_generate, corpus.first_test),
                        *(["--lenpen", "1"] if tuning else [])]
            check("--generate-flags", "fairseq-generate", generate,
                  pipeline.generate_arguments(corpus.data, Path(name) / "checkpoint_best.pt",
                                              decoding),
                  "part of every row's decoding")
