"""README.md and docs/*.md quote from results/ only what the results files hold, and say
about GPUs only what the records' machine lines say.

**Marking a quoted figure.** An HTML comment right after the figure (invisible where the
markdown is rendered) names the record and the field it comes from::

    the rows reached 91.19-97.19 BLEU<!-- results/demo/comparison.json: rows.*.bleu.test -->

* A *figure* is a number written with a decimal point (``0.934``, ``-1.64``, ``+0.41``), a
  whole number followed by a unit of time or a ratio (``15 min``, ``905 s``, ``3 hours``,
  ``7%``, ``3x``) or a range of whole BLEU (``81-92 BLEU``). Not figures: numbers in
  ``code spans``, link targets and HTML comments; numbers inside names (``H100``,
  ``test_2016_flickr``, ``fp16``, ``1.5-entmax``, ``64-dim``), versions (``2.13.0``),
  exponents (``3e-4``) and settings written ``name = value`` (``c = 0.2``); a whole number
  without such a unit (``1 BLEU``, ``500 updates``, ``1,000 draws``).
* A marker is ``<!-- results/PATH: FIELD; FIELD ... -->`` (PATH from the repository root).
  It covers the figures between it and the previous marker or the start of its sentence,
  whichever is nearer, and must cover at least one. FIELD is a path into the JSON record:
  keys joined by dots, ``*`` for every item of a list or value of an object,
  ``key[name=value]`` for the items of the list ``key`` whose ``name`` is ``value``, and
  optionally `` / N`` or `` * N`` after it (``seconds / 60`` for minutes). Each covered
  figure must be one of the values the fields select, rounded as the figure is written
  (``91.19`` stands for any value in [91.185, 91.195], ``6 min`` for [5.5, 6.5] minutes).
  ``<!-- results/PATH.md -->``, with no field, asks that each covered figure be in that
  results file, as written there or rounded from a number written there.
* **Unmarked figures**: in a sentence that names a ``results/`` path (a marker counts),
  every figure must be covered by a marker. A code line is a sentence of its own and cannot
  hold a marker: say such a figure in the prose beside the block.

**GPUs.** The records' machine lines (``- machine:`` of every results page, ``"machine"``
of every JSON record) name a GPU as ``GPU NAME`` where one was used. Then, in README.md,
docs/*.md and every results page:

* a sentence that says results/ holds no GPU run (``no GPU``, ``has none``, ...) and names
  ``results/`` (or stands in a results page) holds only while no record names a GPU;
* a sentence that names a GPU model (``H100``, ``A100``, ...) and ``results/`` names one a
  record's machine line names;
* a sentence that names a GPU model and quotes a figure has its figures marked, by records
  made on that GPU, or names where outside results/ it was reported (``issue N``).

Each rule is shown to fail on a copy of README.md, docs/ and results/ with the fault it is
there for planted (the ``test_..._is_caught`` tests)."""

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from sparse_attn_experiments.provenance import gpu_of

from helpers import REPO

MARKER = re.compile(r"<!--\s*(results/[^\s:]+?)\s*(?::\s*(.*?))?\s*-->", re.DOTALL)
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
CODE_SPAN = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
NUMBER = re.compile(r"(?P<sign>[+\-−]?)(?P<num>\d+(?:,\d{3})*(?:\.\d+)?)")
#: Units that make a whole number a figure: time and ratios.
UNIT = re.compile(r"\s?(?:%|x\b|×)|\s(?:s|ms|min|minutes|h|hours|seconds)\b")
#: A whole number that opens a range of figures: 3-6x, 18-22 min, 81-92 BLEU.
RANGE = re.compile(rf"-\d+(?:{UNIT.pattern}| BLEU\b)")
#: A confidence level (95% interval), and a version (torch 2.13, Python 3.10).
CONFIDENCE = re.compile(r"% (?:confidence )?interval")
VERSION_OF = re.compile(r"\b(?:Python|torch|triton|fairseq|CUDA|Meteor|sacrebleu|numpy|"
                        r"version|Java) $", re.IGNORECASE)
SENTENCE_END = re.compile(r"[.!?]\s+(?=[A-Z`(*\[])")
GPU_MODEL = re.compile(r"\b(?:[HAVP]100|H200|A10G?|A40|L4|L40S?|T4|MI\d{3}X?|RTX ?\d{4})\b")
NO_GPU = re.compile(r"\bno GPU\b|\bhas none\b|\bholds no GPU\b|\bnot (?:yet )?(?:been )?run on "
                    r"(?:a|any) GPU\b|\bwithout a GPU\b", re.IGNORECASE)
