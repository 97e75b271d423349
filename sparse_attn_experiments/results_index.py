"""``results/README.md``: every result file in one page, ours beside the papers'.

For each paper config in ``configs/``: the runs of it in ``results/<name>/`` (the full
run's ``results.json``, else the smoke run's ``smoke.json``) with, per table row, our
figures beside the paper's for each metric the paper reports (and BLEU always, with
chrF where the run recorded it); the
command, commit and machine each file names; and, for a full run not made here, what it
takes. Then each comparison of every kind of attention on one corpus
(``sparse-attn-compare``: the demo, Multi30k, KFTT) with the published figures on that
corpus, and every other results file (benchmarks, calibrations) with its provenance.
Every number on the page is read from a file a script wrote.

    sparse-attn-results-index [--results results] [--configs configs]
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

import json
import re
from pathlib import Path
from typing import Dict, List, Optional

from sparse_attn_plugin.command_line import CommandParser
from sparse_attn_plugin.evaluation.scoring import beside_bleu
from sparse_attn_plugin.files import write_text_atomic
from sparse_attn_plugin.markdown import markdown_table

from .comparison.published import published_rows
from .comparison.report import score_cell, score_columns, stopped_cell
from .provenance import gpu_of, provenance_header
from .reproduction.config import SCORES, Config, ConfigError, load_config, metrics_of
from .reproduction.plan import options_of, paper_options, resolve_tables, training_budget
from .reproduction.report import row_comparisons, row_label

_HEADER_LINE = re.compile(r"^- (command|commit|machine|date): (.*)$")
#: How a cell names the speeds (a score: by its name).
SPEEDS = {"speed": "decoding ×", "train_speed": "training ×"}
#: The scores of a comparison the index shows (:attr:`Metric.indexed`).
COMPARED = tuple(name for name, metric in SCORES.items() if metric.indexed)
#: A table whose rows the run did not make: the config changed after the run.
STALE = "not in this run: the config changed after it (run the script again)"


def provenance_of(report: Path) -> Dict[str, str]:
    """The title and the command, commit, machine and date lines of a results file."""
    found = {}
    for line in report.read_text().splitlines()[:12]:
        if line.startswith("# ") and "title" not in found:
            found["title"] = line[2:].strip()
        match = _HEADER_LINE.match(line)
        if match:
            found[match.group(1)] = match.group(2).strip("`")
    return found


def _label(metric: str, options) -> str:
    """How a cell names ``metric``: a score by its column under its ``options(score)``
    (DROP with its symmetrisation), a speed by :data:`SPEEDS`."""
    return SCORES[metric].column(options(SCORES[metric])) if metric in SCORES else SPEEDS[metric]


def _compare(config: Config, record: dict, smoke: bool) -> List[List[str]]:
    """``[table, row, ours, paper]`` for every row of every table the record holds; our
    scores named under the options the run measured them with (DROP: the first of the
    config's ``drop.symmetrize``, as its report says), the paper's under the paper's
    (:func:`paper_options`)."""
    lines = []
    metrics = [m for m in metrics_of(record) if m in SCORES or m in SPEEDS]

    def ours(metric):
        return options_of(config, smoke, metric)

    for table, rows in resolve_tables(config, smoke):
        if not all(row["key"] in record["decoded"] and row["train"] in record["trained"]
                   for row in rows):
            lines.extend([table.title, row["label"], STALE, "-"]
                         for row in dict((r["row"], r) for r in rows).values())
            continue
        compared = row_comparisons(rows, record["decoded"], record["trained"], metrics)
        for group, cells in compared:
            shown = [m for m in metrics if m == "BLEU" or cells[m][1] != "-"
                     or (m in beside_bleu() and cells[m][0] != "-")]
            lines.append([table.title, row_label(config, group[0]),
                          "; ".join(f"{_label(m, ours)} {cells[m][0]}" for m in shown),
                          "; ".join(f"{_label(m, paper_options)} {cells[m][1]}"
                                    for m in shown)])
    return lines


def _script_of(config_path: Path, scripts: Path) -> Optional[str]:
    for script in sorted(scripts.glob("*.sh")):
        if config_path.name in script.read_text():
            return f"{scripts.name}/{script.name}"
    return None


def _machines_note(folder: Path) -> str:
    """What the records in ``folder`` say of GPUs: the GPUs their machine lines name, or
    that none does."""
    gpus = sorted({gpu for report in sorted(folder.glob("*.md"))
                   for gpu in [gpu_of(provenance_of(report).get("machine", ""))] if gpu})
    if gpus:
        return f"its records name {', '.join(f'GPU {g}' for g in gpus)}"
    return "none of its records was made on a GPU"


def _full_scale(config: Config, config_path: Path, scripts: Path, folder: Path) -> str:
    """What a full run takes: the data to prepare, the command, the trainings; and what
    ``folder``'s records (the smoke run) say of GPUs."""
    rows = [row for _, rows in resolve_tables(config, False) for row in rows]
    prepares = [config.prepare, *(c.prepare for c in config.corpora.values())]
    trainings = {row["train"]: training_budget(config, False, row["corpus"]) for row in rows}
    budget = ", ".join(f"{sum(v == b for v in trainings.values())} x {b}"
                       for b in dict.fromkeys(trainings.values()))
    script = (_script_of(config_path, scripts)
              or f"sparse-attn-reproduce {config_path}")
    return (f"Full scale (sized for a GPU; not run: `{folder.name}/` holds no full run, and "
            f"{_machines_note(folder)}): "
            + "; ".join(f"`{p}`" for p in dict.fromkeys(prepares))
            + f"; then `{script}`"
            + (" (its header lists the `--corpus-data` flags). " if config.corpora
               else ". ")
            + f"{len(trainings)} trainings ({budget}); no record times them.\n")


def paper_section(config_path: Path, results: Path, scripts: Path) -> str:
    config = load_config(config_path)
    folder = results / config.name
    parts = [f"### {config.paper}\n"]
    for record_name, report_name, smoke in (("results.json", "README.md", False),
                                            ("smoke.json", "smoke.md", True)):
        if not (folder / record_name).is_file():
            continue
        record = json.loads((folder / record_name).read_text())
        about = provenance_of(folder / report_name)
        kind = ("Full run" if not smoke else
                f"Smoke run (synthetic corpus, {record['max_update']} updates per model; its "
                "numbers show that the pipeline runs, they are not comparable to the paper's)")
        minutes = f", {record['seconds'] / 60:.1f} min" if record.get("seconds") else ""
        parts.append(f"{kind}: [{config.name}/{report_name}]({config.name}/{report_name})"
                     f" (commit `{about.get('commit', '?')}`, {about.get('machine', '?')}, "
                     f"{about.get('date', '?')}{minutes}).\n")
        ours = "ours (synthetic smoke)" if smoke else "ours"
        parts.append(markdown_table(["table", "row", ours, "paper"],
                                    _compare(config, record, smoke)))
    if not (folder / "results.json").is_file():
        parts.append(_full_scale(config, config_path, scripts, folder))
    return "\n".join(parts)


def comparisons(results: Path) -> str:
    """Each ``sparse-attn-compare`` report (``comparison.json``): its rows' BLEU (and chrF
    where recorded), REP and DROP and how each row's training ended, with the published
    figures on its corpus."""
    parts = []
    for record_path in sorted(results.glob("*/comparison.json")):
        record = json.loads(record_path.read_text())
        report = record_path.parent / "README.md"
        about, link = provenance_of(report), report.relative_to(results)
        kind = ("Smoke run (a check that the pipeline runs, not a result)" if record["smoke"]
                else "Run")
        parts.append(f"### {record['corpus']} (`{record_path.parent.name}/`)\n\n{kind}: "
                     f"[{link}]({link}) (commit "
                     f"`{about.get('commit', '?')}`, {about.get('machine', '?')}, "
                     f"{about.get('date', '?')}).\n")
        columns = score_columns(record["rows"], record["tests"], COMPARED)
        parts.append(markdown_table(
            ["attention", *(header for header, _, _ in columns),
             "updates (why training stopped)"],
            [[row["attention"], *(score_cell(row, metric, split) for _, metric, split in columns),
              stopped_cell(row)] for row in record["rows"]]))
        published = published_rows(record["corpus"])
        if published:
            parts.append(f"Published figures on this corpus (not run here):\n\n{published}")
    return "\n".join(parts) + "\n"


def other_results(results: Path) -> str:
    """Every results file that is no reproduction or comparison report, with its
    provenance."""
    rows = []
    for report in sorted(results.glob("*/*.md")):
        if report.name in ("smoke.md",) or report.parent.name == "smoke" or (
                report.name == "README.md" and any((report.parent / record).is_file()
                                                   for record in ("results.json",
                                                                  "comparison.json"))):
            continue
        about = provenance_of(report)
        if "commit" not in about:
            continue
        rows.append([f"[{report.relative_to(results)}]({report.relative_to(results)})",
                     about.get("title", "-"), f"`{about['commit']}`", about.get("date", "-")])
    return markdown_table(["file", "what", "commit", "date"], rows)


def render(results: Path, configs: Path, scripts: Path, command: str) -> str:
    papers = [paper_section(path, results, scripts) for path in sorted(configs.glob("*.json"))]
    return "\n".join([
        "# Results", "", provenance_header(command),
        "Every number on this page is read from a file below, which a script in this "
        "repository wrote and which names the command, commit and machine that made it. "
        "Speeds are ratios to softmax (or to a table's first row) measured in the same run.\n",
        "## Paper reproductions\n", *papers,
        "## Every kind of attention on one corpus (`sparse-attn-compare`; the demo)\n",
        comparisons(results),
        "## Benchmarks and calibrations\n", other_results(results)])


def main(argv=None):
    parser = CommandParser(prog="sparse-attn-results-index",
                           description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--configs", type=Path, default=Path("configs"))
    parser.add_argument("--scripts", type=Path, default=Path("scripts"))
    args = parser.parse_args(argv)
    if not args.results.is_dir() or not args.configs.is_dir():
        parser.error(f"--results {args.results} and --configs {args.configs} must be folders")
    command = "sparse-attn-results-index" + "".join(
        f" {a}" for a in (argv or []))
    try:
        text = render(args.results, args.configs, args.scripts, command)
    except ConfigError as err:
        parser.error(str(err))
    try:
        path = write_text_atomic(args.results / "README.md", text)
    except OSError as err:
        parser.fail(err)
    print(path)


if __name__ == "__main__":
    main()
