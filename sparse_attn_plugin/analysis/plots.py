"""PNG figures of the analyses: learned alpha per site (Correia et al. 2019, Figure 2),
alpha trajectories during training (their Figure 4), attention maps side by side, and
a comparison's BLEU, sparsity by site and training curves per model. Every figure takes
a ``title`` that says what data, how many updates and what is compared; layers are
numbered from 0, as ``--layer`` counts them."""

import logging
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from torch import Tensor

from ..files import atomic_path
from ..sites import SITES

SITE_TITLES = {"encoder_self": "encoder self-attention", "decoder_self": "decoder self-attention",
               "decoder_cross": "cross-attention"}
#: (x axis, y axis) of an attention map per site: keys across, queries down; a decoder
#: row is labelled with the token it predicts (its input is the token before it).
MAP_AXES = {"encoder_self": ("source token (key)", "source token (query)"),
            "decoder_self": ("previous target token (key)", "target token predicted"),
            "decoder_cross": ("source token", "target token predicted")}
SITE_COLOURS = {"encoder_self": "tab:orange", "decoder_self": "tab:green",
                "decoder_cross": "tab:purple"}


def _pyplot():
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq may log at DEBUG
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure, path: Path, title: str) -> Path:
    figure.suptitle(title, fontsize=10)
    with atomic_path(path) as partial:
        figure.savefig(partial, format="png", dpi=120, bbox_inches="tight")
    _pyplot().close(figure)
    return Path(path)


def alpha_histograms(alphas: Dict[str, List[float]], path: Path, title: str) -> Path:
    """One histogram per site of the learned alphas of all its heads, every layer's heads
    pooled, on [1, 2] in bins of 0.05."""
    plt = _pyplot()
    sites = [site for site in SITES if alphas.get(site)]
    figure, axes = plt.subplots(1, len(sites), figsize=(4 * len(sites), 3.4), squeeze=False,
                                sharey=True, layout="constrained")
    for ax, site in zip(axes[0], sites):
        ax.hist(alphas[site], bins=[1 + i / 20 for i in range(21)], color="tab:blue",
                edgecolor="white", linewidth=0.8)
        ax.set_title(f"{SITE_TITLES[site]}: {len(alphas[site])} heads,\nall layers pooled",
                     fontsize=9)
        ax.set_xlabel("learned alpha")
        ax.set_xlim(1, 2)
    axes[0][0].set_ylabel("heads")
    return _save(figure, path, title)


def alpha_trajectories(updates: Sequence[int], alphas: Dict[Tuple[str, int], List[List[float]]],
                       path: Path, title: str) -> Path:
    """Alpha of every head against training updates, one panel per site, a line per
    (layer, head); ``alphas[(site, layer)][i]`` holds the heads' alphas at ``updates[i]``."""
    plt = _pyplot()
    sites = [site for site in SITES if any(s == site for s, _ in alphas)]
    figure, axes = plt.subplots(1, len(sites), figsize=(4.5 * len(sites), 3.4), squeeze=False,
                                sharey=True, layout="constrained")
    for ax, site in zip(axes[0], sites):
        layers = sorted(layer for s, layer in alphas if s == site)
        colours = plt.get_cmap("viridis")
        for layer in layers:
            per_step = alphas[site, layer]
            for head in range(len(per_step[0])):
                ax.plot(updates, [step[head] for step in per_step], lw=0.9,
                        color=colours(layer / max(len(layers) - 1, 1)),
                        label=f"layer {layer}" if head == 0 else None)
        ax.set_title(SITE_TITLES[site])
        ax.set_xlabel("training updates")
        ax.set_ylim(1, 2)
        ax.legend(fontsize=7, title="a line per head", title_fontsize=7)  # coloured by layer
    axes[0][0].set_ylabel("learned alpha")
    return _save(figure, path, title)


def attention_maps(panels: Sequence[Tuple[str, Tensor, List[str], List[str]]],
                   path: Path, site: str, title: str) -> Path:
    """Heat maps side by side of one ``site``: each panel is ``(title, weights (T, S),
    query tokens, key tokens)``; exact zeros are white, so sparsity shows."""
    plt = _pyplot()
    width = sum(max(3.5, 0.32 * len(p[3]) + 2.0) for p in panels)
    figure, axes = plt.subplots(1, len(panels), squeeze=False, layout="constrained",
                                figsize=(width, 0.32 * max(len(p[2]) for p in panels) + 1.5))
    for ax, (panel_title, weights, targets, sources) in zip(axes[0], panels):
        shown = weights.masked_fill(weights == 0, float("nan")).numpy()
        image = ax.imshow(shown, cmap="Blues", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(sources)), sources, rotation=90, fontsize=8)
        ax.set_yticks(range(len(targets)), targets, fontsize=8)
        ax.set_title(panel_title, fontsize=9)
        ax.set_xlabel(MAP_AXES[site][0])
        figure.colorbar(image, ax=ax, fraction=0.04, label="attention weight")
    axes[0][0].set_ylabel(MAP_AXES[site][1])
    return _save(figure, path, title)


