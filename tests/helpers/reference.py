"""Independent float64 NumPy references of the normalisers, written from their
definitions (not from the algorithms the package uses)."""

import numpy as np


def softmax_ref(z):
    z = np.asarray(z, dtype=np.float64)
    finite = np.isfinite(z)
    if not finite.any():
        return np.zeros_like(z)
    e = np.where(finite, np.exp(z - z[finite].max()), 0.0)
    return e / e.sum()


def topk_ref(z, k):
    """Softmax over entries >= the k-th largest finite score (ties kept)."""
    z = np.asarray(z, dtype=np.float64)
    finite = np.sort(z[np.isfinite(z)])[::-1]
    if finite.size == 0:
        return np.zeros_like(z)
    t = finite[min(k, finite.size) - 1]
    return softmax_ref(np.where(z >= t, z, -np.inf))


def entmax_ref(z, alpha, iters=200):
    """alpha-entmax by bisection on tau in p_j = [(alpha-1) z_j - tau]_+^(1/(alpha-1)).

    The sum of p decreases in tau; p sums to >= 1 at tau = max - 1 and to <= 1 at
    tau = max, which brackets the root.
    """
    z = np.asarray(z, dtype=np.float64)
    finite = np.isfinite(z)
    if not finite.any():
        return np.zeros_like(z)
    x = np.where(finite, (alpha - 1.0) * z, -np.inf)
    lo, hi = x[finite].max() - 1.0, x[finite].max()

    def p(tau):
        return np.clip(x - tau, 0.0, None) ** (1.0 / (alpha - 1.0))

    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p(mid).sum() >= 1.0 else (lo, mid)
    out = p((lo + hi) / 2)
    return out / out.sum()


def apply_rows(fn, scores, *args):
    """Apply a 1-D reference to every row of an array of any shape."""
    scores = np.asarray(scores, dtype=np.float64)
    flat = scores.reshape(-1, scores.shape[-1])
    return np.stack([fn(row, *args) for row in flat]).reshape(scores.shape)
