"""sparse-attn: sparse, constrained, hard and kernel attention for fairseq.

Load with ``--user-dir sparse_attn_plugin``: fairseq imports the package after itself,
and the package registers its models, tasks and criterions (:func:`register`) and makes
the plugin's errors end that command with one line (:mod:`.errors`). Imported where
fairseq is not, it imports neither fairseq nor torch: :mod:`.functional` and
:mod:`.normalizers` are plain PyTorch, and a Python caller who wants our fairseq models
calls :func:`register`. Its one effect there: imported after torch, it lets torch >= 2.6
load fairseq checkpoints (:mod:`.checkpoint_globals`; :func:`register` does it too).
"""

import sys

from .registration import register

__version__ = "0.1.0"

if "torch" in sys.modules:  # `import torch, sparse_attn_plugin`: torch.load takes checkpoints
    from .checkpoint_globals import allow_fairseq_checkpoint_globals

    allow_fairseq_checkpoint_globals()
if "fairseq" in sys.modules:  # fairseq's --user-dir, or a caller who imported fairseq first
    register()
    if "fairseq_cli" in sys.modules:  # fairseq-train, fairseq-generate, ...
        from .errors import one_line_errors_at_fairseq_cli

        one_line_errors_at_fairseq_cli()

__all__ = ["__version__", "register"]
