"""A comparison's report: the table (``README.md``), the record (``comparison.json``)
and the figures, from the rows :mod:`.run` returns."""

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from sparse_attn_plugin.evaluation import brevity_penalty
from sparse_attn_plugin.evaluation.scoring import METRICS, Metric, beside_bleu
from sparse_attn_plugin.evaluation.significance import describe
from sparse_attn_plugin.markdown import markdown_table
from sparse_attn_plugin.sites import SITES

from ..pipeline import STOPPED
from ..provenance import describe_machine, git_commit, provenance_header
from .corpus import Corpus
from .lenpen import KEY as TUNED
from .lenpen import UNTESTED as TUNED_UNTESTED
from .paired import KEY as PAIRED
from .paired import UNTESTED
from .published import published_rows
from .switch import KEY as SWITCHED
from .translations import FOLDER

SITE_LABELS = {"encoder_self": "enc-self", "decoder_self": "dec-self", "decoder_cross": "cross"}
#: What the paired tables say where rows trained to different points (.paired.UNTESTED).
APART_NOTE = ("A row that did not train to the same point as softmax (another number of "
              "updates, chosen by the time budget or another update cap, or an update cap "
              "met before the other converged) gets its difference with the reason and no "
              "test: the gap is partly the training length, not only the attention.")


def _machine(row, here: str) -> str:
    """The machine a row trained on; ``here`` (this one) for a row recorded before rows
    named it."""
    return row.get("machine") or here


def _ratio(row, base, key, here: str):
    """``row[key] / base[key]``, or n/a where either is missing or the two rows ran on
    different machines."""
    if not (base and row[key] and base[key]) or _machine(row, here) != _machine(base, here):
        return "n/a"
    return f"{row[key] / base[key]:.2f}"


def _elsewhere(rows: Sequence[dict], here: str, commit: str) -> str:
    """Markdown lines naming the machines rows were trained on, where not ``here``, and
    the commits they were trained at, where not ``commit`` (a row reused from an earlier
    comparison keeps its own; rows recorded before rows named theirs say nothing)."""
    by_machine, by_commit = {}, {}
    for row in rows:
        if _machine(row, here) != here:
            by_machine.setdefault(row["machine"], []).append(row["attention"])
        if row.get("commit", commit) != commit:
            by_commit.setdefault(row["commit"], []).append(row["attention"])
    return "".join([*(f"- rows {', '.join(names)} trained and translated on: {machine}\n"
                      for machine, names in by_machine.items()),
                    *(f"- rows {', '.join(names)} trained at commit `{made_at}`\n"
                      for made_at, names in by_commit.items())])


def _alpha_cell(alphas):
    if not alphas:
        return "-"
    return "; ".join(f"{SITE_LABELS[s]} {sum(a) / len(a):.2f} [{min(a):.2f}, {max(a):.2f}]"
                     for s, a in ((s, alphas[s]) for s in SITES if s in alphas))


def _zero_cell(fractions):
    if not fractions:
        return "- (no normaliser)"
    return " / ".join(f"{100 * fractions[s]:.1f}%" if s in fractions else "-" for s in SITES)


#: Validation-loss gaps to softmax (nats) smaller than this are not described.
GAP_SHOWN = 0.05


def stopped_cell(row):
    """Updates and why training stopped; a row the budget or the cap stopped while its
    validation loss was at its best in one of the last two validations is said to be
    still improving (not converged)."""
    why = STOPPED[row["stopped"]]
    last = [loss for _, loss in row["validation_curve"][-2:]]
    if row["stopped"] != "converged" and last and min(last) <= row["valid_loss"]:
        why += "; valid loss still improving"
    return f"{row['updates']} ({why})"


def _number(value, digits=2):
    return "n/a" if value is None else f"{value:.{digits}f}"