ELSEWHERE = re.compile(r"\bissue \d+\b")
#: A sentence about the GPU report, and one saying it measured nothing.
GPU_REPORT = re.compile(r"\bGPU report\b|\bgpu-report\b|results/gpu\b", re.IGNORECASE)
NOTHING_MEASURED = re.compile(r"\bcut short\b|\bwrote no (?:numbers|figures)\b|\bno numbers\b|"
                              r"\bnothing (?:was )?measured\b|\bdid not (?:run|finish)\b",
                              re.IGNORECASE)
#: What says a sentence is about another run than the record's.
OTHER_RUN = re.compile(r"\bearlier\b|\bgit history\b|\bfirst call\b", re.IGNORECASE)


@dataclass
class Figure:
    text: str
    value: float
    decimals: int
    start: int  # offset in the block's text

    def rounds(self, value: float) -> bool:
        """Whether ``value`` rounded as this figure is written gives this figure."""
        return abs(value - self.value) <= 0.5 * 10 ** -self.decimals + 1e-9


@dataclass
class Block:
    """A paragraph, list item, table row or code line of one markdown file: ``where`` is
    ``FILE:LINE`` of its first line."""
    where: str
    text: str


def blocks(path: Path, root: Path) -> Iterator[Block]:
    name, lines = path.relative_to(root), path.read_text().splitlines()
    current, start, fenced = [], 0, False
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            if current:
                yield Block(f"{name}:{start}", " ".join(current))
            current, fenced = [], not fenced
            continue
        if fenced:
            yield Block(f"{name}:{number}", line)
            continue
        starts_new = (not line.strip() or line.lstrip().startswith(("- ", "* ", "|", "#"))
                      or re.match(r"\s*\d+\. ", line))
        if starts_new and current:
            yield Block(f"{name}:{start}", " ".join(current))
            current = []
        if line.strip():
            if not current:
                start = number
            current.append(line.strip())
    if current:
        yield Block(f"{name}:{start}", " ".join(current))


def _blank(pattern: re.Pattern, text: str, keep: int = 0) -> str:
    """``text`` with each match of ``pattern`` replaced by spaces (offsets kept), the
    first ``keep`` characters of each match left as they are."""
    return pattern.sub(lambda m: m.group(0)[:keep] + " " * (len(m.group(0)) - keep), text)


def figures(text: str) -> List[Figure]:
    """The figures of ``text`` (see the module's docstring), with their offsets."""
    plain = _blank(COMMENT, _blank(LINK_TARGET, _blank(CODE_SPAN, text), keep=1))
    found = []
    for match in NUMBER.finditer(plain):
        sign, num = match.group("sign"), match.group("num")
        start = match.start("num")
        before = plain[match.start() - 1] if match.start() else " "
        if sign and (before.isalnum() or before in "_."):
            sign = ""                                  # a range's dash: 91.19-97.19
            before = plain[start - 1]
        elif not sign:
            before = plain[start - 1] if start else " "
        after = plain[match.end():match.end() + 2]
        if (before.isalnum() or before in "_./"
                or re.match(r"\.\d|-[A-Za-z]|[A-Za-wyzA-Z_]", after)
                or re.search(r"=\s*$", plain[max(0, start - 3):start])):
            continue
        decimals = len(num.split(".")[1]) if "." in num else 0
        tail = plain[match.end():]
        if CONFIDENCE.match(tail) or VERSION_OF.search(plain[max(0, start - 12):start]):
            continue
        if not decimals and not (UNIT.match(tail) or RANGE.match(tail)
                                 or (before == "-" and tail.startswith(" BLEU"))):
            continue
        value = float(num.replace(",", "")) * (-1 if sign in "-−" and sign else 1)
        found.append(Figure(sign + num, value, decimals, start))
    return found


