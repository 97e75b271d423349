"""sparse-attn: sparse, constrained, hard and kernel attention for fairseq.

Load with ``--user-dir sparse_attn_plugin``. Importing the package registers its
models, tasks and criterions with fairseq and lets torch>=2.6 load fairseq checkpoints,
as soon as fairseq is imported (:mod:`.registration`): at once under fairseq's
``--user-dir``; an importer that never imports fairseq (the scoring and corpus commands)
never loads torch or fairseq. Loaded by a fairseq command, it makes the plugin's errors
end that command with one line (:mod:`.errors`).
"""

import sys

from .errors import one_line_errors_at_fairseq_cli
from .registration import register_with_fairseq

__version__ = "0.1.0"

register_with_fairseq()
if "fairseq_cli" in sys.modules:  # fairseq-train, fairseq-generate, ... --user-dir
    one_line_errors_at_fairseq_cli()
