"""Each row's BLEU against its table's first row on the same sentences: the paired
bootstrap of :mod:`...evaluation.significance`, from the translations the run has just
made (a reproduction decodes every row on every run, so nothing is read back from disk).

A row is paired where it and the first row are one decoding each of the same test
sentences against the same references (a row whose generation flags post-process the
text otherwise is scored on other references); a table that pools seeds (mean ± sd a
row) is not paired. A run never stops over a pairing: what cannot be paired is left
without one."""

from typing import Callable, Dict, List, Optional, Tuple

from sparse_attn_plugin.evaluation.significance import describe, paired_bootstrap

#: The key of a decoding's record that holds its pairings: ``{first row's decoding key:
#: PairedBleu.record()}`` (one decoding may sit in several tables under different first
#: rows).
KEY = "bleu_vs"


def pair_with_first_rows(tables: List[Tuple[dict, List[dict]]], decoded: Dict[str, dict],
                         outputs: Dict[str, object],
                         bleu_options: Callable[[Optional[str]], dict]) -> None:
    """Add :data:`KEY` to the ``decoded`` record of every row of ``tables`` (as
    :func:`.plan.resolve_tables` gives them) but the first that can be paired with its
    table's first row; ``outputs`` holds each decoding's generate output (``hypotheses``,
    ``references``; none for a training that failed) by key, ``bleu_options(corpus)``
    the corpus's BLEU settings."""
    for _, rows in tables:
        if not pairable(rows):
            continue
        first = rows[0]
        for row in rows[1:]:
            if first["key"] in decoded[row["key"]].get(KEY, {}):
                continue  # paired already, in an earlier table with the same first row
            system, baseline = outputs.get(row["key"]), outputs.get(first["key"])
            same_split = (row["corpus"], row["subset"]) == (first["corpus"], first["subset"])
            if same_split and system and baseline \
                    and list(system.references) == list(baseline.references):
                decoded[row["key"]].setdefault(KEY, {})[first["key"]] = paired_bootstrap(
                    system.hypotheses, baseline.hypotheses, system.references,
                    **bleu_options(row["corpus"])).record()


def pairable(rows: List[dict]) -> bool:
    """Whether a table's rows are one decoding each (not seeds pooled), more than one."""
    return len(rows) > 1 and len({row["row"] for row in rows}) == len(rows)


def paired_cell(decoded: Dict[str, dict], row: dict, first: dict) -> str:
    """The report's cell for ``row`` against ``first``: ``+d [low, high], p``, or ``-``
    where they are not paired (the first row itself, a failed training, other sentences
    or references)."""
    record = decoded[row["key"]].get(KEY, {}).get(first["key"])
    return describe(record) if record else "-"
