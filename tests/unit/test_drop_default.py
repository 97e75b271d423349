"""DROP's default symmetrisation is stated once: one constant in the code
(``drop.DROP_SYMMETRIZATION``) that every command's default is, and the same wherever
README.md, docs/ or results/ say what the default is; a DROP figure beside a published one
names the symmetrisation of each (ours, and the paper's grow-diag-final-and).

A statement of the default is a sentence (or a markdown table row) that mentions DROP or
a symmetrisation and the word "default": the symmetrisation named nearest to each
"default" in it must be DROP's, and in a table with a column headed "default" a DROP row's
cell there must name DROP's first. CHANGELOG.md is history and is not read."""

import ast
import inspect
import re

import pytest

from sparse_attn_plugin.evaluation import cli, scoring
from sparse_attn_plugin.evaluation.aligner import SYMMETRIZATIONS
from sparse_attn_plugin.evaluation.drop import (
    DROP_SYMMETRIZATION,
    PUBLISHED_SYMMETRIZATION,
    corpus_drop,
)

from helpers import REPO

#: Every text that may say what DROP's default is.
TEXTS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"),
                *(REPO / "results").rglob("*.md")])
#: The code that may define a symmetrisation constant, and the constants it may define.
CODE = ("sparse_attn_plugin", "sparse_attn_experiments", "sparse_attn_data", "benchmarks")
CONSTANTS = {("drop.py", "DROP_SYMMETRIZATION"), ("drop.py", "PUBLISHED_SYMMETRIZATION"),
             ("aligner.py", "SYMMETRIZATIONS"), ("aligner.py", "ALIGN_SYMMETRIZATION"),
             ("aligner.py", "FERTILITY_SYMMETRIZATION")}
_NAME = re.compile("|".join(re.escape(name) for name in
                            sorted(SYMMETRIZATIONS, key=len, reverse=True)))
_SENTENCE_END = re.compile(r"(?<=[.;!?])\s+(?=[A-Z`*(\[])")


# -- the code ---------------------------------------------------------------------------------
def test_every_default_is_the_one_constant():
    assert DROP_SYMMETRIZATION == "forward" and PUBLISHED_SYMMETRIZATION == "grow-diag-final-and"
    assert inspect.signature(corpus_drop).parameters["symmetrize"].default == DROP_SYMMETRIZATION
    assert scoring.METRICS["DROP"].defaults["symmetrize"] == DROP_SYMMETRIZATION
    assert scoring.Setting().options_of(scoring.METRICS["DROP"])["symmetrize"] == \
        DROP_SYMMETRIZATION
    assert cli.build_parser().parse_args([]).symmetrize == DROP_SYMMETRIZATION


def _python_files():
    for package in CODE:
        yield from sorted((REPO / package).rglob("*.py"))


def test_no_other_symmetrisation_constant_or_literal_default():
    """Only the constants of :data:`CONSTANTS` name a symmetrisation; no function takes
    one as a literal default (it must be one of them)."""
    found = []
    for path in _python_files():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if (isinstance(target, ast.Name) and target.id.isupper()
                            and "SYMMETRI" in target.id
                            and (path.name, target.id) not in CONSTANTS):
                        found.append(f"{path.relative_to(REPO)}: {target.id}")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                for default in [*args.defaults, *args.kw_defaults]:
                    if isinstance(default, ast.Constant) and default.value in SYMMETRIZATIONS:
                        found.append(f"{path.relative_to(REPO)}: {node.name} defaults to "
                                     f"{default.value!r}")
    assert found == []


