"""The Fenchel-Young losses of sparse_attn_plugin.losses: the entmax package's values and
gradients, the closed-form gradient p - e_y, zero exactly at a confident row, ignore_index
and the reductions, and the contract of the normalisers (NaN rows, one-line errors)."""

import math
import subprocess
import sys
from functools import partial

import entmax
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_attn_plugin import functional, losses
from sparse_attn_plugin.normalizers.normmax import normmax

from helpers import REPO

ALPHAS = (1.25, 1.5, 2.0)
#: normmax's alphas (> 1, any size; at 1000 the entmax package's loss is wrong, below).
NORMMAX_ALPHAS = (1.2, 2.0, 5.0, 10.0)
#: (ours, the entmax package's, our normaliser) for each loss and alpha.
CASES = [(losses.sparsemax_loss, entmax.sparsemax_loss, functional.sparsemax),
         (losses.entmax15_loss, entmax.entmax15_loss, functional.entmax15)] + [
    (partial(losses.entmax_bisect_loss, alpha=alpha),
     partial(entmax.entmax_bisect_loss, alpha=alpha),
     partial(functional.entmax_alpha, alpha=alpha)) for alpha in ALPHAS] + [
    (losses.sparsemax_bisect_loss, entmax.sparsemax_bisect_loss, functional.sparsemax)] + [
    (partial(losses.normmax_loss, alpha=alpha),
     partial(entmax.normmax_bisect_loss, alpha=alpha, n_iter=200),
     partial(normmax, alpha=alpha)) for alpha in NORMMAX_ALPHAS]
IDS = ["sparsemax", "entmax15"] + [f"bisect-{alpha}" for alpha in ALPHAS] + [
    "sparsemax_bisect"] + [f"normmax-{alpha}" for alpha in NORMMAX_ALPHAS]
#: (ours, the entmax package's) module classes and the options both take.
MODULES = [(losses.SparsemaxLoss, entmax.SparsemaxLoss, {}),
           (losses.Entmax15Loss, entmax.Entmax15Loss, {})] + [
    (losses.EntmaxBisectLoss, entmax.EntmaxBisectLoss, {"alpha": alpha}) for alpha in ALPHAS] + [
    (losses.SparsemaxBisectLoss, entmax.SparsemaxBisectLoss, {})] + [
    (losses.NormmaxLoss, entmax.NormmaxBisectLoss, {"alpha": alpha, "n_iter": 200})
    for alpha in NORMMAX_ALPHAS]


