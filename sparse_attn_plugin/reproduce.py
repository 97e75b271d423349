"""The old module path of ``sparse-attn-reproduce``
(:mod:`sparse_attn_plugin.experiments.reproduce`),
kept so that the commands recorded in results files before the move still run."""

import sys

from .experiments.reproduce import main

if __name__ == "__main__":
    sys.exit(main())
