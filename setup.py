"""sparse-attn: the package's metadata is in pyproject.toml ([project]); what it names
dynamic, but for the version, is declared here: the console scripts, where
tests/e2e/test_console_scripts.py reads them, and the licence (MIT, LICENSE), which
pyproject.toml could only say in a form that either setuptools 65 (a fresh Python 3.10 or
3.11 venv's) or setuptools>=77 refuses or deprecates. The Makefile's install stamp depends
on this file.

fairseq-fixed is deliberately not a dependency: its metadata pulls torchaudio (several
GB, unused) and its isolated build would fetch the newest CUDA torch. ``make install``
installs it with ``--no-deps --no-build-isolation`` plus its real needs; see README.
"""

from setuptools import setup

setup(
    license="MIT",
    entry_points={
        "console_scripts": [
            "sparse-attn-synth = sparse_attn_data.synthetic:main",
            "sparse-attn-compare = sparse_attn_experiments.compare:main",
            "sparse-attn-reproduce = sparse_attn_experiments.reproduce:main",
            "sparse-attn-results-index = sparse_attn_experiments.results_index:main",
            "sparse-attn-toy-example = sparse_attn_experiments.toy_example:main",
            "sparse-attn-score = sparse_attn_plugin.evaluation.cli:main",
            "sparse-attn-align = sparse_attn_plugin.evaluation.align_cli:main",
            "sparse-attn-analyze = sparse_attn_plugin.analysis.cli:main",
            "sparse-attn-flags = sparse_attn_plugin.models.flag_listing:main",
        ],
    },
)
