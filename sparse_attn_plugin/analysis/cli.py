"""sparse-attn-analyze: what the attention of trained sparse_transformer and sparse_lstm
models does.

    sparse-attn-analyze heads CHECKPOINT --data DIR [--subset valid] [--out DIR]
    sparse-attn-analyze trajectory CHECKPOINT_OR_SAVE_DIR ... [--out DIR]
    sparse-attn-analyze maps CHECKPOINT_A CHECKPOINT_B --data DIR --sentence N [--out DIR]

``heads``: each head's zero share, entropy and learned alpha, each module's head diversity
(:mod:`.attention_stats`), teacher-forced on ``--subset``'s references; ``trajectory``:
each head's learned alpha across a run's checkpoints; ``maps``: one sentence's attention,
two models side by side. The files each writes: README.md, "Analysing attention".
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

import csv
import io
from pathlib import Path
from typing import Dict, List, Tuple

from ..checkpoints import (
    CheckpointError,
    load_model,
    read_checkpoint_lazily,
    saved_checkpoints,
    updates_of,
)
from ..command_line import CommandParser
from ..files import write_text_atomic
from ..markdown import markdown_table
from ..normalizers import EntmaxAlpha
from ..sites import SITES
from . import plots
from .attention_stats import head_statistics, layer_of, reads_attention, site_of
from .teacher_forced import AnalysisError, dataset, sentence_attention


# -- heads -------------------------------------------------------------------------------------
def head_rows(stats) -> List[dict]:
    """One row per (site, layer, head)."""
    rows = []
    for (site, layer), module in stats.items():
        for head in range(module.zeros.numel()):
            rows.append({"site": site, "layer": layer, "head": head,
                         "zero_fraction": float(module.zero_fraction[head]),
                         "entropy": float(module.mean_entropy[head]),
                         "alpha": module.alphas[head] if module.alphas else None,
                         "head_diversity": module.head_diversity})
    return rows


def heads_markdown(stats, checkpoint: Path, subset: str, sentences: int) -> str:
    lines = []
    for (site, layer), module in stats.items():
        alphas = " ".join(f"{a:.2f}" for a in module.alphas) if module.alphas else "-"
        lines.append([site, layer,
                      " ".join(f"{100 * z:.0f}" for z in module.zero_fraction.tolist()),
                      " ".join(f"{e:.2f}" for e in module.mean_entropy.tolist()),
                      alphas, f"{module.head_diversity:.3f}"])
    return (f"# Attention heads of `{checkpoint}`\n\nTeacher-forced on the {sentences} "
            f"sentences of the {subset} split. Per head: % of exactly-zero weights among "
            "the keys the masks allow, mean entropy (nats), learned alpha; per layer: "
            "head diversity, the mean Jensen-Shannon divergence between its heads "
            "(nats; 0 = all heads alike).\n\n"
            + markdown_table(["site", "layer", "zeros % per head", "entropy per head",
                              "alpha per head", "head diversity (JS)"], lines))


def run_heads(args) -> List[Path]:
    model, task = load_model(args.checkpoint, args.data)
    data = dataset(task, args.subset)
    batches = task.get_batch_iterator(data, max_tokens=args.max_tokens).next_epoch_itr(
        shuffle=False)
    try:
        stats = head_statistics(model, batches)
    except ValueError as err:  # a model without attention normalisers
        raise AnalysisError(f"{args.checkpoint}: {err}") from None
    rows = head_rows(stats)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    name = args.name or Path(args.checkpoint).parent.name
    written = [write_text_atomic(args.out / f"{name}-heads.csv", text.getvalue()),
               write_text_atomic(args.out / f"{name}-heads.md",
                                 heads_markdown(stats, args.checkpoint, args.subset, len(data)))]
    alphas: Dict[str, List[float]] = {}
    for (site, _), module in stats.items():
        alphas.setdefault(site, []).extend(module.alphas or [])
    if any(alphas.values()):
        updates = updates_of(read_checkpoint_lazily(args.checkpoint))
        written.append(plots.alpha_histograms(
            alphas, args.out / f"{name}-alphas.png",
            f"{name}: learned alpha per head after {updates} updates"))
    return written


# -- trajectory --------------------------------------------------------------------------------
def checkpoints_of(paths: List[Path]) -> List[Path]:
    """Checkpoint files, a save dir standing for every epoch and update checkpoint in it."""
    found = []
    for path in paths:
        if path.is_dir():
            saved = saved_checkpoints(path)
            if not saved:
                raise AnalysisError(f"{path}: no epoch or update checkpoints in this folder")
            found.extend(saved)
        elif path.is_file():
            found.append(path)
        else:
            raise AnalysisError(f"{path}: no such checkpoint or folder")
    return found


def learned_alphas_of(checkpoint: Path) -> Tuple[int, Dict[Tuple[str, int], List[float]]]:
    """``(updates, {(site, layer): alphas})`` read from a checkpoint's parameters."""
    state = read_checkpoint_lazily(checkpoint)
    alphas = {}
    for key, value in state["model"].items():
        module, _, parameter = key.rpartition(".")
        if parameter == "alpha_logit" and reads_attention(module):
            alphas[site_of(module), layer_of(module)] = EntmaxAlpha.alpha_of(value).tolist()
    return updates_of(state), alphas


