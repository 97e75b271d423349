"""Archives in each corpus's published layout and format, with made-up sentences: what
the tests run the recipes on offline (``--raw-dir``), and what the data-preparation
benchmark (benchmarks/bench_data_prep.py) times at full corpus size.

The sentences come from templates and a seeded generator (word ``k`` of one language
translates word ``k`` of the other) and carry what the recipes must handle: capitals,
punctuation to tokenise, apostrophes, markup and metadata lines, Romanian diacritics,
and a few pairs that the length/ratio cleaning removes.
"""

import gzip
import io
import random
import tarfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

WORDS = {
    "de": ["Haus", "Katze", "geht", "schnell", "groß", "Welt", "heute", "wir", "sehen",
           "Bäume", "über", "Straße", "Kinder", "spielen", "gern", "dort"],
    "en": ["house", "cat", "goes", "fast", "big", "world", "today", "we", "see", "trees",
           "over", "street", "children", "play", "gladly", "there"],
    "ro": ["casă", "pisică", "merge", "repede", "mare", "lume", "astăzi", "noi", "vedem",
           "copaci", "peste", "stradă", "copiii", "şcoală", "ţară", "încă"],
    "ja": ["家", "猫", "行く", "速く", "大きい", "世界", "今日", "私たち", "見る", "木",
           "上", "通り", "子供", "遊ぶ", "喜んで", "そこ"],
    "vi": ["nhà", "mèo", "đi", "nhanh", "lớn", "thế_giới", "hôm_nay", "chúng_tôi", "thấy",
           "cây", "trên", "đường", "trẻ_em", "chơi", "vui_vẻ", "đó"],
}


def sentence_pairs(n: int, seed: int, src: str = "de", tgt: str = "en") -> List[Tuple[str, str]]:
    """``n`` made-up pairs; word ``k`` of one language translates word ``k`` of the other."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        ids = [rng.randrange(len(WORDS["de"])) for _ in range(rng.randint(3, 9))]
        s, t = (" ".join(WORDS[lang][k] for k in ids) for lang in (src, tgt))
        end = rng.choice([".", "!", "?", ", (1)"])
        pairs.append((s.capitalize() + end, t.capitalize() + end))
    return pairs


def tar_gz(path: Path, files: Dict[str, str]) -> Path:
    """A ``.tgz`` holding ``files`` (member name -> UTF-8 text)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, content in files.items():
            data = content.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def iwslt_xml(pairs: List[Tuple[str, str]], side: int, name: str, lang: str) -> str:
    """An IWSLT dev/test XML file (``<seg id="N">`` per sentence)."""
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<mteval>",
             f'<srcset setid="{name}" srclang="{lang}">' if side == 0 else
             f'<refset setid="{name}" trglang="{lang}">', '<doc docid="1" genre="lectures">',
             "<url>http://www.ted.com/talks/x.html</url>", "<talkid>1</talkid>"]
    lines += [f'<seg id="{i}"> {pair[side]} </seg>' for i, pair in enumerate(pairs, 1)]
    lines += ["</doc>", "</srcset>" if side == 0 else "</refset>", "</mteval>"]
    return "\n".join(lines) + "\n"


#: Training pairs that cleaning drops: an empty side, and a ratio above 1.5.
UNCLEAN = [("", "Nothing on one side."),
           ("Kurz .", "this english side is far far longer than its german side .")]


