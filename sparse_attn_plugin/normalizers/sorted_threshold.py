"""The thresholds of sparsemax and 1.5-entmax over rows sorted descending, in closed form.

alpha-entmax is ``p_j = [(alpha - 1) s_j - tau]_+ ^ (1 / (alpha - 1))`` with ``tau`` such
that ``sum_j p_j = 1``. With ``x = (alpha - 1)(s - max s)`` sorted descending, ``x_(1) >= ...``,
and ``c_k = sum_{j <= k} x_(j)``, the support is ``k*`` entries and ``tau`` in closed form:

* sparsemax (alpha = 2; Martins & Astudillo 2016, *From Softmax to Sparsemax*):
  ``k* = max{k : 1 + k x_(k) > c_k}``, ``tau = (c_k* - 1) / k*``;
* 1.5-entmax (Peters, Niculae & Martins 2019, *Sparse Sequence-to-Sequence Models*,
  algorithm 2): with the running mean ``M_k = c_k / k`` and mean of squares ``Q_k``,
  ``tau_k = M_k - sqrt((1 - k (Q_k - M_k^2)) / k)`` (a root of ``sum_{j <= k} (x_(j) -
  tau)^2 = 1``) and ``k* = max{k : tau_k <= x_(k)}``.

Each test holds for every ``k <= k*`` and for none after, so ``k*`` is the number that
pass. A NaN sorts first and fails every test (``k*`` is at least 1), so nothing raises.
The full sort (:mod:`.entmax_sort`) and the partial one (:mod:`.entmax_partial`) both end
here.
"""

from typing import Tuple

import torch
from torch import Tensor


def threshold_of_sorted(xs: Tensor, alpha: float) -> Tuple[Tensor, Tensor]:
    """``tau`` and ``k*`` (both ``(..., 1)``; ``k*`` int64) of rows ``xs`` sorted descending
    whose first entry is 0 (``-inf`` allowed after it), at alpha 2 or 1.5."""
    rho = torch.arange(1, xs.size(-1) + 1, dtype=xs.dtype, device=xs.device)
    total = xs.cumsum(-1)
    if alpha == 2.0:
        inside = 1 + rho * xs > total
        taus = (total - 1) / rho
    else:   # NaN where an entry is -inf (inf - inf), which fails the test
        mean = total / rho
        spread = rho * ((xs * xs).cumsum(-1) / rho - mean * mean)
        taus = mean - ((1 - spread) / rho).clamp_min(0).sqrt()
        inside = taus <= xs
    # x_(1) = 0 passes both; a row of NaN passes none, and gets tau_1 (NaN)
    support = inside.sum(-1, keepdim=True).clamp_min(1)
    return taus.gather(-1, support - 1), support


def sparsemax_tau_of_sorted(xs: Tensor) -> Tensor:
    """Sparsemax's ``tau = max_k (c_k - 1) / k`` over rows ``xs`` sorted descending: ``tau_(k+1) >
    tau_k`` exactly when ``x_(k+1) > tau_k``, the test that admits ``k + 1`` to the support,
    so the largest ``tau_k`` is ``tau_(k*)`` (NaN on a row with a NaN), in ten operations
    where finding ``k*`` takes sixteen. The same number as the support's, but at a tie
    ``x_(k+1) = tau_k``, where two equal thresholds may round apart by an ulp."""
    rho = torch.arange(1, xs.size(-1) + 1, dtype=xs.dtype, device=xs.device)
    return ((xs.cumsum(-1) - 1) / rho).amax(-1, keepdim=True)
