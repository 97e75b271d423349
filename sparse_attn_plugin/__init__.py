"""sparse-attn: sparse, constrained, hard and kernel attention for fairseq.

Load with ``--user-dir sparse_attn_plugin``. Importing the package registers its
models with fairseq and lets torch>=2.6 load fairseq checkpoints.
"""

from .checkpoint_globals import allow_fairseq_checkpoint_globals

allow_fairseq_checkpoint_globals()

from . import models  # noqa: E402,F401  (registers sparse_transformer)

__version__ = "0.1.0"
