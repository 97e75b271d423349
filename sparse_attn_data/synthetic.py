"""Synthetic parallel corpus with word alignments and fertilities known by construction.

A seeded toy language pair: each source word type has a fixed fertility (0-3), translation
and word class, and adjective-like words swap with a following noun-like word, so the gold
alignments and fertilities are known. Its rules and files: docs/corpora.md, "Synthetic
corpus".
"""
import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

import filecmp
import inspect
import json
import os
import shutil
from dataclasses import dataclass

import numpy as np

from sparse_attn_plugin.command_line import CommandParser
from sparse_attn_plugin.files import atomic_path, write_lines

from .binarize import fairseq_preprocess

SPLITS = ("train", "valid", "test")
SUFFIXES = ("src", "tgt", "align", "fert")
VERSION = 1  # bump when the generator's output changes
_SRC_LETTERS = ("bdgklprst", "aeiou")
_TGT_LETTERS = ("fhjmnvwyz", "aeiou")
_FERT_BLOCK = (0, 1, 1, 1, 1, 1, 1, 2, 2, 3)
_CLASSES, _CLASS_P = ("A", "N", "O"), (0.2, 0.4, 0.4)


@dataclass(frozen=True)
class Lexicon:
    """Words of both languages; per source type: class, fertility and translation."""

    src_words: tuple
    tgt_words: tuple
    word_class: tuple
    fertility: tuple
    translation: tuple


def _words(rng, n, letters):
    consonants, vowels = letters
    words = {}  # insertion-ordered set
    while len(words) < n:
        syllables = rng.choice([2, 3], p=[0.6, 0.4])
        words["".join(consonants[rng.integers(len(consonants))]
                      + vowels[rng.integers(len(vowels))] for _ in range(syllables))] = None
    return tuple(words)


