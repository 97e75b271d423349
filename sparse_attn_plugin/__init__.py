"""sparse-attn: sparse, constrained, hard and kernel attention for fairseq.

Load with ``--user-dir sparse_attn_plugin``. Importing the package registers its
models with fairseq and lets torch>=2.6 load fairseq checkpoints; loaded by a fairseq
command, it makes the plugin's errors end that command with one line
(:mod:`.errors`). Without fairseq installed, ``normalizers`` and ``evaluation`` still
work (they never import it).
"""

import sys
from importlib.util import find_spec

from .checkpoint_globals import allow_fairseq_checkpoint_globals
from .errors import one_line_errors_at_fairseq_cli

__version__ = "0.1.0"

allow_fairseq_checkpoint_globals()
if "fairseq_cli" in sys.modules:  # fairseq-train, fairseq-generate, ... --user-dir
    one_line_errors_at_fairseq_cli()

if find_spec("fairseq") is not None:
    from . import criterions, models, tasks  # noqa: F401  (registers them with fairseq)
