"""No command that README.md, docs/*.md or scripts/*.sh shows writes into the committed
results/, unless it publishes a record and says so (README's rule, under "Results").

Writing into results/ is ``--out results...`` (``--out=``, ``--out-dir``), ``-o results...``,
a shell redirection ``> results/...`` or ``>> results/...``, ``tee results/...``, or an
``OUT=results...`` assignment. Publishing is ``PUBLISH=results`` (``make demo|bench``,
``scripts/real_data_*.sh``: none of the forms above, so never flagged), or the flag
``--out results/NAME`` named on its own in a sentence (a code span holding only the flag
and its folder: ``the project publishes its own runs there with `--out results/NAME```).
A command in a code block, a script's line or an indented line of its comments (its usage
lines), or a code span holding more than the flag, that writes into results/ is a
finding; the rest of a script's comments are prose, as the text around a markdown block."""

import re

from helpers import REPO

WRITES = re.compile(r"""(?:--out(?:-dir)?[ =]+|(?<![\w-])-o +|>>? *|\btee +(?:-a +)?|\bOUT=)"""
                    r"""["']?(?:\./)?results\b""")
#: A code span that names the publishing flag alone.
PUBLISHING_FLAG = re.compile(r"`--out results/[\w<>./-]*`")
CODE_SPAN = re.compile(r"`[^`\n]+`")
#: A script's comment line that is not indented as a command (``#   scripts/x.sh ...``).
SCRIPT_PROSE = re.compile(r"\s*#(?!\s{3})")


def findings(text: str, markdown: bool) -> list:
    """``(line number, line)`` of each command in ``text`` that writes into results/
    without publishing (see the module's docstring)."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if markdown and line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        prose = (not fenced) if markdown else bool(SCRIPT_PROSE.match(line))
        if prose:
            line = PUBLISHING_FLAG.sub("`--out NAME`", line)
            # in prose, only code spans are commands
            candidates = CODE_SPAN.findall(line)
        else:
            candidates = [line]
        if any(WRITES.search(candidate) for candidate in candidates):
            found.append((number, line.strip()))
    return found


def shown_commands():
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        yield path, True
    for path in sorted((REPO / "scripts").glob("*.sh")):
        yield path, False


def test_no_command_shown_writes_into_results_unless_it_publishes():
    where = {str(path.relative_to(REPO)): findings(path.read_text(), markdown)
             for path, markdown in shown_commands()}
    assert {path: lines for path, lines in where.items() if lines} == {}
    assert len(where) > 10  # README, docs/, scripts/ were all read


def test_the_rule_finds_each_way_of_writing_there_and_allows_publishing():
    planted = "\n".join([
        "Publish with `--out results/NAME` or `make demo PUBLISH=results`.",  # allowed
        "PUBLISH=results scripts/real_data_comparisons.sh",                     # allowed
        "The committed `results/demo/` is made by the demo.",                   # allowed
        "Run `sparse-attn-toy-example --out results/constrained` to redo it.",  # 4
        "```bash",
        "sparse-attn-compare --data data-bin/x --out results/x",                # 6
        "python benchmarks/drop_calibration.py --out=results/evaluation",      # 7
        "sparse-attn-score --hyp h --ref r --json x > results/scores.json",   # 8
        "python -m tool -o results/x",                                         # 9
        "tool | tee -a results/log.txt",                                       # 10
        "make demo PUBLISH=results",                                            # allowed
        "```",
    ])
    assert [n for n, _ in findings(planted, markdown=True)] == [4, 6, 7, 8, 9, 10]
    script = "\n".join([
        "OUT=results/multi30k_convergence",                       # 1
        '"$PYTHON" -m x --out "$PUBLISH/x"',                      # allowed
        "#   scripts/x.sh --smoke --out results/x",               # 3: its usage line
        "# Published: results/x/ (with `--out results/x/`; without --out, .work/x)",  # prose
        "# a comment on --out results/x, outside code spans",     # prose
    ])
    assert [n for n, _ in findings(script, markdown=False)] == [1, 3]