def scores_and_target(rows=7, classes=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    scores = 2 * torch.randn(rows, classes, dtype=torch.float64, generator=generator)
    return scores, torch.randint(0, classes, (rows,), generator=generator)


def row_scale(value):
    """Distinct weights of the losses, so that a gradient mixing rows shows."""
    return torch.linspace(0.5, 1.5, value.numel(), dtype=value.dtype).view_as(value)


def loss_and_grad(loss, scores, target, **options):
    """The losses and the gradient of their sum weighted by :func:`row_scale`."""
    scores = scores.clone().requires_grad_()
    value = loss(scores, target, **options)
    (value * row_scale(value)).sum().backward()
    return value.detach(), scores.grad


@pytest.mark.parametrize("ours,theirs,_", CASES, ids=IDS)
@pytest.mark.parametrize("seed", range(3))
def test_per_row_losses_and_gradients_match_entmax(ours, theirs, _, seed):
    scores, target = scores_and_target(rows=5 + seed, classes=3 + 2 * seed, seed=seed)
    value, grad = loss_and_grad(ours, scores, target)
    expected_value, expected_grad = loss_and_grad(theirs, scores, target)
    torch.testing.assert_close(value, expected_value, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("ours,theirs,options", MODULES, ids=IDS)
@pytest.mark.parametrize("reduction", losses.REDUCTIONS)
def test_modules_match_entmax_with_ignore_index_and_each_reduction(ours, theirs, options,
                                                                    reduction):
    scores, target = scores_and_target(rows=9, classes=5, seed=3)
    target[[1, 4, 6]] = 2                                  # class 2 is the ignored one
    made = [cls(**options, ignore_index=2, reduction=reduction) for cls in (ours, theirs)]
    (value, grad), (expected_value, expected_grad) = (loss_and_grad(loss, scores, target)
                                                      for loss in made)
    torch.testing.assert_close(value, expected_value, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-10, atol=1e-10)
    assert (grad[target == 2] == 0).all()


def test_elementwise_mean_divides_by_the_rows_counted():
    scores, target = scores_and_target(rows=8, classes=4, seed=1)
    target[:3] = -100
    per_row = losses.entmax15_loss(scores, target)
    assert (per_row[:3] == 0).all() and per_row.sum() > 0
    mean = losses.entmax15_loss(scores, target, reduction="elementwise_mean")
    torch.testing.assert_close(mean, per_row.sum() / 5)
    assert losses.entmax15_loss(scores, target, reduction="sum") == per_row.sum()


@pytest.mark.parametrize("ours,_,normalize", CASES, ids=IDS)
def test_gradient_is_weights_minus_one_hot_and_gradchecks(ours, _, normalize):
    scores, target = scores_and_target(rows=4, classes=5, seed=2)
    value, grad = loss_and_grad(ours, scores, target)
    expected = normalize(scores) - torch.nn.functional.one_hot(target, 5).double()
    torch.testing.assert_close(grad, row_scale(value)[:, None] * expected, rtol=1e-12,
                               atol=1e-12)
    assert torch.autograd.gradcheck(lambda x: ours(x, target), scores.clone().requires_grad_())


@pytest.mark.parametrize("ours,_,normalize", CASES, ids=IDS)
def test_loss_is_zero_exactly_on_a_confident_row_and_positive_elsewhere(ours, _, normalize):
    scores = torch.tensor([[9.0, 0.0, -1.0], [0.3, 0.2, 0.1], [0.0, 9.0, float("-inf")]],
                          dtype=torch.float64)
    target = torch.tensor([0, 0, 1])
    assert (normalize(scores[[0, 2]]) == torch.eye(3, dtype=torch.float64)[[0, 1]]).all()
    assert ours(scores, target).tolist()[0] == 0.0 == ours(scores, target).tolist()[2]
    assert ours(scores, target)[1] > 0


@pytest.mark.parametrize("ours,_,normalize", CASES, ids=IDS)
def test_a_nan_row_gives_a_nan_loss_and_leaves_the_others(ours, _, normalize):
    scores, target = scores_and_target(rows=5, classes=4, seed=4)
    clean = ours(scores, target)
    scores[2, 1] = float("nan")
    dirty = ours(scores, target)
    assert dirty[2].isnan() and torch.equal(dirty[[0, 1, 3, 4]], clean[[0, 1, 3, 4]])


@pytest.mark.parametrize("ours,_,normalize", CASES, ids=IDS)
def test_masked_rows_and_masked_targets_follow_cross_entropy(ours, _, normalize):
    """Issue 55's rule: a row with every class -inf gives a NaN loss and NaN gradient (it
    gave +inf and -e_y); a target on a masked class of a live row gives +inf with the
    gradient p - e_y; the other rows are untouched; all as torch's cross_entropy."""
    scores, target = scores_and_target(rows=4, classes=4, seed=5)
    clean, clean_grad = loss_and_grad(ours, scores, target)
    scores[1] = float("-inf")
    scores[2, target[2]] = float("-inf")
    value, grad = loss_and_grad(ours, scores, target)
    reference = scores.clone().requires_grad_()
    torch.nn.functional.cross_entropy(reference, target, reduction="none").sum().backward()
    assert value[1].isnan() and grad[1].isnan().all() and reference.grad[1].isnan().all()
    assert value[2] == float("inf") and torch.isfinite(grad[2]).all()
    weights = normalize(scores[2:3].clone()).squeeze(0)
    expected = weights - torch.nn.functional.one_hot(target[2], 4).to(weights.dtype)
    torch.testing.assert_close(grad[2], expected * row_scale(value)[2], atol=1e-12, rtol=0)
    assert torch.equal(value[[0, 3]], clean[[0, 3]])
    assert torch.equal(grad[[0, 3]], clean_grad[[0, 3]])


@pytest.mark.parametrize("target,error,words", [
    (torch.tensor([0, 4]), ValueError, "target 4 is not a class index in [0, 4)"),
    (torch.tensor([-1, 0]), ValueError, "target -1 is not a class index"),
    (torch.tensor([0.0, 1.0]), TypeError, "needs integer class indices"),
    (torch.tensor([0, 1, 2]), ValueError, "without the last (class) dim")])
def test_bad_targets_are_one_line_errors(target, error, words):
    with pytest.raises(error) as raised:
        losses.sparsemax_loss(torch.randn(2, 4), target)
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_bad_reduction_and_integer_scores_are_one_line_errors():
    with pytest.raises(ValueError, match="reduction must be one of"):
        losses.SparsemaxLoss(reduction="mean")
    with pytest.raises(TypeError, match="entmax15_loss needs floating-point scores"):
        losses.entmax15_loss(torch.ones(2, 3, dtype=torch.long), torch.tensor([0, 1]))


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=2), classes=st.integers(1, 7),
       case=st.sampled_from(range(len(CASES))), seed=st.integers(0, 2 ** 16))
def test_any_shape_gives_non_negative_losses_with_gradient_p_minus_e_y(shape, classes, case,
                                                                        seed):
    ours, _, normalize = CASES[case]
    generator = torch.Generator().manual_seed(seed)
    scores = 3 * torch.randn(*shape, classes, dtype=torch.float64, generator=generator)
    target = torch.randint(0, classes, tuple(shape), generator=generator)
    value, grad = loss_and_grad(partial(ours, reduction="none"), scores, target)
    assert value.shape == tuple(shape) and (value >= -1e-12).all()
    weights = normalize(scores)
    expected = weights - torch.nn.functional.one_hot(target, classes).double()
    torch.testing.assert_close(grad, row_scale(value).unsqueeze(-1) * expected, rtol=1e-10,
                               atol=1e-10)