def iwslt14_archive(folder: Path, train: int = 60, test_each: int = 4,
                    pairs: Optional[List[Tuple[str, str]]] = None) -> Tuple[Path, dict]:
    """``de-en.tgz`` as fairseq's IWSLT14 link serves it, and the pairs it holds: ``train``
    made-up training pairs (and two unclean ones), or the given ``pairs``."""
    pairs = pairs if pairs is not None else sentence_pairs(train, seed=14) + UNCLEAN
    # the train.tags files: metadata lines between the talks' sentences
    sides = {lang: [] for lang in ("de", "en")}
    for talk in range(3):
        chunk = pairs[talk::3]
        for k, lang in enumerate(("de", "en")):
            sides[lang] += [f"<url>http://www.ted.com/talks/talk{talk}.html</url>",
                            f"<keywords>talks, {lang}</keywords>",
                            f"<talkid>{talk}</talkid>",
                            f"<title>Talk {talk} {'Titel' if lang == 'de' else 'title'}</title>",
                            f"<description>TED talk {talk}</description>"]
            sides[lang] += [pair[k] for pair in chunk]
    files = {f"de-en/train.tags.de-en.{lang}": "\n".join(lines) + "\n"
             for lang, lines in sides.items()}
    tests = {}
    for j, name in enumerate(("IWSLT14.TED.dev2010", "IWSLT14.TEDX.dev2012",
                              "IWSLT14.TED.tst2010", "IWSLT14.TED.tst2011",
                              "IWSLT14.TED.tst2012")):
        tests[name] = [(s.replace("'", "\u2019"), t) for s, t in
                       sentence_pairs(test_each, seed=100 + j)]
        for k, lang in enumerate(("de", "en")):
            files[f"de-en/{name}.de-en.{lang}.xml"] = iwslt_xml(tests[name], k, name, lang)
    files["de-en/README"] = "IWSLT 2014 German-English\n"
    return tar_gz(folder / "de-en.tgz", files), {"train": pairs, "tests": tests}


