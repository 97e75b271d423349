"""sparse-attn-score as typed, on the inputs issue 44 found it scoring wrongly: partial
fairseq output (a reference or a sentence missing, no T- lines at all), ``<<unk>>`` in
T- lines, bad H- scores, an unknown tokenizer, blank hypotheses; and on outputs: in a
folder that does not exist, over an input, one failing after the other, ``--json -``."""

import json
import subprocess

import pytest

from sparse_attn_plugin.evaluation import corpus_bleu

from helpers import BIN

REFS = ["the cat sat on a mat .", "the dog barked", "very good", "a man rides a red bike ."]
HYPS = ["the cat sat on the mat .", "the dog barked loudly", "very very good",
        "a man rides a bike ."]


def score(*args):
    return subprocess.run([BIN / "sparse-attn-score", *map(str, args)],
                          capture_output=True, text=True)


def refused(proc, message):
    """Exit status 1 and ``message`` as the one line on stderr, nothing on stdout."""
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
    assert proc.stderr.splitlines() == [f"sparse-attn-score: error: {message}"]


def generate_output(path, refs=REFS, hyps=HYPS, kinds="STH", skip=()):
    """fairseq-generate's lines for the sentences (``kinds`` of them; ``skip``: the
    (kind, id) pairs left out), in fairseq's order: not by id; then its count line."""
    lines = []
    for i in reversed(range(len(hyps))):
        texts = {"S": f"src {i}", "T": refs[i], "H": f"-0.{i + 1}\t{hyps[i]}"}
        lines += [f"{kind}-{i}\t{texts[kind]}" for kind in kinds if (kind, i) not in skip]
        lines.append(f"D-{i}\t-0.{i + 1}\t{hyps[i]}")
    lines.append(f"2026-11-29 10:00:00 | INFO | fairseq_cli.generate | Translated {len(hyps)} "
                 "sentences (20 tokens) in 0.1s (40.00 sentences/s, 200.00 tokens/s)")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def lines(path, texts):
    path.write_text("".join(f"{text}\n" for text in texts), encoding="utf-8")
    return path


@pytest.fixture
def out(tmp_path):
    """An output already there, which a refused run must leave as it is."""
    return lines(tmp_path / "scores.json", ["before"])


# Finding 8: partial input is refused, not scored.

def test_a_missing_reference_is_refused(tmp_path, out):
    """One T- line dropped: no longer scored as an empty reference (BLEU drops by points,
    exit 0); the file and the first id without one are named, and nothing is written."""
    gen = generate_output(tmp_path / "gen.out", skip={("T", 2)})
    proc = score("--generate-output", gen, "--metrics", "bleu,chrf", "--json", out)
    assert out.read_text() == "before\n"
    refused(proc, f"{gen}: sentence 2 has no T- line (reference) of ids 0-3: the output "
                  "is incomplete")


def test_a_missing_sentence_is_refused(tmp_path, out):
    """A sentence id with no H- line at all (fairseq's skipped last batch): refused."""
    gen = generate_output(tmp_path / "gen.out", skip={("S", 1), ("T", 1), ("H", 1)})
    proc = score("--generate-output", gen, "--json", out)
    assert out.read_text() == "before\n"
    refused(proc, f"{gen}: sentence 1 has no H- line (hypothesis) of ids 0-3: the output "
                  "is incomplete")


def test_interactive_output_needs_ref_and_scores_against_it(tmp_path):
    """fairseq-interactive prints no T- lines: refused alone (it scored BLEU 0.00, exit
    0); with --ref, scored against its lines exactly as --hyp/--ref."""
    gen = generate_output(tmp_path / "gen.out", kinds="SH")
    refused(score("--generate-output", gen, "--metrics", "bleu,chrf"),
            f"{gen}: no references (T- lines), as fairseq-interactive prints none: score "
            "against a references file (--ref FILE)")
    ref = lines(tmp_path / "ref", REFS)
    proc = score("--generate-output", gen, "--ref", ref, "--json", "-")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["bleu"]["score"] == corpus_bleu(HYPS, REFS).score
    short = lines(tmp_path / "short", REFS[:3])
    refused(score("--generate-output", gen, "--ref", short),
            f"line counts differ: {gen} has 4, {short} has 3")


