"""Reading prepared and published corpora in tests: a binarised split as fairseq loads
it, Multi30k's published ``.gz`` files, and line-by-line comparison that names the
first differing line."""

import gzip

from sparse_attn_plugin import reading


def load_split(dest, split, src, tgt):
    """The binarised split as fairseq loads it: (source lines, target lines)."""
    from fairseq.data import Dictionary, data_utils

    sides = []
    for lang in (src, tgt):
        dictionary = Dictionary.load(str(dest / f"dict.{lang}.txt"))
        data = data_utils.load_indexed_dataset(str(dest / f"{split}.{src}-{tgt}.{lang}"),
                                               dictionary)
        sides.append([dictionary.string(data[i]) for i in range(len(data))])
    return sides


def assert_same_lines(got, want, what):
    assert len(got) == len(want), f"{what}: {len(got)} lines, expected {len(want)}"
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, (f"{what}: {len(bad)} of {len(want)} lines differ, the first "
                     f"(line {bad[0] + 1}):\n  got  {got[bad[0]]}\n  want {want[bad[0]]}")


def read_gz(path):
    """The lines of one of Multi30k's published ``.gz`` files."""
    with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        return reading.split_lines(f.read())
