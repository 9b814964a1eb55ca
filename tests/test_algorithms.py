"""The math of advantages, ratios, clipping, KL and aggregation: hand-worked values and properties."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms import aggregate, compute_advantages, kl_estimate, loss_normalizer, masked_mean, policy_loss

# ----------------------------------------------------------------------------- advantages


def test_grpo_advantage_hand_worked():
    # mean 0.25; unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    adv = compute_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), group_size=4, eps=1e-4)
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-4)
    torch.testing.assert_close(adv, expected)


def test_dr_grpo_centres_without_scaling():
    adv = compute_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 4.0, 6.0, 8.0]), 4, estimator="dr_grpo")
    torch.testing.assert_close(adv, torch.tensor([0.75, -0.25, -0.25, -0.25, -3.0, -1.0, 1.0, 3.0]))


def test_rloo_leave_one_out_baseline():
    # completion 0: baseline mean(0,0,0) = 0 -> 1; others: baseline mean(1,0,0) = 1/3 -> -1/3
    adv = compute_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4, estimator="rloo")
    torch.testing.assert_close(adv, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]))
    # identity: rloo = G / (G - 1) * (r - mean)
    r = torch.tensor([0.3, 0.9, 0.1, 0.5, 1.0, 0.0])
    torch.testing.assert_close(compute_advantages(r, 3, "rloo"), 1.5 * compute_advantages(r, 3, "dr_grpo"))


def test_batch_std_scaling_uses_one_std_for_all_groups():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    adv = compute_advantages(r, 4, "grpo", std_scale="batch", eps=0.0 + 1e-8)
    centred = compute_advantages(r, 4, "dr_grpo")
    torch.testing.assert_close(adv, centred / r.std())


def test_all_equal_group_gets_exact_zero_never_nan():
    r = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    for est in ("grpo", "dr_grpo", "rloo"):
        for scale in ("group", "batch", "none"):
            adv = compute_advantages(r, 4, est, std_scale=scale)
            assert torch.isfinite(adv).all()
            assert (adv[:8] == 0).all(), (est, scale)
            assert (adv[8:] != 0).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"estimator": "ppo"}, "estimator"),
        ({"std_scale": "global"}, "std_scale"),
        ({"group_size": 1}, "group_size"),
        ({"group_size": 3}, "multiple"),
    ],
)
def test_advantage_rejects_unsupported_arguments(kwargs, match):
    args = {"group_size": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        compute_advantages(torch.zeros(8), **args)


# ----------------------------------------------------------------------------- KL, masked means, aggregation


def test_kl_estimators_hand_worked():
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    x = math.log(0.5)  # log ref - log p
    torch.testing.assert_close(kl_estimate(logp, ref, "k1"), torch.tensor([-x]))
    torch.testing.assert_close(kl_estimate(logp, ref, "k2"), torch.tensor([x * x / 2]))
    torch.testing.assert_close(kl_estimate(logp, ref, "k3"), torch.tensor([0.5 - x - 1.0]))  # exp(x) = 0.5
    assert float(kl_estimate(ref, ref, "k3")) == 0.0
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_estimate(logp, ref, "k4")


def test_k3_is_nonnegative_and_finite_for_extreme_gaps():
    logp = torch.tensor([-80.0, 0.0, -1e-3])
    ref = torch.tensor([0.0, -80.0, -5.0])
    kl = kl_estimate(logp, ref, "k3")
    assert torch.isfinite(kl).all() and (kl >= 0).all()


def test_masked_mean_hand_worked_and_ignores_nan_in_padding():
    values = torch.tensor([[1.0, 3.0, float("nan")], [4.0, float("inf"), 7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    torch.testing.assert_close(masked_mean(values, mask), torch.tensor(8.0 / 3))
    torch.testing.assert_close(masked_mean(values, mask, dim=1), torch.tensor([2.0, 4.0]))
    assert float(masked_mean(values, torch.zeros_like(mask), dim=1).sum()) == 0.0


def test_aggregations_hand_worked():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, 100.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert float(aggregate(loss, mask, "token_mean")) == pytest.approx(10 / 4)
    assert float(aggregate(loss, mask, "seq_mean_token_mean")) == pytest.approx((2 + 4) / 2)
    assert float(aggregate(loss, mask, "constant", max_completion_length=4)) == pytest.approx(10 / (2 * 4))
    with pytest.raises(ValueError, match="max_completion_length"):
        aggregate(loss, mask, "constant")
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(loss, mask, "sum")


# ----------------------------------------------------------------------------- the clipped surrogate


def one_token(logp_minus_old: float, adv: float, **kw):
    logp = torch.tensor([[logp_minus_old]], requires_grad=True)
    loss, metrics = policy_loss(logp, torch.zeros(1, 1), torch.tensor([adv]), torch.ones(1, 1), **kw)
    loss.backward()
    return loss.item(), float(logp.grad), metrics


def test_clipped_surrogate_hand_worked():
    # ratio 1.5, A = +1: min(1.5, clip(1.5) = 1.2) = 1.2 -> loss -1.2, clipped, no gradient
    loss, grad, m = one_token(math.log(1.5), 1.0)
    assert loss == pytest.approx(-1.2) and grad == 0.0 and float(m["loss/clip_frac"]) == 1.0
    # ratio 1.5, A = -1: min(-1.5, -1.2) = -1.5 -> loss 1.5, unclipped, d/dlogp = -A * ratio = 1.5
    loss, grad, m = one_token(math.log(1.5), -1.0)
    assert loss == pytest.approx(1.5) and grad == pytest.approx(1.5) and float(m["loss/clip_frac"]) == 0.0
    # ratio 0.5, A = -1: min(-0.5, -0.8) = -0.8 -> loss 0.8, clipped
    loss, grad, m = one_token(math.log(0.5), -1.0)
    assert loss == pytest.approx(0.8) and grad == 0.0 and float(m["loss/clip_frac"]) == 1.0
    # ratio 1 (first pass): loss -A, gradient -A (the policy-gradient term)
    loss, grad, _ = one_token(0.0, 2.0)
    assert loss == pytest.approx(-2.0) and grad == pytest.approx(-2.0)
    # clip-higher: ratio 1.25 within (0.8, 1.28) is not clipped
    loss, grad, _ = one_token(math.log(1.25), 1.0, clip_high=0.28)
    assert loss == pytest.approx(-1.25) and grad == pytest.approx(-1.25)


def test_kl_term_adds_beta_times_k3():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    loss, metrics = policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1), ref_logp=ref, kl_coef=0.1)
    k3 = 0.5 - math.log(0.5) - 1.0
    assert float(loss) == pytest.approx(0.1 * k3)
    assert float(metrics["loss/kl"]) == pytest.approx(k3)
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1), kl_coef=0.1)


def test_sequence_level_ratio_is_exp_of_mean_log_ratio():
    logp = torch.tensor([[0.3, -0.1, 9.0]])
    mask = torch.tensor([[1, 1, 0]])
    _, metrics = policy_loss(logp, torch.zeros(1, 3), torch.tensor([1.0]), mask, ratio_level="sequence", clip_high=10.0)
    assert float(metrics["loss/ratio_mean"]) == pytest.approx(math.exp(0.1))


def test_policy_loss_rejects_bad_arguments():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="ratio_level"):
        policy_loss(x, x, torch.zeros(2), torch.ones(2, 3), ratio_level="chunk")
    with pytest.raises(ValueError, match="shapes"):
        policy_loss(x, x, torch.zeros(3), torch.ones(2, 3))


def loop_reference(logp, old, adv, mask, clip_low, clip_high, aggregation, max_len):
    """Plain-Python per-token loop, written independently of the vectorised code."""
    per_seq, total, count = [], 0.0, 0
    for i in range(logp.shape[0]):
        seq_sum, seq_n = 0.0, 0
        for t in range(logp.shape[1]):
            if mask[i, t]:
                ratio = math.exp(float(logp[i, t] - old[i, t]))
                clipped = min(max(ratio, 1 - clip_low), 1 + clip_high)
                value = -min(ratio * float(adv[i]), clipped * float(adv[i]))
                seq_sum, seq_n = seq_sum + value, seq_n + 1
        per_seq.append(seq_sum / seq_n if seq_n else 0.0)
        total, count = total + seq_sum, count + seq_n
    if aggregation == "token_mean":
        return total / count
    if aggregation == "seq_mean_token_mean":
        return sum(per_seq) / len(per_seq)
    return total / (logp.shape[0] * max_len)


# ----------------------------------------------------------------------------- properties


@st.composite
def batches(draw):
    B = draw(st.integers(1, 5))
    T = draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(1, T), min_size=B, max_size=B))
    floats = st.floats(-2.0, 2.0, allow_nan=False, allow_subnormal=False, width=32)
    logp = torch.tensor(draw(st.lists(st.lists(floats, min_size=T, max_size=T), min_size=B, max_size=B))) - 3.0
    old = logp + torch.tensor(draw(st.lists(st.lists(st.floats(-0.5, 0.5, allow_subnormal=False, width=32), min_size=T, max_size=T), min_size=B, max_size=B)))
    adv = torch.tensor(draw(st.lists(floats, min_size=B, max_size=B)))
    mask = (torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).long()
    aggregation = draw(st.sampled_from(["token_mean", "seq_mean_token_mean", "constant"]))
    return logp, old, adv, mask, aggregation


def loss_and_grad(logp, old, adv, mask, aggregation, **kw):
    logp = logp.clone().requires_grad_(True)
    loss, _ = policy_loss(logp, old, adv, mask, aggregation=aggregation, max_completion_length=8, clip_high=0.28, **kw)
    loss.backward()
    return loss.detach(), logp.grad


@settings(max_examples=60, deadline=None)
@given(batches(), st.integers(1, 4), st.sampled_from([0.0, float("nan"), float("inf"), -1e30]))
def test_extra_padding_changes_neither_loss_nor_gradient(batch, extra, junk):
    logp, old, adv, mask, aggregation = batch
    ref = logp - 0.3
    loss, grad = loss_and_grad(logp, old, adv, mask, aggregation, ref_logp=ref, kl_coef=0.05)

    pad = lambda x, v: torch.cat([x, torch.full((x.shape[0], extra), v, dtype=x.dtype)], dim=1)  # noqa: E731
    loss_p, grad_p = loss_and_grad(pad(logp, junk), pad(old, junk), adv, pad(mask, 0), aggregation, ref_logp=pad(ref, junk), kl_coef=0.05)
    torch.testing.assert_close(loss_p, loss)
    torch.testing.assert_close(grad_p[:, : logp.shape[1]], grad)
    assert (grad_p[:, logp.shape[1] :] == 0).all()


@settings(max_examples=60, deadline=None)
@given(batches(), st.data())
def test_micro_batches_accumulate_to_the_whole_batch_gradient(batch, data):
    logp, old, adv, mask, aggregation = batch
    whole_loss, whole_grad = loss_and_grad(logp, old, adv, mask, aggregation)

    # Split rows into arbitrary contiguous micro-batches, trimming each to its own longest row,
    # with the whole batch's normaliser: the sum must equal the whole.
    B = logp.shape[0]
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(B - 1, 1)), max_size=3)))) if B > 1 else []
    bounds = [0, *[c for c in cuts if c < B], B]
    normalizer = loss_normalizer(mask, aggregation, 8)
    total, grad = torch.zeros(()), torch.zeros_like(logp)
    for lo, hi in zip(bounds, bounds[1:]):
        width = int(mask[lo:hi].sum(1).max())
        part = slice(lo, hi), slice(0, width)
        loss, g = loss_and_grad(logp[part], old[part], adv[lo:hi], mask[part], aggregation, normalizer=normalizer)
        total += loss
        grad[part] += g
    torch.testing.assert_close(total, whole_loss)
    torch.testing.assert_close(grad, whole_grad)


@settings(max_examples=60, deadline=None)
@given(batches())
def test_vectorised_loss_matches_loop_reference(batch):
    logp, old, adv, mask, aggregation = batch
    loss, _ = policy_loss(logp, old, adv, mask, aggregation=aggregation, max_completion_length=8, clip_high=0.28)
    assert float(loss) == pytest.approx(loop_reference(logp, old, adv, mask, 0.2, 0.28, aggregation, 8), rel=1e-4, abs=1e-5)
