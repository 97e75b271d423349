"""The toy example of Malaviya et al. (2018), Figure 1: four attention transforms on
three decoder steps over three source words of fertility 1.

The step scores are the paper's (:data:`SCORES`). softmax and sparsemax normalise each step
on its own; csoftmax and csparsemax bound step ``t`` by what is left of each word's
fertility, ``u_t = max(0, f - beta_{t-1})``, ``beta_{t-1}`` the attention received so far
(``beta_0 = 0``), so no word receives more than its fertility in total. Every number comes
from the library's normalisers (:func:`~sparse_attn_plugin.normalizers.build_normalizer`).

    sparse-attn-toy-example --out results/constrained   # figure1.md (with provenance), .json
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

import shlex
import sys
from pathlib import Path
from typing import Dict, List, Optional

import torch

from sparse_attn_plugin.command_line import CommandParser
from sparse_attn_plugin.files import write_json_atomic, write_text_atomic
from sparse_attn_plugin.markdown import markdown_table
from sparse_attn_plugin.normalizers import CONSTRAINED, build_normalizer

from .provenance import provenance_header

#: The paper's step scores, one row per decoder step, one column per source word.
SCORES = ((1.2, 0.8, -0.2), (0.7, 0.9, 0.1), (-0.2, 0.2, 0.9))
#: Fertility of every source word in the example.
FERTILITY = 1.0
TRANSFORMS = ("softmax", "sparsemax", "csoftmax", "csparsemax")


def attention_steps(name: str, scores=SCORES, fertility: float = FERTILITY) -> Dict[str, list]:
    """Run transform ``name`` over the decoder steps of ``scores``.

    Returns lists with one entry per step: ``attention`` (p_t), ``cumulative``
    (beta_t = p_1 + ... + p_t) and, for the constrained transforms, ``upper`` (u_t);
    ``upper`` is None for the others.
    """
    normalizer = build_normalizer(name, 1)
    z = torch.tensor(scores, dtype=torch.float64)
    fertilities = torch.full_like(z[0], fertility)
    cumulative = torch.zeros_like(z[0])
    out: Dict[str, Optional[list]] = {"attention": [], "cumulative": [],
                                      "upper": [] if name in CONSTRAINED else None}
    for step in z:
        if name in CONSTRAINED:
            upper = (fertilities - cumulative).clamp(min=0.0)
            weights = normalizer(step, upper)
            out["upper"].append(upper.tolist())
        else:
            weights = normalizer(step)
        cumulative = cumulative + weights
        out["attention"].append(weights.tolist())
        out["cumulative"].append(cumulative.tolist())
    return out


def figure1(scores=SCORES, fertility: float = FERTILITY) -> dict:
    """Every transform of :data:`TRANSFORMS` on the example: ``{"scores", "fertility",
    "transforms": {name: attention_steps(name)}}``."""
    return {"scores": [list(s) for s in scores], "fertility": fertility,
            "transforms": {name: attention_steps(name, scores, fertility)
                           for name in TRANSFORMS}}


def _vector(values: Optional[List[float]]) -> str:
    return "-" if values is None else "(" + ", ".join(f"{v:.3f}" for v in values) + ")"


def render(result: dict, command: str) -> str:
    """The markdown report of :func:`figure1`'s result."""
    rows = []
    for name, steps in result["transforms"].items():
        for t, (z, p, beta) in enumerate(zip(result["scores"], steps["attention"],
                                            steps["cumulative"]), 1):
            upper = steps["upper"][t - 1] if steps["upper"] is not None else None
            rows.append([name, t, _vector(z), _vector(upper), _vector(p), _vector(beta)])
    final = {name: steps["cumulative"][-1] for name, steps in result["transforms"].items()}
    over = [name for name, beta in final.items() if max(beta) > result["fertility"] + 1e-9]
    within = [name for name in final if name not in over]

    def names(items):
        return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)

    return "\n".join([
        "# Malaviya et al. (2018), Figure 1: the toy example", "",
        provenance_header(command),
        f"Three source words, each of fertility {result['fertility']:g}; the decoder's "
        "scores at steps t = 1, 2, 3 are z_t. softmax and sparsemax normalise each step "
        "alone; csoftmax and csparsemax are bounded by what is left of each word's "
        "fertility, u_t = max(0, f - beta_{t-1}). beta_t is the cumulative attention after "
        "step t. Computed with the library's normalisers (float64).\n",
        markdown_table(["transform", "t", "z_t", "u_t", "attention p_t", "cumulative beta_t"],
                       rows),
        f"After the last step, {names(over) or 'no transform'} "
        f"{'has' if len(over) == 1 else 'have'} given some word more attention than its "
        f"fertility; {names(within)} stay within every word's fertility"
        + (" (csparsemax ends at exactly (1, 1, 1), with sparse steps, as in the paper's "
           "figure)." if final["csparsemax"] == [result["fertility"]] * 3 else "."),
        "",
    ])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    parser = CommandParser(prog="sparse-attn-toy-example",
                           description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(".work") / "toy_example",
                        help="directory for figure1.md and figure1.json (default: "
                             ".work/toy_example; the project publishes with --out "
                             "results/constrained)")
    args = parser.parse_args(argv)
    result = figure1()
    command = "sparse-attn-toy-example " + shlex.join(argv)
    report = render(result, command)
    try:
        write_json_atomic(args.out / "figure1.json", {"command": command, **result})
        write_text_atomic(args.out / "figure1.md", report)
    except OSError as err:
        parser.fail(err)
    print(report)


if __name__ == "__main__":
    main()