@pytest.mark.parametrize("ours,_,normalize", CASES, ids=IDS)
def test_a_masked_class_counts_as_absent_and_an_offset_changes_nothing(ours, _, normalize):
    scores, target = scores_and_target(rows=5, classes=4, seed=5)
    target[target == 3] = 0
    masked = torch.cat([scores[:, :3], torch.full((5, 1), float("-inf"))], dim=1)
    torch.testing.assert_close(ours(masked, target), ours(scores[:, :3], target))
    torch.testing.assert_close(ours(scores + 1e6, target), ours(scores, target), rtol=1e-9,
                               atol=1e-9)


def test_importing_the_losses_imports_no_fairseq():
    code = ("import sys, sparse_attn_plugin.losses\n"
            "assert 'fairseq' not in sys.modules, 'fairseq imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_normmax_loss_at_a_large_alpha_where_the_entmax_package_underflows():
    # entmax's 1 - (sum p^alpha)^(1/alpha) is 1 once every p^1000 underflows; ours takes
    # the norm as exp(logsumexp(alpha log p) / alpha) would, without underflow
    scores, target = scores_and_target(rows=6, classes=5, seed=6)
    alpha = 1000.0
    value, grad = loss_and_grad(partial(losses.normmax_loss, alpha=alpha), scores, target)
    p = normmax(scores, alpha)
    log_p = torch.where(p > 0, p, 1.0).log().masked_fill(p == 0, -math.inf)
    norm = torch.exp(torch.logsumexp(alpha * log_p, -1) / alpha)
    expected = 1 - norm + (p * scores).sum(-1) - scores.gather(-1, target[:, None])[:, 0]
    torch.testing.assert_close(value, expected, rtol=0, atol=1e-12)
    assert (value >= 0).all()
    onehot = torch.nn.functional.one_hot(target, 5).double()
    torch.testing.assert_close(grad, row_scale(value)[:, None] * (p - onehot), rtol=0, atol=1e-15)


def test_normmax_and_sparsemax_bisect_refuse_bad_alpha_and_n_iter_in_one_line():
    scores, target = scores_and_target(rows=2, classes=3)
    for call, words in [
            (lambda: losses.normmax_loss(scores, target, alpha=1.0), "normmax_loss needs alpha"),
            (lambda: losses.NormmaxLoss(alpha=0.5), "NormmaxLoss needs alpha in (1, inf)"),
            (lambda: losses.normmax_loss(scores, target, n_iter=0), "integer n_iter >= 1"),
            (lambda: losses.sparsemax_bisect_loss(scores, target, n_iter=0),
             "sparsemax_bisect_loss needs an integer n_iter >= 1"),
            (lambda: losses.SparsemaxBisectLoss(n_iter=1.5), "integer n_iter >= 1")]:
        with pytest.raises(ValueError) as raised:
            call()
        assert words in str(raised.value) and "\n" not in str(raised.value)


def test_entmax_bisect_loss_at_alpha_one_is_cross_entropy_and_elsewhere_entmax_s():
    # entmax_alpha takes every alpha > 0; the Tsallis entropy's 0 / 0 at alpha = 1 is
    # Shannon's entropy there, so the loss is cross-entropy (it was inf and NaN)
    scores, target = scores_and_target(rows=6, classes=5, seed=7)
    value, grad = loss_and_grad(partial(losses.entmax_bisect_loss, alpha=1.0), scores, target)
    expected, expected_grad = loss_and_grad(
        partial(torch.nn.functional.cross_entropy, reduction="none"), scores, target)
    torch.testing.assert_close(value, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=0, atol=1e-12)
    for alpha in (0.5, 3.0):
        torch.testing.assert_close(
            losses.entmax_bisect_loss(scores, target, alpha=alpha),
            entmax.entmax_bisect_loss(scores, target, alpha=alpha, n_iter=200), rtol=0,
            atol=1e-10)
    per_row = torch.tensor([1.0, 1.5, 0.7, 1.0, 3.0, 2.0], dtype=torch.float64)[:, None]
    torch.testing.assert_close(
        losses.entmax_bisect_loss(scores, target, alpha=per_row),
        torch.stack([losses.entmax_bisect_loss(scores[i:i + 1], target[i:i + 1],
                                               alpha=a.item())[0]
                     for i, a in enumerate(per_row)]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("alpha", [0.999, 0.9999, 1.0001, 1.001, 1.01])
def test_the_alpha_entmax_loss_in_float32_near_alpha_one_has_no_cancellation(alpha):
    """Issue 55: (1 - sum p^alpha) / (alpha (alpha - 1)) lost 1.6e-3 at alpha 1.0001 in
    float32 (the rounding of sum p^alpha over alpha - 1); the float32 losses are within
    float32's rounding (1e-6 relative to the largest) of the float64 ones."""
    generator = torch.Generator().manual_seed(7)
    scores = 2 * torch.randn(64, 50, dtype=torch.float64, generator=generator)
    target = torch.randint(0, 50, (64,), generator=generator)
    wide = losses.entmax_bisect_loss(scores, target, alpha)
    narrow = losses.entmax_bisect_loss(scores.float(), target, alpha)
    assert (narrow.double() - wide).abs().max() <= 1e-6 * wide.abs().max()