def _field_values(record, field: str) -> List[float]:
    """The numbers ``field`` (the module's docstring) selects in ``record``."""
    scale = re.fullmatch(r"(.+?)\s*([/*])\s*([\d.]+)", field)
    path, op, factor = (scale.groups() if scale else (field, None, None))
    items = [record]
    for part in re.findall(r"[^.\[\]]+(?:\[[^\]]*\])?", path.strip()):
        key, name, wanted = re.fullmatch(r"([^\[]+)(?:\[(\w+)=([^\]]+)\])?", part).groups()
        selected = []
        for item in items:
            if key == "*":
                selected.extend(item.values() if isinstance(item, dict) else
                                item if isinstance(item, list) else [])
            elif isinstance(item, dict) and key in item:
                selected.append(item[key])
        if name:
            selected = [x for value in selected if isinstance(value, list) for x in value
                        if isinstance(x, dict) and str(x.get(name)) == wanted]
        items = selected
    numbers = [float(x) for x in items if isinstance(x, (int, float)) and not isinstance(x, bool)]
    if op == "/":
        return [x / float(factor) for x in numbers]
    return [x * float(factor) for x in numbers] if op == "*" else numbers


def _written_numbers(text: str) -> List[Tuple[float, int]]:
    return [(float(m.group(0).replace(",", "").replace("−", "-")),
             len(m.group(0).split(".")[1]) if "." in m.group(0) else 0)
            for m in re.finditer(r"[+\-−]?\d+(?:,\d{3})*(?:\.\d+)?", text)]


def _sentence_start(text: str, end: int) -> int:
    starts = [m.end() for m in SENTENCE_END.finditer(text, 0, end)]
    return starts[-1] if starts else 0


def marked_faults(root: Path, files: List[Path]) -> List[str]:
    """Every marked figure that its record does not hold, every marker that names nothing
    or covers no figure, and every unmarked figure in a block that names results/."""
    faults = []
    for path in files:
        for block in blocks(path, root):
            covered, previous = set(), 0
            for marker in MARKER.finditer(block.text):
                record, fields = root / marker.group(1), marker.group(2)
                span_start = max(previous, _sentence_start(block.text, marker.start()))
                inside = [f for f in figures(block.text)
                          if span_start <= f.start < marker.start()]
                previous = marker.end()
                where = f"{block.where}: <!-- {marker.group(1)}{': ' + fields if fields else ''} -->"  # noqa: E501
                if not record.is_file():
                    faults.append(f"{where}: no such file")
                    continue
                if not inside:
                    faults.append(f"{where}: covers no figure (put it right after the figure)")
                    continue
                if fields:
                    data = json.loads(record.read_text())
                    values = []
                    for field in fields.split(";"):
                        got = _field_values(data, field)
                        if not got:
                            faults.append(f"{where}: {field.strip()!r} selects no number")
                        values.extend(got)
                    written = [(v, 99) for v in values]
                else:
                    written = _written_numbers(record.read_text())
                for figure in inside:
                    covered.add(figure.start)
                    if not any(figure.rounds(v) and decimals >= figure.decimals
                               for v, decimals in written):
                        faults.append(f"{where}: {figure.text} is not in the record")
            for start, sentence in _sentences(block.text):
                if "results/" in sentence:
                    faults.extend(f"{block.where}: {f.text} quoted beside a results/ path "
                                  "without a marker naming its record"
                                  for f in figures(block.text) if f.start not in covered
                                  and start <= f.start < start + len(sentence))
    return faults


def machines_in(record: Path) -> List[str]:
    """The machine lines of a results page (``- machine: ...``) or JSON record
    (``"machine": "..."``)."""
    text = record.read_text() if record.is_file() else ""
    return [a or b for a, b in re.findall(r'^- machine: (.*)$|"machine":\s*"([^"]*)"', text,
                                          re.MULTILINE)]


def record_machines(root: Path) -> List[str]:
    return [machine for record in sorted((root / "results").rglob("*"))
            if record.suffix in (".md", ".json") for machine in machines_in(record)]


def _sentences(text: str) -> List[Tuple[int, str]]:
    starts = [0, *(m.end() for m in SENTENCE_END.finditer(text))]
    return [(s, text[s:e]) for s, e in zip(starts, [*starts[1:], len(text)])]