def build_lexicon(seed=1, src_vocab=300, tgt_vocab=300):
    """The lexicon for ``seed``; source type ``k`` has frequency rank ``k``."""
    rng = np.random.default_rng([seed, 0])
    src_words = _words(rng, src_vocab, _SRC_LETTERS)
    tgt_words = _words(rng, tgt_vocab, _TGT_LETTERS)
    blocks = -(-src_vocab // len(_FERT_BLOCK))
    fert = np.concatenate([rng.permutation(_FERT_BLOCK) for _ in range(blocks)])
    fert = fert[:src_vocab]
    word_class = tuple(rng.choice(_CLASSES, size=src_vocab, p=_CLASS_P).tolist())
    pool = np.concatenate([rng.permutation(tgt_vocab)
                           for _ in range(-(-int(fert.sum()) // tgt_vocab))])
    ends = np.cumsum(fert)
    translation = tuple(tuple(pool[e - f:e].tolist()) for f, e in zip(fert, ends))
    return Lexicon(src_words, tgt_words, word_class, tuple(fert.tolist()), translation)


def translate(lexicon, src):
    """Translate source type ids; returns (target type ids, sorted (i, j) links)."""
    order = list(range(len(src)))
    for i in range(len(src) - 1):
        if lexicon.word_class[src[i]] == "A" and lexicon.word_class[src[i + 1]] == "N":
            order[i], order[i + 1] = i + 1, i
    tgt, links = [], []
    for i in order:
        for t in lexicon.translation[src[i]]:
            links.append((i, len(tgt)))
            tgt.append(t)
    return tgt, sorted(links)


def check_params(seed, train, valid, test, min_len, max_len, src_vocab, tgt_vocab):
    """Raise ValueError with a clear message if the corpus parameters are unusable."""
    for name, value in (("train", train), ("valid", valid), ("test", test)):
        if value <= 0:
            raise ValueError(f"--{name} must be a positive number, not {value}")
    if min_len < 1:
        raise ValueError(f"--min-len must be at least 1, not {min_len}")
    if min_len > max_len:
        raise ValueError(f"--min-len ({min_len}) is larger than --max-len ({max_len})")
    if max_len > 1000:
        raise ValueError(f"--max-len must be at most 1000, not {max_len}")
    for name, value in (("src-vocab", src_vocab), ("tgt-vocab", tgt_vocab)):
        if not 10 <= value <= 10000:
            raise ValueError(f"--{name} must be between 10 and 10000, not {value}")
    if seed < 0:
        raise ValueError(f"--seed must be non-negative, not {seed}")


def _sentences(lexicon, rng, n, min_len, max_len):
    lengths = np.arange(min_len, max_len + 1)
    logp = 2.0 * np.log(lengths) - lengths / 6.0  # gamma(shape 3, scale 6)
    p_len = np.exp(logp - logp.max())
    p_len /= p_len.sum()
    cdf = np.cumsum(1.0 / (np.arange(len(lexicon.src_words)) + 2.7))
    cdf /= cdf[-1]
    fert = np.array(lexicon.fertility)
    for _ in range(n):
        length = rng.choice(lengths, p=p_len)
        src = np.searchsorted(cdf, rng.random(length))
        while not fert[src].any():
            src = np.searchsorted(cdf, rng.random(length))
        yield src.tolist()


def _pair_lines(lexicon, src):
    tgt, links = translate(lexicon, src)
    return {"src": " ".join(lexicon.src_words[w] for w in src),
            "tgt": " ".join(lexicon.tgt_words[w] for w in tgt),
            "align": " ".join(f"{i}-{j}" for i, j in links),
            "fert": " ".join(str(lexicon.fertility[w]) for w in src)}


def write_corpus(out_dir, seed=1, train=20000, valid=1000, test=1000,
                 min_len=3, max_len=40, src_vocab=300, tgt_vocab=300):
    """Write the corpus to ``out_dir`` unless already there; return its manifest."""
    params = {"seed": seed, "train": train, "valid": valid, "test": test,
              "min_len": min_len, "max_len": max_len,
              "src_vocab": src_vocab, "tgt_vocab": tgt_vocab}
    check_params(**params)
    params["version"] = VERSION
    manifest_path = os.path.join(out_dir, "MANIFEST.json")
    files = [os.path.join(out_dir, f"{s}.{x}") for s in SPLITS for x in SUFFIXES]
    if os.path.exists(manifest_path) and all(map(os.path.exists, files)):
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
        if manifest.get("params") == params:
            return manifest
    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(manifest_path):
        os.remove(manifest_path)  # the files below no longer match it
    lexicon = build_lexicon(seed, src_vocab, tgt_vocab)
    counts = {}
    for k, split in enumerate(SPLITS):
        rng = np.random.default_rng([seed, k + 1])
        rows = [_pair_lines(lexicon, src)
                for src in _sentences(lexicon, rng, params[split], min_len, max_len)]
        for suffix in SUFFIXES:
            write_lines(os.path.join(out_dir, f"{split}.{suffix}"),
                        (row[suffix] for row in rows))
        counts[split] = {"pairs": len(rows),
                         "src_tokens": sum(len(r["src"].split()) for r in rows),
                         "tgt_tokens": sum(len(r["tgt"].split()) for r in rows)}
    manifest = {"params": params, "splits": counts}
    write_lines(manifest_path, [json.dumps(manifest, indent=1, sort_keys=True)])
    return manifest


def binarize(raw_dir, dest_dir, workers=1):
    """Run fairseq-preprocess on ``raw_dir`` and add the gold ``{split}.align`` and
    ``{split}.src-tgt.fert`` files.

    The result appears at ``dest_dir`` only when complete; skipped when ``dest_dir``
    already holds the same MANIFEST.json as ``raw_dir``.
    """
    raw_manifest = os.path.join(raw_dir, "MANIFEST.json")
    dest_manifest = os.path.join(dest_dir, "MANIFEST.json")
    if (os.path.exists(raw_manifest) and os.path.exists(dest_manifest)
            and filecmp.cmp(raw_manifest, dest_manifest, shallow=False)):
        return dest_dir
    with atomic_path(dest_dir) as tmp:  # replaces an older dest_dir once complete
        fairseq_preprocess(raw_dir, "src", "tgt", tmp, SPLITS, workers=workers)
        # Gold alignments as they are; gold fertilities where --task sparse_translation
        # looks for them.
        copies = {f"{s}.align": f"{s}.align" for s in SPLITS}
        copies.update({f"{s}.fert": f"{s}.src-tgt.fert" for s in SPLITS})
        if os.path.exists(raw_manifest):
            copies["MANIFEST.json"] = "MANIFEST.json"
        for name, dest in copies.items():
            shutil.copyfile(os.path.join(raw_dir, name), os.path.join(tmp, dest))
    return dest_dir


def main(argv=None):
    """CLI: write the synthetic corpus (and optionally binarise it); print a summary."""
    parser = CommandParser(prog="sparse-attn-synth", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for the text files")
    parser.add_argument("--bin", help="also binarise with fairseq-preprocess into this")
    parser.add_argument("--workers", type=int, default=1, help="for fairseq-preprocess")
    params = list(inspect.signature(write_corpus).parameters.values())[1:]
    for p in params:
        parser.add_argument("--" + p.name.replace("_", "-"), type=int,
                            default=p.default, help=f"default {p.default}")
    args = parser.parse_args(argv)
    params = {p.name: getattr(args, p.name) for p in params}
    try:
        check_params(**params)
    except ValueError as e:
        parser.fail(e)
    if args.workers < 1:
        parser.fail(f"--workers must be at least 1, not {args.workers}")
    try:
        counts = write_corpus(args.out, **params)["splits"]
        if args.bin:
            binarize(args.out, args.bin, args.workers)
    except (RuntimeError, OSError) as e:
        parser.fail(e)
    pairs = sum(c["pairs"] for c in counts.values())
    src_len, tgt_len = (sum(c[k] for c in counts.values()) / pairs
                        for k in ("src_tokens", "tgt_tokens"))
    print(f"synthetic corpus in {args.out}"
          + (f" (binarised in {args.bin})" if args.bin else "") + ": "
          + " / ".join(f"{s} {counts[s]['pairs']}" for s in SPLITS)
          + f" pairs; mean length src {src_len:.1f} tgt {tgt_len:.1f};"
          + f" vocab src {args.src_vocab} tgt {args.tgt_vocab}")


if __name__ == "__main__":
    main()
