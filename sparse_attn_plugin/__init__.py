"""sparse-attn: sparse, constrained, hard and kernel attention for fairseq.

Load with ``--user-dir sparse_attn_plugin``: fairseq imports the package after itself,
and the package registers its models, tasks and criterions (:func:`register`) and makes
the plugin's errors end that command with one line (:mod:`.errors`). Imported where
fairseq is not, it has no side effect: :mod:`.functional` and :mod:`.normalizers` are
plain PyTorch, and a Python caller who wants our fairseq models calls :func:`register`.
"""

import sys

from .registration import register

__version__ = "0.1.0"

if "fairseq" in sys.modules:  # fairseq's --user-dir, or a caller who imported fairseq first
    register()
    if "fairseq_cli" in sys.modules:  # fairseq-train, fairseq-generate, ...
        from .errors import one_line_errors_at_fairseq_cli

        one_line_errors_at_fairseq_cli()

__all__ = ["__version__", "register"]