def gpu_faults(root: Path, files: List[Path]) -> List[str]:
    gpus = [g for g in map(gpu_of, record_machines(root)) if g]
    faults = []
    pages = [*files, *sorted((root / "results").rglob("*.md"))]
    for path in pages:
        in_results = (root / "results") in path.parents
        for block in blocks(path, root):
            marked = [(m.start(), m.group(1)) for m in MARKER.finditer(block.text)]
            for offset, sentence in _sentences(block.text):
                plain = COMMENT.sub("", sentence)
                cites = in_results or "results/" in plain
                models = set(GPU_MODEL.findall(plain))
                if cites and NO_GPU.search(plain) and gpus:
                    faults.append(f"{block.where}: says results/ holds no GPU run, but "
                                  f"records were made on {sorted(set(gpus))}")
                for model in models:
                    on_it = [g for g in gpus if model in g]
                    if cites and not NO_GPU.search(plain) and not on_it:
                        faults.append(f"{block.where}: names {model} beside results/, "
                                      "and no record's machine line names it")
                    records = {Path(p) for s, p in marked if offset <= s < offset + len(sentence)}
                    made_there = any(model in (gpu_of(m) or "")
                                     for r in records for m in machines_in(root / r))
                    if figures(sentence) and not made_there and not ELSEWHERE.search(plain):
                        faults.append(f"{block.where}: quotes figures on an {model} that no "
                                      "record made on it holds, and names no report")
    return faults


def report_faults(root: Path, files: List[Path]) -> List[str]:
    """Sentences saying the GPU report measured nothing (cut short, no numbers) while
    ``results/gpu/report.json`` holds parts that finished (unless they say they speak of
    another run: an earlier one, in git history)."""
    report = root / "results" / "gpu" / "report.json"
    if not report.exists():
        return []
    finished = [name for name, part in json.loads(report.read_text())["parts"].items()
                if part.get("exit_status") == 0 and not part.get("stopped_at_budget")]
    faults = []
    for path in files:
        for block in blocks(path, root):
            for _, sentence in _sentences(block.text):
                plain = COMMENT.sub("", sentence)
                if finished and GPU_REPORT.search(plain) and NOTHING_MEASURED.search(plain) \
                        and not OTHER_RUN.search(plain):
                    faults.append(f"{block.where}: says the GPU report measured nothing, but "
                                  f"results/gpu/report.json has {', '.join(finished)} done")
    return faults


def doc_files(root: Path) -> List[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


# -- the repository's docs -------------------------------------------------------------

def test_every_figure_quoted_from_results_is_in_its_record():
    faults = marked_faults(REPO, doc_files(REPO))
    assert not faults, "\n".join(faults)


def test_what_the_docs_say_about_gpus_agrees_with_the_records():
    faults = gpu_faults(REPO, doc_files(REPO))
    assert not faults, "\n".join(faults)


def test_what_the_docs_say_about_the_gpu_report_agrees_with_its_record():
    faults = report_faults(REPO, doc_files(REPO))
    assert not faults, "\n".join(faults)


def test_the_docs_mark_figures():
    """The rule has something to check: README and docs/results.md mark their figures."""
    marked = [m for path in doc_files(REPO) for m in MARKER.finditer(path.read_text())]
    assert len(marked) >= 10
    assert {"results/demo/comparison.json",
            "results/multi30k_convergence_tiny/comparison.json"} <= {m.group(1) for m in marked}


# -- what counts as a figure, and how a field reads ------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("every row to 91.19-97.19 BLEU", ["91.19", "97.19"]),
    ("every row to 81-92 BLEU", ["81", "92"]),
    ("(-0.15, paired interval [-0.93, +0.69])", ["-0.15", "-0.93", "+0.69"]),
    ("took 15.1 min, 905 s, 3-6x slower, 3-7% shorter, 18-22 min",
     ["15.1", "905", "3", "6", "3", "7", "18", "22"]),
    ("1.5-entmax on an H100 with fp16, torch 2.13.0, c = 0.2, lr 3e-4, test_2016_flickr", []),
    ("within 1 BLEU, 500 updates, 1,000 draws, 2+2-layer 64-dim, `--lenpen 0.6`", []),
    ("[the table](results/demo/README.md) <!-- results/x.json: a.b --> 30,000-update cap", []),
])
def test_figures(text, expected):
    assert [f.text for f in figures(text)] == expected


def test_fields_select_numbers():
    record = {"seconds": 905.0, "rows": [
        {"attention": "softmax", "bleu": {"test": 96.9}},
        {"attention": "entmax15", "bleu": {"test": 97.18},
         "bleu_vs_softmax": {"test": {"difference": 0.27, "low": -0.62, "high": 1.2}}}]}
    assert _field_values(record, "seconds / 60") == [905.0 / 60]
    assert _field_values(record, "rows.*.bleu.test") == [96.9, 97.18]
    assert _field_values(record, "rows[attention=entmax15].bleu_vs_softmax.test.*") == [
        0.27, -0.62, 1.2]
    assert _field_values(record, "rows[attention=topk].bleu.test") == []


