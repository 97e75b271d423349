"""The Markdown report of a reproduction run: each table with the paper's figures beside
ours, the metrics' settings and the training runs."""

import statistics
from itertools import groupby
from pathlib import Path
from typing import Dict, List, Tuple

from sparse_attn_plugin.evaluation.metric import Report
from sparse_attn_plugin.evaluation.significance import RESAMPLES
from sparse_attn_plugin.markdown import markdown_table

from ..provenance import provenance_header
from .config import PAPER_KEY, SCORES, Config, Table, metrics_of
from .paired import pairable, paired_cell
from .plan import averaging, options_of, post_process_of, resolve_tables, slug


def _cell(value, fmt="{:.2f}"):
    """A table cell: ``-`` for nothing, a note as it is, a number formatted."""
    if value is None:
        return "-"
    return value if isinstance(value, str) else fmt.format(value)


def _decoded_with(row: dict) -> str:
    parts = [f"{k}={v}" for k, v in row.get("overrides", {}).items()]
    if row.get("generate"):
        parts.append(" ".join(row["generate"]))
    return ", ".join(parts) or "as trained"


def _by_corpus(config: Config, smoke: bool, describe) -> str:
    """``describe(corpus)`` for the run's corpora: once if they all agree, else each
    named (the config's own ``data`` by its folder)."""
    corpora = dict.fromkeys(row["corpus"] for _, rows in resolve_tables(config, smoke)
                            for row in rows)
    said = {corpus: describe(corpus) for corpus in corpora}
    if len(set(said.values())) <= 1:
        return next(iter(said.values()), "?")
    return "; ".join(f"{corpus or Path(config.data).name}: {text}"
                     for corpus, text in said.items())


def _signatures(config: Config, decoded: dict, smoke: bool, key: str) -> str:
    """The signatures the decodings recorded under ``key`` (``bleu_signature``), as
    :func:`_by_corpus` says them."""
    rows = [row for _, rows in resolve_tables(config, smoke) for row in rows]

    def signature(corpus):
        return next((f"`{decoded[r['key']][key]}`" for r in rows
                     if r["corpus"] == corpus and key in decoded[r["key"]]), "?")

    return _by_corpus(config, smoke, signature)


def _signed_notes(config: Config, decoded: dict, smoke: bool, metrics: List[str]) -> List[str]:
    """A note for each score but BLEU with a signature that the decodings recorded
    (chrF): its signatures and which way is better."""
    signed = [SCORES[name] for name in metrics if name in SCORES and name != "BLEU"
              and SCORES[name].signature]
    return [f"{metric.name}: sacrebleu "
            f"{_signatures(config, decoded, smoke, metric.signature_key)} "
            f"({metric.direction})." for metric in signed
            if any(metric.signature_key in record for record in decoded.values())]


def _metric_notes(config: Config, results: dict, smoke: bool) -> List[str]:
    decoded, metrics = results["decoded"], metrics_of(results)
    bleu = _signatures(config, decoded, smoke, "bleu_signature")
    notes = [f"BLEU: sacrebleu {bleu}; beside it, a row's "
             "BLEU minus the table's first row's on the same sentences, with the 95% "
             f"interval and two-sided p-value of paired bootstrap resampling ({RESAMPLES} "
             "draws; Koehn 2004; not in a table that pools seeds). It says how much a difference "
             "depends on which sentences the test set holds, not how it varies from seed "
             "to seed.", *_signed_notes(config, decoded, smoke, metrics)]
    scoring_aligners = [  # the aligners on the text as the translations are scored
        str(a["pairs"]) + (f" ({a['corpus']})" if a.get("corpus") else "")
        for a in results.get("aligners", {}).values()
        if a["post_process"] == post_process_of(
            config.run_settings(smoke, a.get("corpus")).generate_flags)]
    for metric in (metric for name, metric in SCORES.items() if name in metrics):
        def by_corpus(describe, metric=metric):
            return _by_corpus(config, smoke, lambda corpus: describe(
                options_of(config, smoke, metric, corpus)))

        notes.append(metric.note(Report(options=options_of(config, smoke, metric),
                                        by_corpus=by_corpus, aligners=scoring_aligners)))
    notes = [note for note in notes if note]
    if any(row["source"] for _, rows in resolve_tables(config, smoke) for row in rows):
        notes.append(
            "Fertilities (models with `--fertility predicted` or a GUIDED table): *gold* = "
            "the corpus's own `.fert` files (the synthetic corpus's true fertilities), "
            "*aligner* = `sparse-attn-align fertility` of this run's aligner (forward "
            "links, the sink's left out) on the training and validation data; each "
            "source's GUIDED table is the largest fertility per source word in its "
            "training data.")
    if "speed" in metrics:
        notes.append("Decoding speed: fairseq-generate's sentences/s divided by the table's "
                     "first row, same run and machine (real output lengths, so this also "
                     "reflects what each model generates; `benchmarks/` hold controlled "
                     "speed ratios).")
    if "train_speed" in metrics:
        notes.append("Training speed: fairseq-train's words/s (median over its logging "
                     "intervals) divided by the table's first row, same run and machine.")
    return notes