def score_columns(rows: Sequence[dict], tests: Dict[str, str],
                  shown: Sequence[str] = ()) -> List[Tuple[str, Metric, Optional[str]]]:
    """``(header, metric, test split)`` of the metrics' columns, for those of ``shown``
    (every metric of :data:`METRICS` for none) that a row records: one a test split for
    those that go with BLEU (``BLEU test``), one on the first split for the others."""
    columns = []
    for name, metric in METRICS.items():
        if (shown and name not in shown) or not any(metric.key in row for row in rows):
            continue
        if metric.with_bleu:
            columns += [(f"{name} {title}", metric, split) for split, title in tests.items()]
        else:
            columns.append((metric.column(), metric, None))
    return columns


def score_cell(row: dict, metric: Metric, split: Optional[str]) -> str:
    """A row's score in one of :func:`score_columns`: n/a where it was not scored (its
    resource was missing), - where the row was recorded before the metric was scored."""
    return _number(metric.recorded(row, split)) if metric.key in row else "-"


def table(rows: Sequence[dict], titles: dict, corpus: Corpus, here: str) -> str:
    base = next((r for r in rows if r["attention"] == "softmax"), None)
    columns = score_columns(rows, corpus.tests)
    return markdown_table(
        ["attention", *(header for header, _, _ in columns),
         "hyp/ref length", "best valid loss", "updates (why training stopped)",
         "zero weights enc-self / dec-self / cross", "learned alpha: mean [min, max]",
         "train words/s ÷ softmax", "generate sent/s ÷ softmax"],
        [[titles[r["attention"]], *(score_cell(r, metric, split) for _, metric, split in columns),
          _number(r.get("length_ratio", {}).get(corpus.first_test), 3),
          _number(r["valid_loss"], 3),
          stopped_cell(r), _zero_cell(r["zero_fraction"]),
          _alpha_cell(r["alphas"]),
          _ratio(r, base, "train_words_per_second", here),
          _ratio(r, base, "generate_sentences_per_second", here)] for r in rows])


def paired_table(rows: Sequence[dict], titles: dict, corpus: Corpus) -> str:
    """Each row's BLEU minus softmax's on every test split, with the paired bootstrap's
    95% interval and p-value; empty where no row has one."""
    others = [r for r in rows if r["attention"] != "softmax"]
    if not any(PAIRED in r or UNTESTED in r for r in others):
        return ""
    first = next((r[PAIRED] for r in others if PAIRED in r), None)

    def cell(row, test):
        if UNTESTED in row:
            return untested_cell(row[UNTESTED], test)
        return describe(row[PAIRED][test]) if PAIRED in row else "n/a (translations not kept)"

    return (
        "\nBLEU minus softmax's on the same sentences"
        + (": the difference, its 95% interval and two-sided p-value by paired bootstrap "
           "resampling of the test sentences "
           f"({next(iter(first.values()))['resamples']} draws; Koehn 2004). It says how "
           "much a difference depends on which sentences the test set holds, not how it "
           "varies from seed to seed; an interval that holds 0 leaves the two rows "
           "unresolved on that split." if first else ".")
        + (f" {APART_NOTE}" if any(UNTESTED in r for r in others) else "") + "\n\n"
        + markdown_table(
            ["attention", *(f"BLEU {corpus.tests[t]} - softmax" for t in corpus.tests)],
            [[titles[r["attention"]], *(cell(r, t) for t in corpus.tests)] for r in others])
        + "\n")


def untested_cell(record: dict, test: str) -> str:
    """A :data:`.paired.UNTESTED` record as a table cell: ``+2.41, no test (entmax15
    trained 200 updates (update cap reached), softmax 153 (time budget ended))``."""
    return f"{record['difference'][test]:+.2f}, no test ({record['why']})"


