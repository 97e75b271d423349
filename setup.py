"""sparse-attn: the package's metadata is in pyproject.toml ([project]); what it names
dynamic, but for the version, is declared here: the console scripts, where
tests/e2e/test_console_scripts.py reads them, the licence (MIT, LICENSE), which
pyproject.toml could only say in a form that either setuptools 65 (a fresh Python 3.10 or
3.11 venv's) or setuptools>=77 refuses or deprecates, and the extras, read from their one
table, sparse_attn_plugin/extras.py (loaded by path: building imports neither the package
nor torch), and, for [test], requirements-dev.txt. The Makefile's install stamp depends on
this file.

fairseq-fixed is deliberately not a dependency: its metadata pulls torchaudio (several
GB, unused) and its isolated build would fetch the newest CUDA torch. ``make install``
installs it with ``--no-deps --no-build-isolation`` plus its real needs; see README.
"""

import importlib.util
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent


def extras_require():
    """Each extra's pip specs; ``all``: every one but for development; ``dev``: all."""
    spec = importlib.util.spec_from_file_location("sparse_attn_extras",
                                                  HERE / "sparse_attn_plugin" / "extras.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    tools = [line.split("#")[0].strip() for line in
             (HERE / "requirements-dev.txt").read_text().splitlines()]
    extras = {name: list(table.specs(name)) for name in table.EXTRAS}
    extras["test"] += [line for line in tools if line]
    extras["all"] = list(table.specs(*(n for n in table.EXTRAS if n not in table.DEVELOPMENT)))
    extras["dev"] = list(dict.fromkeys(spec for name in ("all", *table.DEVELOPMENT)
                                       for spec in extras[name]))
    return extras


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
            "sparse-attn-flags = sparse_attn_plugin.flag_listing:main",
        ],
    },
    extras_require=extras_require(),
)