#: The headers of the measures' columns.
_HEADER = {"speed": "sent/s ÷ first row ({ours})",
           "train_speed": "train words/s ÷ first row ({ours})"}


def _summary(values: List[float], fmt: str = "{:.2f}") -> str:
    """One cell for a row's values over its seeds: the value, or ``mean ± sd``."""
    if any(v is None for v in values):
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.mean(values))} ± {fmt.format(statistics.stdev(values))}"


def _ratio(values: List[float], first: List[float]) -> str:
    """Mean over seeds divided by the first row's mean."""
    if any(v is None for v in values + first):
        return "-"
    return f"{statistics.mean(values) / statistics.mean(first):.2f}"


def row_label(config: Config, row: dict) -> str:
    """A row's label, saying when it is an oracle: a GUIDED table made from the gold
    fertilities of the synthetic corpus, where every word has one true fertility, gives
    the model the test sentences' true fertilities."""
    guided = "--fertility-table" in config.models[row["model"]]
    if guided and row["source"] == "gold":
        return f"{row['label']} (oracle: gold fertilities)"
    return row["label"]


def row_comparisons(rows: List[dict], decoded: dict, trained: dict,
                    metrics: List[str]) -> List[Tuple[List[dict], Dict[str, Tuple[str, str]]]]:
    """Per row of a config's table (its seeds' rows pooled): ``(those rows, {metric:
    (our cell, the paper's cell)})``; speeds are ratios to the first row."""
    groups = [list(group) for _, group in groupby(rows, key=lambda row: row["row"])]

    def speeds(group):
        """Decoding sentences/s and training words/s of a row's seeds (None: failed)."""
        return {"speed": [decoded[row["key"]].get("sentences_per_second") for row in group],
                "train_speed": [trained[row["train"]].get("words_per_second") for row in group]}

    first = speeds(groups[0])
    compared = []
    for group in groups:
        runs, paper = [decoded[r["key"]] for r in group], group[0].get("paper", {})
        cells = {}
        for metric in metrics:
            figure = _cell(paper.get(PAPER_KEY.get(metric, metric)))
            if metric == "params":
                ours = _cell(trained[group[0]["train"]].get("attention_parameters"), "{:,}")
            elif any("failed" in r for r in runs):
                ours = "did not train"
            elif metric in _HEADER:
                ours = _ratio(speeds(group)[metric], first[metric])
            else:
                ours = _summary([SCORES[metric].recorded(r) for r in runs])
            cells[metric] = (ours, figure)
        compared.append((group, cells))
    return compared


def _more_columns(config: Config, smoke: bool) -> Dict[str, list]:
    """The columns each metric adds after its own (:attr:`Metric.columns`), by name."""
    return {name: metric.columns(options_of(config, smoke, metric))
            for name, metric in SCORES.items()}


def _table(config: Config, rows: List[dict], decoded: dict, trained: dict, metrics: List[str],
           more: Dict[str, list], smoke: bool):
    """A table's rows (the seeds of a row pooled) with the paper's figures beside ours,
    and the columns metrics add (``more``); a smoke run's columns say they are ours on
    the synthetic corpus."""
    ours = "ours, synthetic smoke" if smoke else "ours"
    fertilities = any(row["source"] for row in rows)
    paired = "BLEU" in metrics and pairable(rows)
    header = ["row", "model trained", *(["fertilities"] if fertilities else []),
              "decoded with"]
    for metric in metrics:
        if metric == "params":
            header += [f"attention parameters ({ours})"]
        elif metric in _HEADER:
            header += [_HEADER[metric].format(ours=ours), f"{PAPER_KEY[metric]} (paper)"]
        else:
            header += [f"{metric} ({ours})", f"{metric} (paper)"]
            if metric == "BLEU" and paired:
                header += [f"BLEU - first row, 95% interval, p ({ours})"]
            header += [f"{title} ({ours})" for title, _ in more.get(metric, [])]
    lines = []
    for group, cells in row_comparisons(rows, decoded, trained, metrics):
        row, runs = group[0], [decoded[r["key"]] for r in group]
        line = [row_label(config, row), row["model"],
                *([row["source"] or "-"] if fertilities else []),
                _decoded_with(row)]
        for metric in metrics:
            line += cells[metric][:1] if metric == "params" else list(cells[metric])
            if metric == "BLEU" and paired:
                line.append(paired_cell(decoded, row, rows[0]))
            line += [_summary([value(r) for r in runs])
                     if not any("failed" in r for r in runs) else "-"
                     for _, value in more.get(metric, [])]
        lines.append(line)
    return markdown_table(header, lines)


def _chosen(record: dict) -> str:
    """The seed and checkpoint window a training's decoding was chosen as, with its
    validation BLEU."""
    parts = [f"seed {record['seed']}" if "seed" in record else "",
             f"average of {record['window']}" if "window" in record else ""]
    said = ", ".join(p for p in parts if p)
    if "valid_bleu" not in record:
        return "-"
    return f"{said} ({record['valid_bleu']:.2f})" if said else f"({record['valid_bleu']:.2f})"