def switch_table(rows: Sequence[dict], titles: dict, corpus: Corpus) -> str:
    """Each row's BLEU decoded with another normaliser at every site, and its difference to
    the row's own decoding (paired bootstrap); empty where no row was so decoded."""
    switched = [r for r in rows if SWITCHED in r]
    if not switched:
        return ""
    name = switched[0][SWITCHED]["attention"]
    return (
        f"\nEach row's best checkpoint decoded with {name} at every site "
        f"(`--decode-with {name}`: `fairseq-generate --model-overrides`), against the "
        "row's own decoding of the same "
        "sentences: BLEU, and the difference with its 95% interval and p-value (paired "
        "bootstrap). A row that trails softmax and translates about as well decoded with "
        f"{name} owes its gap to the weights it learned, not to its normaliser at decoding; "
        "one that gains owes some of it to decoding.\n\n"
        + markdown_table(
            ["attention", *(f"BLEU {corpus.tests[t]} decoded with {name} (- own)"
                            for t in corpus.tests)],
            [[titles[r["attention"]],
              *(f"{r[SWITCHED]['bleu'][t]:.2f} ({describe(r[SWITCHED]['vs_own'][t])})"
                for t in corpus.tests)] for r in switched])
        + "".join(f"\nNot decoded so: {', '.join(titles[r['attention']] for r in left)} "
                  f"({why}).\n" for left, why in _not_switched(rows, name) if left) + "\n")


def length_table(rows: Sequence[dict], titles: dict, corpus: Corpus) -> str:
    """Each row's hyp/ref length and BLEU without its brevity penalty on every test split;
    empty where no row recorded its lengths on them all."""
    measured = [r for r in rows if set(corpus.tests) <= set(r.get("length_ratio", {}))]
    if not measured:
        return ""

    def cell(row, test):
        ratio = row["length_ratio"][test]
        penalty = brevity_penalty(ratio)
        return f"{ratio:.3f}; " + (f"{row['bleu'][test] / penalty:.2f}" if penalty else "n/a")

    return (
        "\nLength: each row's translations' tokens over the references' (hyp/ref) and its "
        "BLEU without the brevity penalty (BLEU / BP, BP = exp(1 - ref/hyp) below a ratio "
        "of 1: the geometric mean of its 1- to 4-gram precisions), on every test split. A "
        "row that trails softmax in BLEU but not here owes the gap to translating shorter, "
        "not to the words it chooses.\n\n"
        + markdown_table(
            ["attention", *(f"{corpus.tests[t]}: hyp/ref; BLEU without BP" for t in corpus.tests)],
            [[titles[r["attention"]], *(cell(r, t) for t in corpus.tests)] for r in measured])
        + "\n")


def lenpen_table(rows: Sequence[dict], titles: dict, corpus: Corpus) -> str:
    """Each row's length penalty tuned on the validation split, and its BLEU and hyp/ref
    at that penalty on every test split with the paired difference to softmax's at
    softmax's own; empty where no row was tuned."""
    tuned = [r for r in rows if TUNED in r]
    if not tuned:
        return ""
    grid = ", ".join(tuned[0][TUNED]["grid"])
    untuned = [titles[r["attention"]] for r in rows if TUNED not in r]

    def cell(record, test):
        text = f"{record['bleu'][test]:.2f} ({record['length_ratio'][test]:.3f})"
        paired, apart = record.get("vs_softmax"), record.get(TUNED_UNTESTED)
        return text + (f"; {describe(paired[test])}" if paired else
                       f"; {untested_cell(apart, test)}" if apart else "")

    return (
        "\nBeam search's length penalty tuned on the validation split for every row alike "
        f"(`--tune-lenpen`, from {grid}; fairseq's `--lenpen`: a translation's "
        "log-probability over its length to that power, 1 in the tables above): the "
        "penalty with the best validation BLEU, and on every test split BLEU at that "
        "penalty (hyp/ref) and its difference to softmax's at softmax's own tuned "
        "penalty, with its 95% interval and p-value (paired bootstrap). A row that trails "
        "softmax above and not here lost its gap to where beam search ends its "
        "sentences, not to what it translates."
        + (f" {APART_NOTE}" if any(TUNED_UNTESTED in r[TUNED] for r in tuned) else "")
        + "\n\n"
        + markdown_table(
            ["attention", "lenpen (valid BLEU)",
             *(f"BLEU {corpus.tests[t]} (hyp/ref); - softmax" for t in corpus.tests)],
            [[titles[r["attention"]],
              f"{r[TUNED]['lenpen']} ({r[TUNED]['valid'][r[TUNED]['lenpen']]:.2f})",
              *(cell(r[TUNED], t) for t in corpus.tests)] for r in tuned])
        + (f"\nNot tuned: {', '.join(untuned)} (no checkpoint in the work folder).\n"
           if untuned else "") + "\n")


