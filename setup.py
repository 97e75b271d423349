"""sparse-attn: the package's metadata is in pyproject.toml ([project]); only the console
scripts are declared here, where tests/e2e/test_console_scripts.py reads them (pyproject
names them dynamic). The Makefile's install stamp depends on this file.

fairseq-fixed is deliberately not a dependency: its metadata pulls torchaudio (several
GB, unused) and its isolated build would fetch the newest CUDA torch. ``make install``
installs it with ``--no-deps --no-build-isolation`` plus its real needs; see README.
"""

from setuptools import setup

setup(
    entry_points={
        "console_scripts": [
            "sparse-attn-synth = data_prep.synthetic:main",
            "sparse-attn-compare = sparse_attn_plugin.experiments.compare:main",
            "sparse-attn-reproduce = sparse_attn_plugin.experiments.reproduce:main",
            "sparse-attn-results-index = sparse_attn_plugin.experiments.results_index:main",
            "sparse-attn-toy-example = sparse_attn_plugin.experiments.toy_example:main",
            "sparse-attn-score = sparse_attn_plugin.evaluation.cli:main",
            "sparse-attn-align = sparse_attn_plugin.evaluation.align_cli:main",
            "sparse-attn-analyze = sparse_attn_plugin.analysis.cli:main",
        ],
    },
)
