"""sparse-attn: sparse, constrained, hard and kernel attention for fairseq.

fairseq-fixed is deliberately not in ``install_requires``: its metadata pulls
torchaudio (several GB, unused) and its isolated build would fetch the newest CUDA
torch. ``make install`` installs it with ``--no-deps`` plus its real needs; see README.
"""

from setuptools import find_packages, setup

setup(
    name="sparse_attn_plugin",
    version="0.1.0",
    description="Sparse, constrained, hard and kernel attention for fairseq NMT",
    python_requires=">=3.9",
    packages=find_packages(include=["sparse_attn_plugin", "sparse_attn_plugin.*", "data_prep"]),
    install_requires=[
        "torch>=1.13",
        "numpy>=1.24",
        "entmax>=1.3",
        "sacrebleu>=2.3",
        "tqdm",
        "sil-thot>=3.5.3",
        "sacremoses>=0.1",
        "subword-nmt>=0.3.8",
        "sentencepiece>=0.2",
        "matplotlib>=3.8",
    ],
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