def _preamble(config: Config, results: dict, smoke: bool, command: str, title: str) -> List[str]:
    """Heading, provenance, what kind of run this was, its settings and metric notes."""
    parts = [f"# {config.paper}: {title}"
             + (" (SMOKE RUN on the synthetic corpus)" if smoke else ""), "",
             provenance_header(command)]
    if smoke:
        parts.append(
            "**Smoke run**: the paper's pipeline on the bundled synthetic corpus with a "
            f"small model ({results['max_update']} updates; settings under `smoke` in the "
            "config). It shows that every training and decoding combination runs end to "
            "end; its numbers are NOT comparable to the paper's, which stand beside them "
            "for orientation only.\n")
    parts.append(f"Settings: {config.settings_note}\n")
    if smoke and config.smoke.settings_note:
        parts.append(f"Smoke settings: {config.smoke.settings_note}\n")
    if results.get("seconds") is not None:
        parts.append(f"Run time: {results['seconds'] / 60:.1f} min (training, decoding and "
                     "scoring, on the machine above).\n")
    def decoded(corpus):
        count, windows = averaging(config, smoke, corpus)
        if windows:
            return (f"the average of {windows['size']} consecutive saved checkpoints: of the "
                    f"last {windows['count']} such windows, {windows['step']} checkpoints "
                    "apart, the one with the best validation BLEU")
        return f"the average of its last {count} saved checkpoints" if count else \
            "its last checkpoint"

    if any(averaging(config, smoke, row["corpus"])[0]
           for _, rows in resolve_tables(config, smoke) for row in rows):
        parts.append(f"Each training is decoded as {_by_corpus(config, smoke, decoded)}.\n")
    parts.append(" ".join(_metric_notes(config, results, smoke)) + "\n")
    return parts


def _section(config: Config, table: Table, rows: List[dict], results: dict,
             more: Dict[str, list], smoke: bool) -> str:
    """A table's heading, how its rows were made (seeds, split) and the table."""
    notes = []
    seeds = list(rows[0]["candidates"]) if len(rows[0]["candidates"]) > 1 else []
    if seeds:
        notes.append(f"Each row: of {len(seeds)} trainings (seeds {', '.join(map(str, seeds))}), "
                     "the one with the best validation BLEU (see the training runs).")
    if table.seeds:
        notes.append(f"Each row: mean ± standard deviation over {len(table.seeds)} "
                     f"trainings (seeds {', '.join(map(str, table.seeds))}).")
    if table.subset:
        notes.append(f"Decoded and scored on the {table.subset} split.")
    return (f"## {table.title}\n\n" + (" ".join(notes) + "\n\n" if notes else "")
            + _table(config, rows, results["decoded"], results["trained"],
                     metrics_of(results), more, smoke))


def render_tables(config: Config, results: dict, smoke: bool, command: str) -> Dict[str, str]:
    """One report per table, by file name (the table's title as a slug)."""
    more = _more_columns(config, smoke)
    return {f"{slug(table.title)}.md":
            "\n".join(_preamble(config, results, smoke, command, table.title)
                       + [_section(config, table, rows, results, more, smoke)])
            for table, rows in resolve_tables(config, smoke)}


def render(config: Config, results: dict, smoke: bool, command: str) -> str:
    """The whole run's report: every table, then the training runs."""
    parts = _preamble(config, results, smoke, command, "reproduction")
    tables = resolve_tables(config, smoke)
    written = {table.title for table, _ in tables}
    skipped = [t.title for t in config.tables if smoke and t.title not in written]
    if skipped:
        parts.append("Not in the smoke run (other corpora; on the synthetic corpus they "
                     "would repeat the tables below): " + "; ".join(skipped) + ".\n")
    more = _more_columns(config, smoke)
    for table, rows in tables:
        parts.append(_section(config, table, rows, results, more, smoke))
    trained = results["trained"]
    fertilities = any("fertilities" in t for t in trained.values())
    chosen = any("valid_bleu" in t for t in trained.values())
    parts.append("## Training runs\n\n" + markdown_table(
        ["model", *(["fertilities"] if fertilities else []), "updates", "valid loss",
         "words/s", "batch per update",
         *(["chosen by validation BLEU (its BLEU)"] if chosen else [])],
        [[m, *([t.get("fertilities", "-")] if fertilities else []),
          t.get("updates", "did not train"), _cell(t.get("valid_loss"), "{:.3f}"),
          _cell(t.get("words_per_second"), "{:.0f}"), t.get("batch", "-"),
          *([_chosen(t)] if chosen else [])]
         for m, t in trained.items()]))
    failures = [f"- {m}: {t['failed']}" for m, t in trained.items() if "failed" in t]
    if failures:
        parts.append("Trainings that failed (the config expects these may diverge):\n\n"
                     + "\n".join(failures) + "\n")
    return "\n".join(parts)