def write_plain(folder: Path, files: Dict[str, List[str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in files.items():
        (folder / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def tokenized(pairs):
    """As a corpus published tokenised has them: punctuation split off."""
    return [tuple(side.replace(".", " .").replace("!", " !").replace("?", " ?")
                  .replace(",", " ,") for side in pair) for pair in pairs]


def iwslt15_files(folder: Path) -> dict:
    """The six plain files of the Stanford IWSLT15 En-Vi release."""
    made = {"train": tokenized(sentence_pairs(40, 15, "en", "vi")),
            "tst2012": tokenized(sentence_pairs(5, 16, "en", "vi")),
            "tst2013": tokenized(sentence_pairs(6, 17, "en", "vi"))}
    write_plain(folder, {f"{name}.{lang}": [p[k] for p in pairs] for name, pairs in made.items()
                         for k, lang in enumerate(("en", "vi"))})
    return made


def multi30k_files(folder: Path) -> dict:
    """The twelve ``.gz`` files of Multi30k's ``data/task1/raw`` (true case, untokenised)."""
    from sparse_attn_data.multi30k_de_en import FILES

    folder.mkdir(parents=True, exist_ok=True)
    made = {stem: sentence_pairs(40 if stem == "train" else 5, 30 + k)
            for k, stem in enumerate(FILES.values())}
    for stem, pairs in made.items():
        for k, lang in enumerate(("de", "en")):
            with gzip.open(folder / f"{stem}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(p[k] + "\n" for p in pairs))
    return made


def kftt_archive(folder: Path) -> Tuple[Path, dict]:
    """``kftt-data-1.0.tar.gz``: original and tokenised versions of each split."""
    made = {"kyoto-train.cln": tokenized(sentence_pairs(40, 20, "ja", "en")),
            "kyoto-dev": tokenized(sentence_pairs(5, 21, "ja", "en")),
            "kyoto-test": tokenized(sentence_pairs(7, 22, "ja", "en"))}
    files = {"kftt-data-1.0/README.md": "KFTT\n"}
    for name, pairs in made.items():
        for k, lang in enumerate(("ja", "en")):
            lines = "".join(p[k] + "\n" for p in pairs)
            files[f"kftt-data-1.0/data/tok/{name}.{lang}"] = lines
            files[f"kftt-data-1.0/data/orig/{name}.{lang}"] = lines.replace(" ", "")
    return tar_gz(folder / "kftt-data-1.0.tar.gz", files), made


def sgm(lines: List[str], setid: str, lang: str, kind: str) -> str:
    """A WMT SGML file: ``srcset`` or ``refset``, one ``<seg>`` per sentence."""
    tag = "srcset" if kind == "src" else "refset"
    body = [f'<{tag} setid="{setid}" srclang="any" trglang="{lang}">',
            f'<doc sysid="{kind}" docid="1-news" genre="news" origlang="en">', "<p>"]
    body += [f'<seg id="{i}">{line}</seg>' for i, line in enumerate(lines, 1)]
    return "\n".join(body + ["</p>", "</doc>", f"</{tag}>"]) + "\n"


def wmt14_archives(folder: Path) -> dict:
    """The five WMT14 En-De archives, each in its published layout."""
    parts = {name: sentence_pairs(n, seed, "en", "de") for name, n, seed in (
        ("europarl", 20, 30), ("commoncrawl", 15, 31), ("nc", 10, 32), ("dev", 6, 33),
        ("test", 7, 34), ("dev2012", 5, 35))}
    parts["commoncrawl"].append(("A well-known house.", "Ein weithin-bekanntes Haus."))
    plain = {"europarl": "training/europarl-v7.de-en", "commoncrawl": "commoncrawl.de-en",
             "nc": "training/news-commentary-v9.de-en"}
    archives = {"europarl": "training-parallel-europarl-v7.tgz",
                "commoncrawl": "training-parallel-commoncrawl.tgz",
                "nc": "training-parallel-nc-v9.tgz"}
    for name, prefix in plain.items():
        files = {f"{prefix}.{lang}": "".join(p[k] + "\n" for p in parts[name])
                 for k, lang in enumerate(("en", "de"))}
        files[f"{prefix}.fr"] = "ignored\n" * len(parts[name])
        tar_gz(folder / archives[name], files)
    dev = {f"dev/{name}.{lang}": "".join(p[k] + "\n" for p in parts[part])
           for name, part in (("newstest2013", "dev"), ("newstest2012", "dev2012"))
           for k, lang in enumerate(("en", "de"))}
    dev["dev/newstest2013-src.en.sgm"] = sgm([p[0] for p in parts["dev"]], "newstest2013",
                                             "en", "src")
    tar_gz(folder / "dev.tgz", dev)
    test = {"test-full/newstest2014-deen-src.en.sgm": sgm([p[0] for p in parts["test"]],
                                                          "newstest2014", "en", "src"),
            "test-full/newstest2014-deen-ref.de.sgm": sgm([p[1] for p in parts["test"]],
                                                          "newstest2014", "de", "ref"),
            "test-full/newstest2014-deen-src.de.sgm": sgm([p[1] for p in parts["test"]],
                                                          "newstest2014", "de", "src")}
    tar_gz(folder / "test-full.tgz", test)
    return parts


def wmt16_archives(folder: Path) -> dict:
    """The four WMT16 Ro-En archives (Europarl v8, SETimes2 zip, dev, test)."""
    import zipfile

    parts = {name: sentence_pairs(n, seed, "ro", "en") for name, n, seed in (
        ("europarl", 20, 40), ("setimes", 15, 41), ("dev", 5, 42), ("test", 6, 43))}
    tar_gz(folder / "training-parallel-ep-v8.tgz", {
        f"training-parallel-ep-v8/europarl-v8.ro-en.{lang}": "".join(p[k] + "\n"
                                                                     for p in parts["europarl"])
        for k, lang in enumerate(("ro", "en"))})
    with zipfile.ZipFile(folder / "en-ro.txt.zip", "w") as z:
        for k, lang in enumerate(("ro", "en")):
            z.writestr(f"SETIMES.en-ro.{lang}", "".join(p[k] + "\n" for p in parts["setimes"]))
        z.writestr("README", "SETIMES2\n")
    for name, setid, archive, top in (("dev", "newsdev2016", "dev-romanian-updated.tgz", "dev"),
                                      ("test", "newstest2016", "test.tgz", "test")):
        tar_gz(folder / archive, {
            f"{top}/{setid}-roen-src.ro.sgm": sgm([p[0] for p in parts[name]], setid, "ro",
                                                  "src"),
            f"{top}/{setid}-roen-ref.en.sgm": sgm([p[1] for p in parts[name]], setid, "en",
                                                  "ref"),
            f"{top}/{setid}-enro-src.en.sgm": sgm([p[1] for p in parts[name]], setid, "en",
                                                  "src")})
    return parts
