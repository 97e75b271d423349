"""The old module path of ``sparse-attn-toy-example``
(:mod:`sparse_attn_plugin.experiments.toy_example`),
kept so that the commands recorded in results files before the move still run."""

import sys

from ..experiments.toy_example import main

if __name__ == "__main__":
    sys.exit(main())
