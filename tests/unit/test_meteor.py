"""Meteor through one Java process agrees with the Meteor 1.5 jar run directly on files."""

import random
import re
import subprocess

import pytest

from sparse_attn_plugin.evaluation.meteor import (
    JAVA_MISSING,
    LANGUAGE_PRESETS,
    Meteor,
    find_meteor_jar,
)

from helpers import needs_java

# One worker runs the module: its fixtures start Java with the English tables (about 10 s).
pytestmark = [needs_java, pytest.mark.xdist_group("meteor"), pytest.mark.slow]

EN_HYP = ["the cat is on the mat .", "The fast brown fox jumped over a lazy dog!", "",
          "he said that the meeting would be postponed", "it was a big house", "Thank you ."]
EN_REF = ["the cat sat on the mat .", "a quick brown fox jumps over the lazy dog",
          "hello world", "he announced the meeting was delayed", "it is a large home",
          "thanks ."]
DE_HYP = ["die Katzen sitzen auf der Matte", "über dem Haus fliegt ein Vogel", "Guten Morgen !"]
DE_REF = ["die Katze saß auf der Matte .", "Über den Häusern fliegen Vögel", "guten Morgen ."]


def random_pairs(n, seed=0):
    rng = random.Random(seed)
    words = ("the a cat dog sat sits on mat house houses big large small red ran running quickly "
             "over under it is was , . and of").split()
    sentence = lambda: " ".join(rng.choices(words, k=rng.randint(1, 25)))  # noqa: E731
    return [sentence() for _ in range(n)], [sentence() for _ in range(n)]


def run_jar(tmp_path, hyps, refs, language):
    """Sentence and final scores (0-1) that the jar prints when run on files."""
    (tmp_path / "hyp").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    (tmp_path / "ref").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    out = subprocess.run(["java", "-Xmx2G", "-jar", str(find_meteor_jar()), "hyp", "ref",
                          *LANGUAGE_PRESETS[language]], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout
    segments = [float(s) for s in re.findall(r"^Segment \d+ score:\s*(\S+)$", out, re.M)]
    final = float(re.search(r"^Final score:\s*(\S+)$", out, re.M).group(1))
    assert len(segments) == len(hyps)
    return segments, final


def assert_matches_jar(result, jar):
    segments, final = jar
    assert [s / 100 for s in result.sentences] == pytest.approx(segments, abs=1e-12)
    assert result.corpus / 100 == pytest.approx(final, abs=1e-12)


@pytest.fixture(scope="module")
def meteor_en():
    with Meteor("en") as meteor:
        yield meteor


@pytest.fixture(scope="module")
def english_pairs(tmp_path_factory):
    """The fixed pairs, then 300 random ones, with the jar's scores of them all (one jar
    run: loading its English paraphrase table takes about 10 s)."""
    hyps, refs = random_pairs(300)
    hyps, refs = EN_HYP + hyps, EN_REF + refs
    return hyps, refs, run_jar(tmp_path_factory.mktemp("jar"), hyps, refs, "en")


def test_fixed_english_pairs_match_jar(meteor_en, english_pairs):
    hyps, refs, (segments, _) = english_pairs
    result = meteor_en.score(EN_HYP, EN_REF)
    assert [s / 100 for s in result.sentences] == pytest.approx(segments[:len(EN_HYP)],
                                                                abs=1e-12)
    assert result.sentences[2] == 0.0  # empty hypothesis


def test_many_pairs_and_split_calls_match_jar(meteor_en, english_pairs):
    # The fixed pairs' last two match fully (synonym, paraphrase): the corpus score needs
    # the jar's own addition of statistics, which leaves out their chunks.
    hyps, refs, jar = english_pairs
    result = meteor_en.score(hyps, refs)
    assert_matches_jar(result, jar)
    first, second = meteor_en.score(hyps[:120], refs[:120]), meteor_en.score(hyps[120:], refs[120:])
    assert first.sentences + second.sentences == result.sentences
    assert meteor_en.score(hyps, refs) == result


@pytest.mark.parametrize("language", ["de", "other"])
def test_other_presets_match_jar(language, tmp_path):
    with Meteor(language) as meteor:
        result = meteor.score(DE_HYP, DE_REF)
        assert_matches_jar(result, run_jar(tmp_path, DE_HYP, DE_REF, language))
        same = meteor.score(DE_REF, DE_REF)
    assert (same.corpus, same.sentences) == (100.0, [100.0] * 3)


def test_identical_and_empty(meteor_en):
    result = meteor_en.score(EN_REF, EN_REF)
    # The jar adds no chunk for a fully matched sentence, so a perfect system scores 100
    # (an element-wise sum of the statistics would give 56.8 here).
    assert (result.corpus, result.sentences) == (100.0, [100.0] * len(EN_REF))
    empty = meteor_en.score(["", ""], ["a reference", ""])
    assert empty.corpus == 0.0 and empty.sentences == [0.0, 0.0]


def test_separators_and_newlines_are_sanitised(meteor_en):
    result = meteor_en.score(["x ||| y", "two\nlines\r\nhere"], ["x | | | y", "two lines here"])
    assert result.sentences == [100.0, 100.0]


def test_bad_input(meteor_en):
    with pytest.raises(ValueError, match="3 hypotheses but 2 references"):
        meteor_en.score(["a", "b", "c"], ["a", "b"])
    with pytest.raises(ValueError, match="no sentences"):
        meteor_en.score([], [])
    with pytest.raises(ValueError, match="unknown METEOR language 'fr'.*en: -l en -norm"):
        Meteor("fr")


def test_missing_java(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError) as error:
        Meteor("en")
    assert str(error.value) == JAVA_MISSING


def test_java_error_is_reported(tmp_path):
    bad = tmp_path / "bad.jar"
    bad.write_text("not a jar")
    meteor = Meteor("other", jar=bad)
    with pytest.raises(RuntimeError, match="Meteor \\(java\\) stopped.*corrupt jarfile"):
        meteor.score(["a"], ["a"])
    meteor.close()


def test_closed_process_raises():
    meteor = Meteor("other")
    meteor.close()
    with pytest.raises(RuntimeError, match="stopped"):
        meteor.score(["a"], ["a"])


def test_garbage_collection_ends_java():
    meteor = Meteor("other")
    process = meteor._proc
    del meteor
    assert process.wait(timeout=10) is not None