def _not_switched(rows: Sequence[dict], name: str):
    """The rows :func:`switch_table` leaves out, grouped by why."""
    left = [r for r in rows if SWITCHED not in r and r["attention"] != name]
    return [([r for r in left if not r["zero_fraction"]], "no normaliser to switch"),
            ([r for r in left if r["zero_fraction"]], "no checkpoint in the work folder")]


def render(rows: Sequence[dict], titles: dict, corpus: Corpus, settings: str, command: str,
           images: Sequence[str], translated: Sequence[str], smoke: bool) -> str:
    """The report: provenance, settings, how to read it, the table, the paired table,
    the lengths, the tuned length penalties, the switched decodings, where the
    translations of the rows of ``translated`` are, the published figures and the
    ``images``."""
    signature = rows[0]["bleu_signature"] if rows else ""
    here = describe_machine()
    heading = f"# Every kind of attention on {corpus.title}"
    published = published_rows(corpus.title)
    return (
        heading + (" (SMOKE RUN: a check that the pipeline runs, not a result)" if smoke
                   else "") + "\n\n"
        f"{provenance_header(command)}{_elsewhere(rows, here, git_commit())}\n"
        f"Settings: {settings}. Every row has the same architecture, data, seed and stopping "
        "rule; only the attention differs. Each trains until its validation loss has not "
        "improved for the patience's number of validations (converged), or its time budget "
        "or the update cap ends it first (said in the updates column); the best "
        "checkpoint translates. BLEU is sacreBLEU on the tokenised text the corpus was "
        f"prepared as, subwords merged (`{signature}`), on each test split"
        f"{_with_bleu(rows)}; {_on_first_split()} are on the first test split, and so is "
        "hyp/ref length (the translation's tokens over the reference's: below 1, BLEU's "
        "brevity penalty lowers the score); zero weights are the share of exactly-zero "
        "attention weights among unmasked keys, teacher-forced on that split; speed columns "
        "are ratios to softmax measured on one machine (fairseq's median training words/s, "
        "and generation sentences/s; rows trained while the machine ran other work, or "
        "resumed, make them noisy: `results/bench/training.md` measures them alone); "
        "learned alpha is `entmax_alpha`'s alpha per head, over the layers and heads of "
        "each site.\n\n"
        + _reading(rows, corpus) + "\n\n"
        + table(rows, titles, corpus, here) + "\n"
        + paired_table(rows, titles, corpus)
        + length_table(rows, titles, corpus)
        + lenpen_table(rows, titles, corpus)
        + switch_table(rows, titles, corpus)
        + _translations(rows, translated, corpus)
        + (f"\n## Published figures on this corpus (not run here)\n\n{published}\n"
           if published else "")
        + "\n" + "\n".join(f"![{name}]({name})" for name in images) + "\n")


def _on_first_split() -> str:
    """The metrics scored on the first test split alone, each with what it measures."""
    said = [f"{name} ({metric.summary})" if metric.summary else name
            for name, metric in METRICS.items() if not metric.with_bleu]
    return " and ".join([", ".join(said[:-1]), said[-1]] if len(said) > 1 else said)


def _with_bleu(rows: Sequence[dict]) -> str:
    """The clause naming the scores recorded beside BLEU on each test split (chrF), each
    with its signature and which way is better; empty where no row records one."""
    said = []
    for name in beside_bleu():
        metric = METRICS[name]
        row = next((r for r in rows if metric.key in r), None)
        if name == "BLEU" or row is None:
            continue
        signature = f"`{row[metric.signature_key]}`, " if metric.signature else ""
        said.append(f"{name} ({signature}{metric.direction})")
    return f", and so {'is' if len(said) == 1 else 'are'} {' and '.join(said)}" if said else ""