def comparison_bars(labels: Sequence[str], bleu: Sequence[float],
                    zero_shares: Sequence[Dict[str, float]], path: Path, title: str,
                    bleu_label: str = "BLEU (test)",
                    intervals: Optional[Sequence[Optional[Tuple[float, float]]]] = None,
                    reference: Optional[int] = None) -> Path:
    """Two bar panels per model: BLEU, each bar with its value, and the share of
    exactly-zero attention weights at each site (a bar per site; none where the model has
    no normaliser to count, n/a).

    ``intervals[i]``, where given (not None), is the 95% interval (low, high) of model i's
    BLEU minus model ``reference``'s on the same sentences (paired bootstrap): a whisker from the
    reference's BLEU + low to its BLEU + high, around the bar's end, with the reference's
    BLEU as a dashed line, so a whisker that crosses the line is a gap the test sentences
    cannot resolve; with no interval at all, neither whiskers nor their legend are drawn.
    The BLEU axis spans the bars' ends and whiskers (not from 0), so gaps of 1 BLEU show."""
    plt = _pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 0.6 * len(labels) + 1.9),
                                         sharey=True, layout="constrained")
    positions = range(len(labels))
    left.barh(positions, bleu, color="tab:blue")
    left.set_yticks(positions, labels)
    left.invert_yaxis()
    spans = list(bleu)
    if reference is not None and any(interval is not None for interval in intervals or ()):
        base = bleu[reference]
        left.axvline(base, color="black", linestyle="--", linewidth=0.8)
        for y, interval in zip(positions, intervals):
            if interval is None:
                continue
            low, high = base + interval[0], base + interval[1]
            left.plot([low, high], [y, y], color="black", linewidth=1.2)
            left.plot([low, low], [y - 0.15, y + 0.15], color="black", linewidth=1.2)
            left.plot([high, high], [y - 0.15, y + 0.15], color="black", linewidth=1.2)
            spans += [low, high]
        left.set_title(f"whiskers: 95% interval of each row's BLEU minus {labels[reference]}'s"
                       f"\n(paired bootstrap), drawn from {labels[reference]}'s BLEU (dashed)",
                       fontsize=8)
    pad = max(1.0, 0.1 * (max(spans) - min(spans)))
    start, end = max(0.0, min(spans) - 2 * pad), max(spans) + pad
    end = min(end, max(100.0, max(spans)))            # BLEU ends at 100
    left.set_xlim(start, end)
    for y, value in zip(positions, bleu):
        inside = value - start > 0.2 * (end - start)   # else after the bar, in black
        left.text(start + 0.1 * pad if inside else value + 0.1 * pad, y, f"{value:.2f}",
                  va="center", ha="left", color="white" if inside else "black", fontsize=8,
                  fontweight="bold")
    left.set_xlabel(bleu_label + (f"; axis from {start:.0f}" if start > 0 else ""))
    height = 0.8 / len(SITES)
    for k, site in enumerate(SITES):
        offsets = [y - 0.4 + height * (k + 0.5) for y in positions]
        right.barh(offsets, [100 * shares.get(site, 0) for shares in zero_shares], height,
                   color=SITE_COLOURS[site], label=SITE_TITLES[site])
    for y, shares in zip(positions, zero_shares):
        if not shares:
            right.text(1, y, "n/a (no normaliser)", va="center", fontsize=8)
    right.set_xlabel("exactly-zero attention weights (%)")
    right.set_xlim(0, 100)
    right.legend(fontsize=7, loc="lower right")
    return _save(figure, path, title)


def training_curves(curves: Dict[str, Sequence[Tuple[int, float]]], path: Path,
                    title: str) -> Path:
    """Validation loss (base 2, as fairseq prints it) against training updates, one line
    per model."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 4.2), layout="constrained")
    for label, curve in curves.items():
        if curve:
            updates, losses = zip(*curve)
            axis.plot(updates, losses, marker=".", label=label)
    axis.set_xlabel("training updates")
    axis.set_ylabel("validation loss (bits per token)")
    axis.legend(fontsize=8)
    axis.grid(alpha=0.3)
    return _save(figure, path, title)
