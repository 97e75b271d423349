"""A comparison's BLEU panel shows what its table says: each bar's value, and each row's
paired-bootstrap interval against softmax as a whisker, on an axis that lets a 1-BLEU gap
show (``plots.comparison_bars``)."""

import pytest

from sparse_attn_plugin.analysis import plots

LABELS = ["softmax", "sparsemax", "entmax15", "RBF kernel smoother"]
BLEU = [96.91, 95.82, 97.18, 96.57]
ZEROS = [{"encoder_self": 0.0}, {"encoder_self": 0.6}, {"encoder_self": 0.3}, {}]
#: BLEU minus softmax's: 95% interval (low, high); none for softmax itself.
INTERVALS = [None, (-2.05, -0.13), (-0.62, 1.20), None]


def _drawn(tmp_path, monkeypatch, **kwargs):
    """The figure ``comparison_bars`` saves, kept open to be read."""
    kept = []

    def keep(figure, path, title):
        kept.append(figure)
        return path

    monkeypatch.setattr(plots, "_save", keep)
    plots.comparison_bars(LABELS, BLEU, ZEROS, tmp_path / "c.png", "title", **kwargs)
    return kept[0].axes[0]


def test_each_bar_carries_its_value(tmp_path, monkeypatch):
    left = _drawn(tmp_path, monkeypatch)
    assert sorted(t.get_text() for t in left.texts) == sorted(f"{b:.2f}" for b in BLEU)


def test_whiskers_span_softmax_plus_each_interval(tmp_path, monkeypatch):
    left = _drawn(tmp_path, monkeypatch, intervals=INTERVALS, reference=0)
    spans = sorted(tuple(line.get_xdata()) for line in left.lines
                   if len(set(line.get_xdata())) == 2)                 # the horizontal strokes
    assert spans == [pytest.approx((BLEU[0] + low, BLEU[0] + high))
                     for low, high in sorted(filter(None, INTERVALS))]
    dashed = [line for line in left.lines if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and set(dashed[0].get_xdata()) == {BLEU[0]}  # softmax's BLEU
    assert "paired bootstrap" in left.get_title()


def test_the_axis_lets_a_one_bleu_gap_show(tmp_path, monkeypatch):
    """Bars from 0 to 97 make 1 BLEU a hundredth of the panel; the axis starts near the
    smallest bar end or whisker, so the gaps fill the panel."""
    left = _drawn(tmp_path, monkeypatch, intervals=INTERVALS, reference=0)
    low, high = left.get_xlim()
    assert 0 < low < min(BLEU[0] - 2.05, *BLEU) and high > max(BLEU)
    assert (high - low) < 15 and "axis from" in left.get_xlabel()


@pytest.mark.parametrize("intervals", [None, [None] * len(LABELS)])
def test_without_intervals_no_whiskers_and_no_legend_for_them(tmp_path, monkeypatch,
                                                              intervals):
    """No interval given, or one per row that is None (rows recorded without a paired
    test): nothing drawn or titled as whiskers."""
    left = _drawn(tmp_path, monkeypatch, intervals=intervals, reference=0)
    assert not left.lines and not left.get_title()
