"""A stand-in word aligner for DROP's hand-computed cases."""

LEXICON = {"a": "A", "b": "B", "c": "C", "d": "D", "e": "E"}


class GreedyAligner:
    """Stand-in: each target word links to the first unused source word whose lexicon
    entry it is; with ``sink``, other target words link to a sink after the sentence."""

    def __init__(self, sink=False):
        self.sink, self.calls = sink, []

    def align(self, src, tgt, symmetrize):
        self.calls.append(symmetrize)
        src, tgt = list(src), list(tgt)
        used, links = set(), set()
        for j, word in enumerate(tgt):
            i = next((i for i, s in enumerate(src)
                      if i not in used and LEXICON.get(s) == word), None)
            if i is not None:
                used.add(i)
                links.add((i, j))
            elif self.sink:
                links.add((len(src), j))
        return links