def _translations(rows: Sequence[dict], translated: Sequence[str], corpus: Corpus) -> str:
    if not translated:
        return ""
    missing = [row["attention"] for row in rows if row["attention"] not in translated]
    return (f"\nEach row's translations of every test split are in `{FOLDER}/ROW/TEST.txt` "
            f"(e.g. `{FOLDER}/{translated[0]}/{corpus.tests[corpus.first_test]}.txt`): one "
            "line a sentence, subwords merged, the text BLEU scored"
            + (f"; none for {', '.join(missing)} (recorded before comparisons kept "
               "translations)" if missing else "") + ".\n")


def _reading(rows: Sequence[dict], corpus: Corpus) -> str:
    """What the table can and cannot say: one seed a row, how long each trained, and on
    the synthetic corpus, that it is no natural language."""
    seeds = {_seed(r) for r in rows} - {None}
    still = sum("still improving" in stopped_cell(r) for r in rows)
    text = ("**How to read it.** Each row is one training with one seed"
            + (f" ({', '.join(sorted(seeds))})" if seeds else "")
            + ", trained " + _updates(rows)
            + (f"; {still} of {len(rows)} rows were still improving when they stopped, so "
               "the table compares them at a budget, not at convergence" if still else "")
            + ". No row was repeated with other seeds, so the table cannot say how large "
            "seed-to-seed differences are: read a gap of about 1 BLEU or less as unresolved."
            + (" The paired bootstrap under the table says which gaps are larger than the "
               "choice of test sentences could make." if any(PAIRED in r for r in rows)
               else "")
            + _apart(rows))
    text += _gap_trends(rows, still_improving=bool(still))
    if corpus.title == "the synthetic corpus":
        text += (" The synthetic corpus is a made-up language pair (a fixed lexicon, "
                 "fertilities 0-3, one reordering rule), not natural language: a row's BLEU "
                 "says whether "
                 "the method learns to align and translate it, not how it does on real text "
                 "(`results/multi30k/` is the comparison on real language).")
    return text


def _apart(rows: Sequence[dict]) -> str:
    """A sentence naming the rows trained to another point than softmax's, whose
    differences carry no test; empty where there are none."""
    apart = [r["attention"] for r in rows if UNTESTED in r]
    if not apart:
        return ""
    return (f" {', '.join(apart)} trained to another point than softmax (see the updates "
            "column): their BLEU differences to it are given without a test, since the "
            "training length made part of them.")


def loss_gaps(row: dict, base: dict) -> List[Tuple[int, float]]:
    """``(updates, row's validation loss - base's)`` at every validation both made."""
    reference = dict(map(tuple, base["validation_curve"]))
    return [(u, loss - reference[u]) for u, loss in row["validation_curve"] if u in reference]


def _gap_trends(rows: Sequence[dict], still_improving: bool = True) -> str:
    """For rows behind softmax in validation loss at the end, the largest gap and the last
    one: a gap that narrows as training goes on is a slower start, not yet a lasting gap;
    where no row was ``still_improving`` when it stopped, the last gap is the lasting one."""
    base = next((r for r in rows if r["attention"] == "softmax"), None)
    trends = []
    for row in rows:
        gaps = loss_gaps(row, base) if base and row is not base else []
        if not gaps or gaps[-1][1] < GAP_SHOWN:
            continue
        peak = max(gaps, key=lambda gap: gap[1])
        trends.append(f"{row['attention']} {peak[1]:+.2f} at {peak[0]} updates, "
                      f"{gaps[-1][1]:+.2f} at {gaps[-1][0]}")
    if not trends:
        return ""
    return (" Validation loss behind softmax's, at its largest and at the last validation "
            f"both made: {'; '.join(trends)}. A gap that narrows while training goes on "
            "says a row learns more slowly; "
            + ("whether it closes, only training to convergence says." if still_improving
               else "no row was still improving when it stopped, so the last gap is what "
                    "is left of it."))