def run_trajectory(args) -> List[Path]:
    points = sorted((learned_alphas_of(path) for path in checkpoints_of(args.checkpoints)),
                    key=lambda point: point[0])
    modules = sorted({key for _, alphas in points for key in alphas},
                     key=lambda key: (SITES.index(key[0]), key[1]))
    if not modules:
        raise AnalysisError("these checkpoints have no learned alphas (train with "
                            "--attn-fn entmax_alpha or a site's --*-attn-fn entmax_alpha)")
    if any(set(alphas) != set(modules) for _, alphas in points):
        raise AnalysisError("the checkpoints do not have the same alpha-entmax modules: "
                            "give the checkpoints of one run")
    updates = [u for u, _ in points]
    series = {key: [alphas[key] for _, alphas in points] for key in modules}
    first = args.checkpoints[0].resolve()
    name = args.name or (first.name if first.is_dir() else first.parent.name)
    lines = ["updates,site,layer,head,alpha"]
    for i, update in enumerate(updates):
        for (site, layer), per_step in series.items():
            lines += [f"{update},{site},{layer},{head},{alpha:.6f}"
                      for head, alpha in enumerate(per_step[i])]
    return [write_text_atomic(args.out / f"{name}-alpha-trajectory.csv", "\n".join(lines) + "\n"),
            plots.alpha_trajectories(
                updates, series, args.out / f"{name}-alpha-trajectory.png",
                f"{name}: learned alpha of every head over updates {updates[0]}-{updates[-1]} "
                f"({len(updates)} checkpoints)")]


# -- maps --------------------------------------------------------------------------------------
def run_maps(args) -> List[Path]:
    panels = []
    labels = args.labels or [Path(c).parent.name for c in args.checkpoints]
    for label, checkpoint in zip(labels, args.checkpoints):
        model, task = load_model(checkpoint, args.data)
        weights, queries, keys, layer = sentence_attention(
            model, task, args.subset, args.sentence, args.site, args.layer, args.head)
        updates = updates_of(read_checkpoint_lazily(checkpoint))
        panels.append((f"{label} ({updates} updates): layer {layer} (from 0), "
                       f"{'mean of the heads' if args.head == 'mean' else f'head {args.head}'}",
                       weights, queries, keys))
    name = args.name or "-vs-".join(labels)
    title = (f"{Path(args.data).name}, {args.subset} sentence {args.sentence}, teacher-forced: "
             f"{plots.SITE_TITLES[args.site]}")
    return [plots.attention_maps(panels, args.out / f"{name}-maps.png", args.site, title)]


# -- command line ------------------------------------------------------------------------------
def parser() -> CommandParser:
    p = CommandParser(prog="sparse-attn-analyze", description=__doc__.split("\n\n")[0])
    commands = p.add_subparsers(dest="command", required=True)
    heads = commands.add_parser("heads", help="sparsity, entropy, alpha and head diversity")
    heads.add_argument("checkpoint", type=Path)
    trajectory = commands.add_parser("trajectory", help="learned alphas across checkpoints")
    trajectory.add_argument("checkpoints", type=Path, nargs="+",
                            help="checkpoint files, or a run's save dir")
    maps = commands.add_parser("maps", help="one sentence's attention, two models side by side")
    maps.add_argument("checkpoints", type=Path, nargs=2)
    maps.add_argument("--sentence", type=int, required=True, help="index in the subset")
    maps.add_argument("--site", choices=SITES, default="decoder_cross")
    maps.add_argument("--layer", type=int, default=-1, help="default: the last")
    maps.add_argument("--head", default="mean", help="a head's index, or mean (default)")
    maps.add_argument("--labels", nargs=2, help="panel titles (default: checkpoint folders)")
    for command in (heads, maps):
        command.add_argument("--data", type=Path, required=True, help="binarised corpus")
        command.add_argument("--subset", default="valid", help="split (default valid)")
    heads.add_argument("--max-tokens", type=int, default=4096)
    for command in (heads, trajectory, maps):
        command.add_argument("--out", type=Path, default=Path("."), help="output folder")
        command.add_argument("--name", help="file name prefix (default: the run's folder)")
    return p


def main(argv=None) -> int:
    command = parser()
    args = command.parse_args(argv)
    run = {"heads": run_heads, "trajectory": run_trajectory, "maps": run_maps}[args.command]
    try:
        written = run(args)
    except (AnalysisError, CheckpointError, OSError) as err:
        command.fail(err)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    main()
