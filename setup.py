"""sparse-attn: the package's metadata is in pyproject.toml ([project]); this file stays
for tools that look for it (the Makefile's install stamp depends on it).

fairseq-fixed is deliberately not a dependency: its metadata pulls torchaudio (several
GB, unused) and its isolated build would fetch the newest CUDA torch. ``make install``
installs it with ``--no-deps --no-build-isolation`` plus its real needs; see README.
"""

from setuptools import setup

setup()
