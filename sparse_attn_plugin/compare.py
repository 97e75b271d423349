"""The old module path of ``sparse-attn-compare``
(:mod:`sparse_attn_plugin.experiments.compare`),
kept so that the commands recorded in results files before the move still run."""

import sys

from .experiments.compare import main

if __name__ == "__main__":
    sys.exit(main())