# -- the texts --------------------------------------------------------------------------------
def _tables_and_prose(text: str):
    """``(tables, prose)``: each markdown table as ``(header cells, rows of cells)``, and
    the other paragraphs."""
    tables, prose, block = [], [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            block.append([cell.strip() for cell in line.strip().strip("|").split("|")])
            continue
        if block:
            tables.append((block[0], [row for row in block[2:]]))
            block = []
        prose.append(line)
    return tables, [p.replace("\n", " ") for p in "\n".join(prose).split("\n\n")]


def _statements(paragraph: str):
    for sentence in _SENTENCE_END.split(paragraph):
        if ("DROP" in sentence or "symmetri" in sentence) and "default" in sentence:
            yield sentence


def _nearest(sentence: str, at: int):
    names = [(abs(m.start() - at) if m.start() > at else abs(at - m.end()), m.group())
             for m in _NAME.finditer(sentence)]
    return min(names)[1] if names else None


def wrong_defaults(text: str):
    """The statements in ``text`` that give DROP another default."""
    tables, prose = _tables_and_prose(text)
    wrong = []
    for paragraph in prose:
        for sentence in _statements(paragraph):
            for match in re.finditer(r"default", sentence):
                named = _nearest(sentence, match.start())
                if named not in (None, DROP_SYMMETRIZATION):
                    wrong.append(sentence)
    for header, rows in tables:
        columns = [k for k, cell in enumerate(header) if "default" in cell.lower()]
        for row in rows:
            if not row or "DROP" not in row[0]:
                continue
            for k in columns:
                named = _NAME.search(row[k]) if k < len(row) else None
                if named and named.group() != DROP_SYMMETRIZATION:
                    wrong.append(" | ".join(row))
            cells = " ".join(row)
            for sentence in _statements(cells):
                for match in re.finditer(r"default", sentence):
                    named = _nearest(sentence, match.start())
                    if named not in (None, DROP_SYMMETRIZATION):
                        wrong.append(" | ".join(row))
    return wrong


@pytest.mark.parametrize("path", TEXTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_text_gives_drop_the_same_default(path):
    assert wrong_defaults(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("text", [
    "DROP uses the default grow-diag-final-and symmetrisation.",
    "The default symmetrisation of DROP is `union`, the paper's too.",
    "| question | our default | the alternative |\n|---|---|---|\n"
    "| DROP symmetrisation | `grow-diag-final-and` (the paper's) | `forward` |\n",
])
def test_the_scan_finds_another_default(text):
    assert wrong_defaults(text) != []


def test_the_scan_reads_the_default_as_it_is_stated():
    assert wrong_defaults("DROP's default is `forward`; the paper's grow-diag-final-and is "
                          "asked for by name.") == []


def _drop_headers(text: str):
    """``(published, header cell)`` of every DROP column of a markdown table in
    ``text``; published: a table under a "Published figures" heading or line, or one whose
    header names a paper."""
    found, published = [], False
    tables_text = text.split("\n")
    block = []
    for line in tables_text + [""]:
        if line.startswith(("#", "Published figures")):
            published = "Published figures" in line
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            header = [cell.strip() for cell in block[0].strip().strip("|").split("|")]
            from_paper = published or any("et al." in cell for cell in header)
            found += [(from_paper, cell) for cell in header if cell.startswith("DROP")]
            block = []
    return found


def comparison_pages():
    """The comparisons' reports (``*/comparison.json`` beside them) and the index."""
    results = REPO / "results"
    return [results / "README.md",
            *sorted(p.parent / "README.md" for p in results.glob("*/comparison.json"))]


@pytest.mark.parametrize("path", comparison_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_drop_beside_a_published_drop_names_both_symmetrisations(path):
    """On a page with a published DROP, our DROP columns name ``forward`` and the
    paper's ``grow-diag-final-and``; a comparison without one names its DROP's
    symmetrisation in its column or its settings."""
    text = path.read_text(encoding="utf-8")
    headers = _drop_headers(text)
    assert headers, "no DROP column"
    if not any(published for published, _ in headers):
        assert all(cell == f"DROP ({DROP_SYMMETRIZATION})" for _, cell in headers) or (
            f"`{DROP_SYMMETRIZATION}` alignments" in text), path.name
        return
    for published, cell in headers:
        wanted = PUBLISHED_SYMMETRIZATION if published else DROP_SYMMETRIZATION
        assert cell == f"DROP ({wanted})", (path.name, cell)


def test_the_index_names_each_drop_figure_its_symmetrisation():
    """The reproductions' rows in results/README.md: every DROP figure, ours and the
    paper's, names its symmetrisation; the paper's is grow-diag-final-and."""
    text = (REPO / "results" / "README.md").read_text(encoding="utf-8")
    tables, _ = _tables_and_prose(text)
    figures = [(header[k], cell) for header, rows in tables
               if header[-2:] and header[-1] == "paper" for row in rows
               for k, cell in enumerate(row) if k >= len(header) - 2]
    named = [re.findall(r"DROP(?: \(([^)]*)\))? -?[\d.]+", cell) for _, cell in figures]
    assert any(named), "no DROP figure"
    for (column, _), names in zip(figures, named):
        assert all(name in SYMMETRIZATIONS for name in names), names
        if column == "paper":
            assert set(names) <= {PUBLISHED_SYMMETRIZATION}