def _seed(row: dict):
    """The ``--seed`` a row trained with, where its spec records it."""
    flags = row.get("spec", {}).get("train", [])
    return flags[flags.index("--seed") + 1] if "--seed" in flags else None


def record_figures(rows: Sequence[dict], titles: dict, corpus_title: str,
                   tests: Dict[str, str], out: Path) -> List[Path]:
    """The figures a comparison's record alone gives (``comparison.json``'s rows, titles,
    corpus and test splits): BLEU on the first test split, each bar with its value and
    its paired-bootstrap interval against softmax where the row has one, and sparsity per
    row; the validation curves; the learned alphas."""
    from sparse_attn_plugin.analysis import plots

    labels = [titles[r["attention"]] for r in rows]
    first = next(iter(tests))
    test = tests[first]
    trained = _updates(rows)
    base = next((i for i, r in enumerate(rows) if r["attention"] == "softmax"), None)
    intervals = [(r[PAIRED][first]["low"], r[PAIRED][first]["high"])
                 if first in r.get(PAIRED, {}) else None for r in rows]
    written = [plots.comparison_bars(
                   labels, [r["bleu"][first] for r in rows],
                   [r["zero_fraction"] for r in rows], out / "comparison.png",
                   f"{corpus_title}: BLEU on {test} and exactly-zero attention weights by "
                   f"site ({test}, teacher-forced), {trained}", f"BLEU ({test})",
                   intervals=intervals if base is not None else None, reference=base),
               plots.training_curves(
                   {label: r["validation_curve"] for label, r in zip(labels, rows)},
                   out / "training-curves.png",
                   f"{corpus_title}: validation loss of each kind of attention, {trained}")]
    alpha_row = next((r for r in rows if r["alphas"]), None)
    if alpha_row:
        written.append(plots.alpha_histograms(
            alpha_row["alphas"], out / "alphas.png",
            f"{corpus_title}: {titles[alpha_row['attention']]}'s learned alpha per head "
            f"after {alpha_row['updates']} updates"))
    return written


def figures(rows: Sequence[dict], titles: dict, work: Path, corpus: Corpus,
            out: Path) -> List[Path]:
    """The figures of :func:`record_figures`, and one test sentence's cross-attention
    (last layer, mean of the heads) under softmax and 1.5-entmax (or the first other row
    with a normaliser), where their checkpoints are in ``work`` (a folder copied without
    them draws no maps)."""
    from sparse_attn_plugin.analysis import plots
    from sparse_attn_plugin.analysis.teacher_forced import sentence_attention
    from sparse_attn_plugin.checkpoints import load_model

    written = record_figures(rows, titles, corpus.title, corpus.tests, out)
    test = corpus.tests[corpus.first_test]
    kept = {r["attention"] for r in rows if (work / r["attention"] / "checkpoint_best.pt").exists()}
    sparse = sorted((r["attention"] for r in rows if r["attention"] != "softmax"
                     and r["zero_fraction"] and r["attention"] in kept),
                    key=lambda name: name != "entmax15")
    if sparse and "softmax" in kept:
        panels = []
        for name in ["softmax", sparse[0]]:
            model, task = load_model(work / name / "checkpoint_best.pt", corpus.data)
            weights, queries, keys, layer = sentence_attention(
                model, task, "test", 0, "decoder_cross", -1, "mean")
            panels.append((f"{titles[name]}: last layer ({layer} from 0), mean of the heads",
                           weights, queries, keys))
        written.append(plots.attention_maps(
            panels, out / "attention-maps.png", "decoder_cross",
            f"{corpus.title}, the first {test} sentence, teacher-forced: cross-attention of "
            f"each row's best checkpoint (rows trained "
            f"{_updates([r for r in rows if r['attention'] in kept])})"))
    return written


def _updates(rows: Sequence[dict]) -> str:
    """How long the rows trained: ``"1500 updates each"``, or the range."""
    counts = sorted({r["updates"] for r in rows})
    if len(counts) == 1:
        return f"{counts[0]} updates each"
    return f"{counts[0]}-{counts[-1]} updates"