def test_ref_and_src_take_the_place_of_t_and_s_lines_and_say_so(tmp_path):
    """They were ignored without a word: the T- lines were scored."""
    gen = generate_output(tmp_path / "gen.out", refs=["x"] * 4)
    ref = lines(tmp_path / "ref", REFS)
    proc = score("--generate-output", gen, "--ref", ref, "--metrics", "bleu", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["bleu"]["score"] == corpus_bleu(HYPS, REFS).score
    assert (f"sparse-attn-score: warning: {ref} is read in place of the T- lines of {gen}"
            in proc.stderr.splitlines())
    src = lines(tmp_path / "src", ["a", "b", "c"])
    refused(score("--generate-output", gen, "--src", src),
            f"line counts differ: {gen} has 4, {src} has 3")
    refused(score("--generate-output", gen, "--hyp", ref, "--ref", ref),
            "give --hyp or --generate-output, not both")


def test_a_bad_hypothesis_score_names_the_file_and_line(tmp_path):
    gen = generate_output(tmp_path / "gen.out")
    text = gen.read_text().replace("H-1\t-0.2\t", "H-1\tnope\t")
    gen.write_text(text)
    number = text.splitlines().index(f"H-1\tnope\t{HYPS[1]}") + 1
    refused(score("--generate-output", gen),
            f"{gen}: line {number}: the score of H-1, 'nope', is not a number")


def test_an_unknown_tokenizer_is_one_line(tmp_path):
    """It ended in a KeyError traceback from sacreBLEU."""
    hyp, ref = lines(tmp_path / "hyp", HYPS), lines(tmp_path / "ref", REFS)
    proc = score("--hyp", hyp, "--ref", ref, "--tokenize", "bogus")
    assert (proc.returncode, proc.stdout) == (1, "")
    [line] = proc.stderr.splitlines()
    assert line.startswith("sparse-attn-score: error: argument --tokenize: invalid choice: "
                           "'bogus' (choose from 'none', ")
    assert "'13a'" in line


def test_blank_hypotheses_are_empty_translations(tmp_path):
    """40 empty translations score 0 (they were refused as "file is empty"); a file
    with no line at all is the empty one."""
    refs = [f"sentence number {i} ." for i in range(40)]
    ref, hyp = lines(tmp_path / "ref", refs), lines(tmp_path / "hyp", [""] * 40)
    proc = score("--hyp", hyp, "--ref", ref, "--metrics", "bleu,chrf", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    scores = json.loads(proc.stdout)
    assert scores["bleu"]["score"] == scores["chrf"]["score"] == 0.0
    hyp.write_text("")
    refused(score("--hyp", hyp, "--ref", ref), f"{hyp}: file is empty")
    lines(hyp, [""] * 39)
    refused(score("--hyp", hyp, "--ref", ref), f"line counts differ: {hyp} has 39, {ref} has 40")


def test_a_failed_write_names_the_users_file_not_a_temporary_one(tmp_path):
    hyp, ref = lines(tmp_path / "hyp", HYPS), lines(tmp_path / "ref", REFS)
    (tmp_path / "taken").mkdir()
    proc = score("--hyp", hyp, "--ref", ref, "--json", tmp_path / "taken")
    refused(proc, f"--json {tmp_path / 'taken'}: is a folder")
    assert ".tmp-" not in proc.stderr


# Finding 9: outputs all or none, never over an input.

def test_a_failing_per_sentence_leaves_no_json(tmp_path, out):
    """--per-sentence that cannot be written: --json is neither written nor replaced."""
    hyp, ref = lines(tmp_path / "hyp", HYPS), lines(tmp_path / "ref", REFS)
    (tmp_path / "per").mkdir()
    proc = score("--hyp", hyp, "--ref", ref, "--json", out, "--per-sentence", tmp_path / "per")
    assert out.read_text() == "before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hyp", "per", "ref", "scores.json"]
    refused(proc, f"--per-sentence {tmp_path / 'per'}: is a folder")


@pytest.mark.parametrize("output", ["--json", "--per-sentence"])
@pytest.mark.parametrize("input_flag", ["--hyp", "--ref", "--baseline"])
def test_an_output_over_an_input_is_refused(tmp_path, output, input_flag):
    files = {"--hyp": lines(tmp_path / "hyp", HYPS), "--ref": lines(tmp_path / "ref", REFS),
             "--baseline": lines(tmp_path / "base", REFS)}
    before = {path: path.read_text() for path in files.values()}
    args = [x for flag, path in files.items() for x in (flag, path)]
    proc = score(*args, output, tmp_path / ".." / tmp_path.name / files[input_flag].name)
    assert {path: path.read_text() for path in files.values()} == before
    refused(proc, f"{output} {tmp_path}/../{tmp_path.name}/{files[input_flag].name}: the same "
                  f"file as {input_flag}: choose another name")


def test_generate_output_cannot_be_overwritten_either(tmp_path):
    gen = generate_output(tmp_path / "gen.out")
    before = gen.read_text()
    proc = score("--generate-output", gen, "--json", gen)
    assert gen.read_text() == before
    refused(proc, f"--json {gen}: the same file as --generate-output: choose another name")
    refused(score("--generate-output", gen, "--json", tmp_path / "s", "--per-sentence",
                  tmp_path / "s"),
            f"--per-sentence {tmp_path / 's'}: the same file as --json: choose another name")
    assert gen.read_text() == before and not (tmp_path / "s").exists()


# Finding 12: what misleads without an error.

def test_json_on_stdout_is_parseable_and_the_table_goes_to_stderr(tmp_path):
    hyp, ref = lines(tmp_path / "hyp", HYPS), lines(tmp_path / "ref", REFS)
    proc = score("--hyp", hyp, "--ref", ref, "--json", "-")
    assert proc.returncode == 0, proc.stderr
    assert list(json.loads(proc.stdout)) == ["bleu", "chrf", "rep"]
    assert proc.stderr.splitlines()[0].split() == ["metric", "score", "details"]
    plain = score("--hyp", hyp, "--ref", ref)
    assert plain.stdout == proc.stderr and plain.stderr == ""


def test_unk_in_references_is_warned_about(tmp_path):
    """T- lines hold fairseq's <<unk>> where the reference has a word outside the
    vocabulary: scored as they are, with a warning saying how many and what to do."""
    unk = [REFS[0], "the <<unk>> barked", REFS[2], "a man rides a <<unk>> <<unk>> ."]
    gen = generate_output(tmp_path / "gen.out", refs=unk)
    proc = score("--generate-output", gen, "--metrics", "bleu", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["bleu"]["score"] == corpus_bleu(HYPS, unk).score
    assert (f"sparse-attn-score: warning: 2 of the 4 references (T- lines) in {gen} hold "
            "<<unk>>, fairseq's mark for a word outside the model's vocabulary: they are not "
            "the real references, and the scores differ from theirs; to score against the "
            "real text, add --ref FILE (docs/scoring.md)") in proc.stderr.splitlines()
    clean = score("--generate-output", generate_output(tmp_path / "clean.out"))
    assert clean.returncode == 0 and "warning" not in clean.stderr


@pytest.mark.parametrize("output", ["--json", "--per-sentence"])
def test_an_output_in_a_missing_folder_is_refused(tmp_path, output):
    """Not created silently (a typo in the folder would hide the scores)."""
    hyp, ref = lines(tmp_path / "hyp", HYPS), lines(tmp_path / "ref", REFS)
    target = tmp_path / "nowhere" / "deeper" / "out"
    proc = score("--hyp", hyp, "--ref", ref, output, target)
    assert not (tmp_path / "nowhere").exists()
    refused(proc, f"{output} {target}: no such folder {target.parent} (create it first)")
