"""The old module path of ``sparse-attn-results-index``
(:mod:`sparse_attn_plugin.experiments.results_index`),
kept so that the commands recorded in results files before the move still run."""

import sys

from .experiments.results_index import main

if __name__ == "__main__":
    sys.exit(main())
