"""A driver's metrics recomputed from the translations it saved, without its scoring
path, for tests that compare the recorded numbers with these exactly:

* BLEU straight from sacrebleu (``BLEU(...).corpus_score``), not through
  ``evaluation.bleu``;
* REP and DROP as Malaviya et al.'s reference scripts compute them
  (Unbabel/sparse_constrained_attention at 55111dc, ``coverage-eval/rep_score.py`` run
  as ``run_coverage_metrics.sh`` runs it, ``-r REF -p PRED --normalize``, and
  ``coverage-eval/drop_score.py --src_ref_align A --src_mt_align B``), written here
  from those scripts, not from ``evaluation.rep`` or ``evaluation.drop``; DROP without
  the sink position, and a sentence with no link to its reference counting 0 of 0
  (the script reads an empty alignment line as one aligned position ``""``), as
  ALGORITHMS.md section 5 reads it;
* METEOR from a Meteor 1.5 process of its own (the jar is the reference).

So a scorer off by one anywhere between the translations and the result file makes
the comparison fail."""

from collections import Counter
from typing import Dict, Optional, Sequence

from sparse_attn_plugin.evaluation.aligner import SINK


def sacrebleu_bleu(hypotheses: Sequence[str], references: Sequence[str], tokenize="none",
                   lowercase=False, split_compounds=False):
    """sacrebleu's own corpus BLEU (its ``BLEUScore``: ``score``, ``sys_len``, ...),
    with the options the drivers record (``force`` only quiets its warning)."""
    from sacrebleu.metrics import BLEU

    assert not split_compounds, "no driver test here splits compounds"
    return BLEU(tokenize=tokenize, lowercase=lowercase, force=True).corpus_score(
        list(hypotheses), [list(references)])


def rep_score(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """``rep_score.py -n 2 -w1 1 -w2 2 --normalize``: per sentence, each hypothesis
    bigram seen more than once adds its count less the reference's (its whole count
    where the reference lacks it), and each bigram of one word twice adds twice that
    (once seen is enough); 100 x the total / the reference tokens."""
    total = 0
    for hyp, ref in zip(hypotheses, references, strict=True):
        h, r = Counter(zip(hyp.split(), hyp.split()[1:])), Counter(zip(ref.split(),
                                                                       ref.split()[1:]))
        total += sum(max(0, n - r[g]) for g, n in h.items() if n > 1)
        total += 2 * sum(max(0, n - r[g]) for g, n in h.items() if len(set(g)) == 1)
    return 100 * float(total) / sum(len(ref.split()) for ref in references)


def drop_score(aligner, sources: Sequence[str], hypotheses: Sequence[str],
               references: Sequence[str], symmetrize: str) -> float:
    """``drop_score.py``: source positions linked to the reference and not to the
    hypothesis, over those linked to the reference, in percent; links from
    ``aligner.align_batch`` (the sink, past the sentence or a ``<SINK>`` token, left
    out; an empty hypothesis links nothing)."""
    srcs = [s.split() for s in sources]

    def linked(targets):
        links = aligner.align_batch(srcs, [t.split() for t in targets], symmetrize)
        return [{i for i, _ in sentence if i < len(src) and src[i] != SINK}
                for src, sentence in zip(srcs, links)]

    dropped = aligned = 0
    for ref, hyp, text in zip(linked(references), linked(hypotheses), hypotheses):
        dropped += len(ref - (hyp if text.split() else set()))
        aligned += len(ref)
    return 100 * float(dropped) / aligned if aligned else 0.0


def rescored(hypotheses: Sequence[str], references: Sequence[str],
             sources: Optional[Sequence[str]] = None, *, bleu: Optional[dict] = None,
             meteor=None, aligner=None, symmetrizations: Sequence[str] = (),
             rep: bool = True) -> Dict:
    """The fields of a driver's record (``bleu``, ``meteor``, ``rep``, ``drop``,
    ``drop_by_symmetrization``) recomputed as above: BLEU where ``bleu`` (its options)
    is given, METEOR with a running ``meteor``, REP unless ``rep`` is false, DROP with
    an ``aligner`` under each of ``symmetrizations`` (the first is ``drop``)."""
    record = {"rep": rep_score(hypotheses, references)} if rep else {}
    if bleu is not None:
        record["bleu"] = sacrebleu_bleu(hypotheses, references, **bleu).score
    if meteor is not None:
        record["meteor"] = meteor.score(list(hypotheses), list(references)).corpus
    if aligner is not None:
        by = {name: drop_score(aligner, sources, hypotheses, references, name)
              for name in symmetrizations}
        record.update(drop=next(iter(by.values())), drop_by_symmetrization=by)
    return record


def recorded(record: dict, fields) -> dict:
    """``record``'s values of ``fields`` (a recomputation's keys), to compare with it."""
    return {name: record.get(name) for name in fields}


def assert_decodings_score_their_outputs(decoded: dict, outputs, **options) -> None:
    """A reproduction's ``decoded`` records (``{key: record}``) hold, as a multiset, the
    metrics :func:`rescored` (with ``options``) gives each of ``outputs``, the
    translations the driver scored (``GenerateOutput``s, one per decoding: its generate
    logs read back, or what a stand-in ``generate`` returned). Equal floats, not ranges;
    which record belongs to which log is left to the tests of the report."""
    import json

    assert len(outputs) == len(decoded), f"{len(outputs)} outputs, {len(decoded)} decodings"
    cache = {}
    expected = []
    for out in outputs:
        key = (tuple(out.hypotheses), tuple(out.references), tuple(out.sources))
        if key not in cache:
            cache[key] = rescored(out.hypotheses, out.references, out.sources, **options)
        expected.append(json.dumps(cache[key], sort_keys=True))
    fields = json.loads(expected[0]).keys() if expected else ()
    got = [json.dumps(recorded(record, fields), sort_keys=True) for record in decoded.values()]
    assert sorted(got) == sorted(expected), (sorted(got), sorted(expected))


def read_outputs(logs):
    """The ``GenerateOutput`` of each fairseq-generate log in ``logs``."""
    from sparse_attn_plugin.evaluation import read_generate_output
    from sparse_attn_plugin.reading import read_lines

    return [read_generate_output(read_lines(log)) for log in logs]


def keeping_outputs(generate, outputs):
    """A stand-in ``generate`` (helpers/fakes.py) that also appends each translation it
    returns (its ``GenerateOutput``) to ``outputs``: what the driver scored, to score
    again."""
    def keeping(*args, **kwargs):
        result = generate(*args, **kwargs)
        outputs.append(result.output)
        return result
    return keeping