# -- each check fails on the fault it is there for -------------------------------------

@pytest.fixture
def copy(tmp_path):
    """README.md, docs/ and results/ copied, to plant faults in."""
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    shutil.copytree(REPO / "results", tmp_path / "results",
                    ignore=shutil.ignore_patterns("*.png", "translations"))
    return tmp_path


def _replace(path: Path, old: str, new: str):
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_a_changed_figure_is_caught(copy):
    assert not marked_faults(copy, doc_files(copy))
    marker = MARKER.search((copy / "README.md").read_text())
    figure = [f for f in figures((copy / "README.md").read_text()[:marker.start()])][-1]
    text = (copy / "README.md").read_text()
    changed = figure.text[:-1] + str((int(figure.text[-1]) + 5) % 10)
    (copy / "README.md").write_text(text[:figure.start] + changed + text[figure.start
                                                                            + len(figure.text):])
    faults = marked_faults(copy, doc_files(copy))
    assert len(faults) == 1 and f"{changed} is not in the record" in faults[0]


def test_a_changed_record_is_caught(copy):
    """The record changes under the docs (a rerun): the figures quoted from it fail."""
    record = copy / "results" / "demo" / "comparison.json"
    data = json.loads(record.read_text())
    for row in data["rows"]:
        row["bleu"]["test"] -= 10
    record.write_text(json.dumps(data))
    faults = marked_faults(copy, doc_files(copy))
    assert faults and all("results/demo/comparison.json" in f for f in faults)


def test_an_unmarked_figure_beside_results_is_caught(copy):
    _replace(copy / "docs" / "results.md", "`results/bench/metrics.md`:",
             "`results/bench/metrics.md` (BLEU in 0.7 s):")
    faults = marked_faults(copy, doc_files(copy))
    assert len(faults) == 1 and "0.7 quoted beside a results/ path without a marker" in faults[0]


def test_a_stale_marker_is_caught(copy):
    (copy / "docs" / "extra.md").write_text(
        "The demo (results/demo/) took 15.1 min<!-- results/demo/comparison.json: seconds --> "
        "and reached 91.19<!-- results/demo/comparison.json: rows.*.bleu.test --> "
        "and 42 <!-- results/demo/comparison.json: rows.*.bleu.test -->.\n")
    faults = marked_faults(copy, doc_files(copy))
    assert len(faults) == 3, faults
    assert "'seconds' selects no number" in faults[0] and "15.1 is not in the record" in faults[1]
    assert "covers no figure" in faults[2]


def test_a_claim_of_no_gpu_run_is_caught_once_a_record_has_one(copy):
    assert not gpu_faults(copy, doc_files(copy))
    (copy / "docs" / "extra.md").write_text("`results/` holds no GPU run yet.\n")
    faults = gpu_faults(copy, doc_files(copy))  # results/gpu/ has records made on GPUs
    assert len(faults) == 1 and faults[0].startswith(
        "docs/extra.md:1: says results/ holds no GPU run, but records were made on ["), faults


def test_a_gpu_figure_without_a_record_is_caught(copy):
    (copy / "docs" / "extra.md").write_text(
        "On one A100 each row of `results/multi30k/` took about 3.5 minutes.\n\n"
        "On an A100 the kernels ran at 0.81-1.16 of softmax (issue 38).\n")
    faults = gpu_faults(copy, doc_files(copy))
    assert len(faults) == 2, faults
    assert "names A100 beside results/" in faults[0]
    assert "quotes figures on an A100" in faults[1]


def test_a_claim_that_the_gpu_report_measured_nothing_is_caught(copy):
    """Issue 55: README said the report's first run "was cut short, and its benchmark parts
    wrote no numbers" beside a complete H100 report."""
    assert not report_faults(copy, doc_files(copy))
    (copy / "docs" / "extra.md").write_text(
        "The GPU report's first run was cut short, and its parts wrote no numbers.\n")
    faults = report_faults(copy, doc_files(copy))
    assert len(faults) == 1 and faults[0].startswith(
        "docs/extra.md:1: says the GPU report measured nothing, but results/gpu/report.json "
        "has "), faults
