"""The math of advantages, ratios, clipping, KL and aggregation: hand-worked values and properties."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms import (
    AGGREGATIONS,
    BASELINES,
    KL_ESTIMATORS,
    RATIO_LEVELS,
    STD_SCALES,
    SURROGATES,
    LossSettings,
    aggregate,
    compute_advantages,
    group_stats,
    informative_groups,
    kl_estimate,
    loss_normalizer,
    masked_mean,
    overlong_penalty,
    policy_loss,
    sequence_kl,
    truncated_is_weights,
)

# ----------------------------------------------------------------------------- advantages


def test_grpo_advantage_hand_worked():
    # mean 0.25; unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    adv = compute_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), group_size=4, eps=1e-4)
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-4)
    torch.testing.assert_close(adv, expected)


def test_dr_grpo_centres_without_scaling():
    adv = compute_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 4.0, 6.0, 8.0]), 4, baseline="group_mean", std_scale="none")
    torch.testing.assert_close(adv, torch.tensor([0.75, -0.25, -0.25, -0.25, -3.0, -1.0, 1.0, 3.0]))


def test_rloo_leave_one_out_baseline():
    # completion 0: baseline mean(0,0,0) = 0 -> 1; others: baseline mean(1,0,0) = 1/3 -> -1/3
    adv = compute_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4, baseline="leave_one_out", std_scale="none")
    torch.testing.assert_close(adv, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]))
    # identity: rloo = G / (G - 1) * (r - mean)
    r = torch.tensor([0.3, 0.9, 0.1, 0.5, 1.0, 0.0])
    rloo = compute_advantages(r, 3, baseline="leave_one_out", std_scale="none")
    torch.testing.assert_close(rloo, 1.5 * compute_advantages(r, 3, baseline="group_mean", std_scale="none"))


def test_batch_std_scaling_uses_one_std_for_all_groups():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    adv = compute_advantages(r, 4, std_scale="batch", eps=0.0 + 1e-8)
    centred = compute_advantages(r, 4, std_scale="none")
    torch.testing.assert_close(adv, centred / r.std())


def test_all_equal_group_gets_exact_zero_never_nan():
    r = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    for baseline in BASELINES:
        for scale in STD_SCALES:
            adv = compute_advantages(r, 4, baseline=baseline, std_scale=scale)
            assert torch.isfinite(adv).all()
            assert (adv[:8] == 0).all(), (baseline, scale)
            assert (adv[8:] != 0).all()


NAN = float("nan")


def test_missing_rewards_are_left_out_of_group_statistics_hand_worked():
    r = torch.tensor([1.0, 0.0, NAN, 1.0])
    # valid 1, 0, 1: mean 2/3, unbiased std sqrt(((1/3)^2 * 2 + (2/3)^2) / 2) = sqrt(1/3)
    std = math.sqrt(1 / 3)
    torch.testing.assert_close(compute_advantages(r, 4, eps=0.0 + 1e-12), torch.tensor([1 / 3 / std, -2 / 3 / std, 0.0, 1 / 3 / std]))
    torch.testing.assert_close(compute_advantages(r, 4, std_scale="none"), torch.tensor([1 / 3, -2 / 3, 0.0, 1 / 3]))
    # leave-one-out over the *other valid* rewards: 1 - mean(0, 1), 0 - mean(1, 1), -, 1 - mean(1, 0)
    torch.testing.assert_close(compute_advantages(r, 4, baseline="leave_one_out", std_scale="none"), torch.tensor([0.5, -1.0, 0.0, 0.5]))
    # batch std over the valid rewards of every group
    r2 = torch.tensor([1.0, 0.0, NAN, 1.0, 0.0, float("inf"), 1.0, 0.0])
    valid = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    centred = compute_advantages(r2, 4, std_scale="none")
    torch.testing.assert_close(compute_advantages(r2, 4, std_scale="batch", eps=1e-12), centred / valid.std())


def test_groups_with_fewer_than_two_valid_rewards_get_zero():
    r = torch.tensor([NAN, NAN, NAN, NAN, 1.0, NAN, NAN, NAN, 1.0, 0.0, NAN, NAN])
    for baseline in BASELINES:
        for scale in STD_SCALES:
            adv = compute_advantages(r, 4, baseline=baseline, std_scale=scale)
            assert torch.isfinite(adv).all(), (baseline, scale)
            assert (adv[:8] == 0).all() and (adv[8:10] != 0).all() and (adv[10:] == 0).all(), (baseline, scale)
    assert informative_groups(r, 4).tolist() == [False, False, True]
    stats = group_stats(r, 4)
    assert stats["reward/missing"] == 9 and stats["reward/mean"] == pytest.approx(2 / 3)
    assert stats["reward/frac_groups_all_equal"] == pytest.approx(2 / 3)
    assert group_stats(torch.full((4,), NAN), 4)["reward/mean"] is None


def advantages_loop(rewards, G, baseline, std_scale, eps):
    """Per-group Python reference, written independently of the vectorised code."""
    values = [float(x) for x in rewards]
    valid_all = [v for v in values if math.isfinite(v)]
    batch_std = statistics_std(valid_all)
    out = []
    for g in range(0, len(values), G):
        group = values[g : g + G]
        valid = [v for v in group if math.isfinite(v)]
        flat = len(valid) < 2 or max(valid) == min(valid)
        mean = sum(valid) / len(valid) if valid else 0.0
        for v in group:
            if flat or not math.isfinite(v):
                out.append(0.0)
                continue
            a = v - {"leave_one_out": (sum(valid) - v) / (len(valid) - 1), "group_mean": mean}[baseline]
            a /= {"group": statistics_std(valid) + eps, "batch": batch_std + eps, "none": 1.0}[std_scale]
            out.append(a)
    return out


def statistics_std(xs):
    if len(xs) < 2:
        return 1.0 - 1e-4  # compute_advantages divides by 1 when the batch has one valid reward
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


@settings(max_examples=150, deadline=None)
@given(
    st.integers(2, 5).flatmap(
        lambda G: st.tuples(
            st.just(G),
            st.lists(st.sampled_from([0.0, 1.0, 0.5, -1.0, NAN, float("inf")]), min_size=G, max_size=4 * G).map(lambda xs: xs[: len(xs) // G * G]),
        )
    ),
    st.sampled_from(list(BASELINES)),  # every registered one: the loop above must know it
    st.sampled_from(list(STD_SCALES)),
)
def test_vectorised_advantages_match_loop_reference(case, baseline, std_scale):
    G, rewards = case
    if not rewards:
        return
    adv = compute_advantages(torch.tensor(rewards), G, baseline=baseline, std_scale=std_scale, eps=1e-4)
    assert torch.isfinite(adv).all()
    assert adv.tolist() == pytest.approx(advantages_loop(rewards, G, baseline, std_scale, 1e-4), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"baseline": "median"}, r"baseline must be one of \['group_mean', 'leave_one_out'\]"),
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
    loss, metrics = policy_loss(logp, torch.zeros(1, 1), torch.tensor([adv]), torch.ones(1, 1), LossSettings(**kw))
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


def test_truncated_importance_weights_hand_worked():
    # learner old log-probs vs sampler log-probs: ratios e^0.5, e^-1, e^2 (capped at 3), padding
    old = torch.tensor([[0.0, -1.0, 1.0, 5.0]])
    sampler = torch.tensor([[-0.5, 0.0, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    w, capped = truncated_is_weights(old, sampler, mask, cap=3.0, level="token")
    assert w.tolist()[0] == pytest.approx([math.exp(0.5), math.exp(-1.0), 3.0, 0.0])
    assert capped.tolist() == [[False, False, True, False]]
    # sequence level: one weight, the product of the ratios, e^(0.5 - 1 + 2) = e^1.5, capped at 3 -> 3
    w, capped = truncated_is_weights(old, sampler, mask, cap=3.0, level="sequence")
    assert w.tolist()[0] == pytest.approx([3.0, 3.0, 3.0, 0.0]) and capped.tolist() == [[True, True, True, False]]
    w, _ = truncated_is_weights(old, sampler, mask, cap=10.0, level="sequence")
    assert w.tolist()[0] == pytest.approx([math.exp(1.5)] * 3 + [0.0])
    # a huge gap is capped, not inf or NaN
    w, _ = truncated_is_weights(torch.tensor([[0.0]]), torch.tensor([[-1e4]]), torch.tensor([[1]]), cap=2.0)
    assert w.tolist() == [[2.0]]


def test_truncated_importance_weights_scale_the_surrogate_not_the_kl():
    """A token sampled by an older policy twice as likely (weight 0.5) contributes half the
    policy-gradient term; the KL term is untouched."""
    logp = torch.tensor([[math.log(0.25)]], requires_grad=True)
    ref = torch.tensor([[math.log(0.25)]])
    settings = LossSettings(aggregation="token_mean", kl_coef=0.1)
    w, _ = truncated_is_weights(logp.detach(), torch.tensor([[math.log(0.5)]]), torch.ones(1, 1), cap=2.0)
    assert float(w) == pytest.approx(0.5)
    loss, _ = policy_loss(logp, logp.detach(), torch.tensor([2.0]), torch.ones(1, 1), settings, ref_logp=ref, is_weights=w)
    loss.backward()
    # surrogate -A * ratio = -2 at ratio 1, times 0.5 -> -1; KL at pi = pi_ref is 0 with gradient 0
    assert float(loss) == pytest.approx(-1.0) and float(logp.grad) == pytest.approx(-1.0)


def test_kl_term_adds_beta_times_k3():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    loss, metrics = policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1), LossSettings(kl_coef=0.1), ref_logp=ref)
    k3 = 0.5 - math.log(0.5) - 1.0
    assert float(loss) == pytest.approx(0.1 * k3)
    assert float(metrics["loss/kl"]) == pytest.approx(k3)
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1), LossSettings(kl_coef=0.1))


def test_sequence_level_ratio_is_exp_of_mean_log_ratio():
    logp = torch.tensor([[0.3, -0.1, 9.0]])
    mask = torch.tensor([[1, 1, 0]])
    _, metrics = policy_loss(logp, torch.zeros(1, 3), torch.tensor([1.0]), mask, LossSettings(ratio_level="sequence", clip_high=10.0))
    assert float(metrics["loss/ratio_mean"]) == pytest.approx(math.exp(0.1))


def test_dual_clip_caps_the_loss_of_negative_advantages():
    # ratio 4, A = -1, clip 0.2: PPO gives min(-4, -1.2) = -4 -> loss 4 with gradient -A * ratio = 4
    loss, grad, _ = one_token(math.log(4.0), -1.0)
    assert loss == pytest.approx(4.0) and grad == pytest.approx(4.0)
    # dual clip c = 3 caps it at -c * A = 3, with no gradient through the cap
    loss, grad, m = one_token(math.log(4.0), -1.0, dual_clip=3.0)
    assert loss == pytest.approx(3.0) and grad == 0.0 and float(m["loss/dual_clip_frac"]) == 1.0
    # below the cap nothing changes: ratio 2 -> loss 2 < 3
    loss, grad, m = one_token(math.log(2.0), -1.0, dual_clip=3.0)
    assert loss == pytest.approx(2.0) and grad == pytest.approx(2.0) and float(m["loss/dual_clip_frac"]) == 0.0
    # positive advantages are never dual-clipped: ratio 4, A = +1 -> ordinary clip to 1.2
    loss, grad, _ = one_token(math.log(4.0), 1.0, dual_clip=3.0)
    assert loss == pytest.approx(-1.2) and grad == 0.0
    with pytest.raises(ValueError, match="dual_clip"):
        one_token(0.0, 1.0, dual_clip=1.0)


def test_entropy_bonus_subtracts_coef_times_entropy():
    logp = torch.tensor([[-1.0, -2.0, 0.0]], requires_grad=True)
    entropy = torch.tensor([[0.5, 1.5, 99.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0]])
    loss, m = policy_loss(logp, logp.detach(), torch.tensor([0.0]), mask, LossSettings(aggregation="token_mean", entropy_coef=0.1),
                          entropy=entropy)
    assert loss.detach().item() == pytest.approx(-0.1 * (0.5 + 1.5) / 2) and float(m["loss/entropy"]) == pytest.approx(1.0)
    loss.backward()
    assert entropy.grad[0].tolist() == pytest.approx([-0.05, -0.05, 0.0])
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(logp, logp.detach(), torch.tensor([0.0]), mask, LossSettings(entropy_coef=0.1))


def test_rows_with_nonfinite_advantage_are_left_out_like_padding():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.7], [-3.0, -1.0]], requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]])
    for aggregation in ("token_mean", "seq_mean_token_mean", "constant"):
        settings = LossSettings(aggregation=aggregation, max_completion_length=4)
        loss, _ = policy_loss(logp.detach(), logp.detach() + 0.1, torch.tensor([1.0, NAN, -2.0]), mask, settings)
        keep = torch.tensor([0, 2])
        expected, _ = policy_loss(logp[keep], logp.detach()[keep] + 0.1, torch.tensor([1.0, -2.0]), mask[keep], settings)
        assert torch.isfinite(loss) and loss.item() == pytest.approx(expected.item())


def test_sequence_kl_sums_the_token_estimates():
    logp = torch.tensor([[math.log(0.5), math.log(0.5), 7.0]])
    ref = torch.tensor([[math.log(0.25), math.log(0.5), -7.0]])
    mask = torch.tensor([[1, 1, 0]])
    # k1 = log pi - log ref = log 2 and 0; k3 at x = log(1/2): 0.5 + log 2 - 1
    assert float(sequence_kl(logp, ref, mask, "k1")) == pytest.approx(math.log(2))
    assert float(sequence_kl(logp, ref, mask, "k3")) == pytest.approx(0.5 + math.log(2) - 1)


def test_overlong_penalty_hand_worked():
    # L_max 20, L_cache 4: free up to 16, then -1/4 per token, -1 at 20
    lengths = torch.tensor([1, 16, 17, 18, 19, 20])
    assert overlong_penalty(lengths, 20, 4).tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5, -0.75, -1.0])
    assert overlong_penalty(lengths, 20, 4, factor=0.5).tolist() == pytest.approx([0.0, 0.0, -0.125, -0.25, -0.375, -0.5])
    assert overlong_penalty(torch.tensor([64]), 64, 64).tolist() == [-1.0]
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty(lengths, 20, 0)


def test_policy_loss_rejects_bad_arguments():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="shapes"):
        policy_loss(x, x, torch.zeros(3), torch.ones(2, 3), LossSettings())
    # the settings are checked when built, before any tensor is seen
    with pytest.raises(ValueError, match="ratio_level"):
        LossSettings(ratio_level="chunk")
    with pytest.raises(ValueError, match=r"surrogate must be one of \['ppo_clip', 'cispo'\], got 'ppo'"):
        LossSettings(surrogate="ppo")
    with pytest.raises(ValueError, match="surrogate 'cispo' does not support it"):
        LossSettings(surrogate="cispo", dual_clip=3.0)
    with pytest.raises(ValueError, match="aggregation"):
        LossSettings(aggregation="sum")
    with pytest.raises(ValueError, match="kl_estimator"):
        LossSettings(kl_estimator="k4")


# ----------------------------------------------------------------------------- surrogates


def token(p: float, p_old: float, adv: float, **kw):
    """One token sampled with probability p_old, now p: (loss, d loss / d log p, metrics)."""
    logp = torch.tensor([[math.log(p)]], requires_grad=True)
    loss, metrics = policy_loss(logp, torch.tensor([[math.log(p_old)]]), torch.tensor([adv]), torch.ones(1, 1), LossSettings(**kw))
    loss.backward()
    return loss.item(), float(logp.grad), metrics


def test_cispo_hand_worked():
    """CISPO's loss is -sg(clip(rho)) * A * log p, so its gradient is -clip(rho) * A, never 0."""
    # p 0.6 from 0.4: rho 1.5, clipped to 1.2 (clip 0.2). A = +1: loss -1.2 * log 0.6 = 0.6130,
    # gradient -1.2 where PPO's clipped branch gives 0.
    loss, grad, m = token(0.6, 0.4, 1.0, surrogate="cispo")
    assert loss == pytest.approx(-1.2 * math.log(0.6)) and grad == pytest.approx(-1.2) and float(m["loss/clip_frac"]) == 1.0
    assert token(0.6, 0.4, 1.0)[1] == 0.0  # ppo_clip drops this token
    # p 0.2 from 0.4: rho 0.5, clipped to 0.8; A = -1: loss -0.8 * -1 * log 0.2 = 0.8 log 0.2 = -1.2876, gradient 0.8
    loss, grad, m = token(0.2, 0.4, -1.0, surrogate="cispo")
    assert loss == pytest.approx(0.8 * math.log(0.2)) and grad == pytest.approx(0.8) and float(m["loss/clip_frac"]) == 1.0
    # rho 1.1 inside the range: weight 1.1, the gradient -1.1 * A equals PPO's (-rho * A), nothing clipped
    loss, grad, m = token(0.44, 0.4, 2.0, surrogate="cispo")
    assert loss == pytest.approx(-1.1 * 2.0 * math.log(0.44)) and grad == pytest.approx(-2.2) and float(m["loss/clip_frac"]) == 0.0
    assert token(0.44, 0.4, 2.0)[1] == pytest.approx(-2.2)
    # clip-higher widens CISPO's weight range the same way: rho 1.25 < 1.28 is not clipped
    assert token(0.5, 0.4, 1.0, surrogate="cispo", clip_high=0.28)[1] == pytest.approx(-1.25)


def test_a_registered_surrogate_is_selectable_by_name(monkeypatch):
    """The seam: one function registered under a name is a new policy loss; the shared tail
    (here a token-mean aggregation and a k1 KL term) applies to it unchanged."""

    def reinforce_is(logp_BT, ratio_BT, adv_B1, *, clip_low, clip_high):
        """Unclipped importance-weighted policy gradient: -rho A."""
        return -(ratio_BT * adv_B1), torch.zeros_like(ratio_BT, dtype=torch.bool)

    monkeypatch.setitem(SURROGATES._items, "reinforce_is", reinforce_is)
    monkeypatch.setitem(SURROGATES._traits, "reinforce_is", {})
    logp = torch.log(torch.tensor([[0.6, 0.5], [0.3, 0.9]]))
    old = torch.log(torch.tensor([[0.4, 0.5], [0.3, 0.9]]))
    ref = torch.log(torch.tensor([[0.6, 0.25], [0.3, 0.9]]))
    mask = torch.tensor([[1, 1], [1, 0]])
    settings = LossSettings(surrogate="reinforce_is", aggregation="token_mean", kl_coef=0.1, kl_estimator="k1")
    loss, m = policy_loss(logp, old, torch.tensor([1.0, -2.0]), mask, settings, ref_logp=ref)
    # tokens: -1.5 * 1, -1 * 1, -1 * -2 = 2 (the padded one out); k1 = log p - log ref: 0, log 2, 0
    assert float(loss) == pytest.approx((-1.5 - 1.0 + 2.0 + 0.1 * math.log(2)) / 3)
    assert float(m["loss/clip_frac"]) == 0.0 and float(m["loss/ratio_max"]) == pytest.approx(1.5)


def loop_reference(logp, old, adv, mask, clip_low, clip_high, aggregation, max_len, ratio_level="token", dual_clip=None,
                   ref=None, kl_coef=0.0, kl_estimator="k3", entropy=None, entropy_coef=0.0, surrogate="ppo_clip"):
    """Plain-Python per-token loop, written independently of the vectorised code."""
    per_seq, total, count, rows = [], 0.0, 0, 0
    for i in range(logp.shape[0]):
        real = [t for t in range(logp.shape[1]) if mask[i, t]]
        seq_log_ratio = sum(float(logp[i, t] - old[i, t]) for t in real) / max(len(real), 1)
        seq_sum = 0.0
        for t in real:
            ratio = math.exp(seq_log_ratio if ratio_level == "sequence" else float(logp[i, t] - old[i, t]))
            clipped = min(max(ratio, 1 - clip_low), 1 + clip_high)
            a = float(adv[i])
            value = {  # every registered surrogate, written out per token (a new one must be added here)
                "ppo_clip": lambda: -min(ratio * a, clipped * a),
                "cispo": lambda: -clipped * a * float(logp[i, t]),
            }[surrogate]()
            if dual_clip is not None and a < 0:
                value = min(value, -dual_clip * a)
            if ref is not None:
                x = max(-20.0, min(20.0, float(ref[i, t] - logp[i, t])))
                kl = {"k1": -x, "k2": x * x / 2, "k3": math.exp(x) - x - 1}[kl_estimator]
                value += kl_coef * kl
            if entropy is not None:
                value -= entropy_coef * float(entropy[i, t])
            seq_sum += value
        per_seq.append(seq_sum / len(real) if real else 0.0)
        total, count, rows = total + seq_sum, count + len(real), rows + bool(real)
    if aggregation == "token_mean":
        return total / count
    if aggregation == "seq_mean_token_mean":
        return sum(per_seq) / rows
    return total / (rows * max_len)


# ----------------------------------------------------------------------------- properties


@st.composite
def batches(draw):
    """A random batch plus a random point in the settings space (every registered surrogate,
    aggregation, ratio level and KL estimator; dual-clip on/off where the surrogate has it, KL
    on/off, entropy bonus on/off)."""
    B = draw(st.integers(1, 5))
    T = draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(1, T), min_size=B, max_size=B))
    floats = st.floats(-2.0, 2.0, allow_nan=False, allow_subnormal=False, width=32)
    logp = torch.tensor(draw(st.lists(st.lists(floats, min_size=T, max_size=T), min_size=B, max_size=B))) - 3.0
    old = logp + torch.tensor(draw(st.lists(st.lists(st.floats(-0.5, 0.5, allow_subnormal=False, width=32), min_size=T, max_size=T), min_size=B, max_size=B)))
    adv = torch.tensor(draw(st.lists(floats, min_size=B, max_size=B)))
    mask = (torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).long()
    aggregation = draw(st.sampled_from(list(AGGREGATIONS)))
    surrogate = draw(st.sampled_from(list(SURROGATES)))
    options = {
        "ratio_level": draw(st.sampled_from(list(RATIO_LEVELS))),
        "surrogate": surrogate,
        "dual_clip": draw(st.sampled_from([None, 1.5, 3.0])) if SURROGATES.trait(surrogate, "dual_clip") else None,
        "kl_coef": draw(st.sampled_from([0.0, 0.05])),
        "kl_estimator": draw(st.sampled_from(list(KL_ESTIMATORS))),
        "entropy_coef": draw(st.sampled_from([0.0, 0.1])),
    }
    return logp, old, adv, mask, aggregation, options


def fake_entropy(logp):
    """A differentiable stand-in for the policy's per-token entropy (only its graph matters here)."""
    return 0.1 * logp * logp


def loss_and_grad(logp, old, adv, mask, aggregation, options=None, *, ref_logp=None, normalizer=None):
    logp = logp.clone().requires_grad_(True)
    settings = LossSettings(aggregation=aggregation, max_completion_length=8, clip_high=0.28, **(options or {}))
    if settings.kl_coef and ref_logp is None:
        ref_logp = torch.where(mask.bool(), logp.detach() - 0.3, logp.detach())
    entropy = fake_entropy(logp) if settings.entropy_coef else None
    loss, _ = policy_loss(logp, old, adv, mask, settings, ref_logp=ref_logp, entropy=entropy, normalizer=normalizer)
    loss.backward()
    return loss.detach(), logp.grad


@settings(max_examples=80, deadline=None)
@given(batches(), st.integers(1, 4), st.sampled_from([0.0, float("nan"), float("inf"), -1e30]))
def test_extra_padding_changes_neither_loss_nor_gradient(batch, extra, junk):
    logp, old, adv, mask, aggregation, options = batch
    options = {**options, "entropy_coef": 0.0}  # the stand-in entropy of junk is not a real padding case
    ref = logp - 0.3
    loss, grad = loss_and_grad(logp, old, adv, mask, aggregation, {**options, "kl_coef": 0.05}, ref_logp=ref)

    pad = lambda x, v: torch.cat([x, torch.full((x.shape[0], extra), v, dtype=x.dtype)], dim=1)  # noqa: E731
    loss_p, grad_p = loss_and_grad(pad(logp, junk), pad(old, junk), adv, pad(mask, 0), aggregation, {**options, "kl_coef": 0.05}, ref_logp=pad(ref, junk))
    torch.testing.assert_close(loss_p, loss)
    torch.testing.assert_close(grad_p[:, : logp.shape[1]], grad)
    assert (grad_p[:, logp.shape[1] :] == 0).all()


@settings(max_examples=80, deadline=None)
@given(batches(), st.integers(1, 3))
def test_extra_empty_rows_change_neither_loss_nor_gradient(batch, extra):
    """A completion left out of the loss (its mask zeroed) weighs nothing, in every aggregation."""
    logp, old, adv, mask, aggregation, options = batch
    loss, grad = loss_and_grad(logp, old, adv, mask, aggregation, options)
    rows = lambda x, v: torch.cat([x, torch.full((extra, x.shape[1]), v, dtype=x.dtype)])  # noqa: E731
    adv_p = torch.cat([adv, torch.full((extra,), 5.0)])
    loss_p, grad_p = loss_and_grad(rows(logp, -1.0), rows(old, -1.5), adv_p, rows(mask, 0), aggregation, options)
    torch.testing.assert_close(loss_p, loss)
    torch.testing.assert_close(grad_p[: logp.shape[0]], grad)


@settings(max_examples=80, deadline=None)
@given(batches(), st.data())
def test_micro_batches_accumulate_to_the_whole_batch_gradient(batch, data):
    logp, old, adv, mask, aggregation, options = batch
    whole_loss, whole_grad = loss_and_grad(logp, old, adv, mask, aggregation, options)

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
        loss, g = loss_and_grad(logp[part], old[part], adv[lo:hi], mask[part], aggregation, options, normalizer=normalizer)
        total += loss
        grad[part] += g
    torch.testing.assert_close(total, whole_loss)
    torch.testing.assert_close(grad, whole_grad)


@settings(max_examples=80, deadline=None)
@given(batches())
def test_vectorised_loss_matches_loop_reference(batch):
    logp, old, adv, mask, aggregation, options = batch
    ref = logp - 0.3 if options["kl_coef"] else None
    entropy = fake_entropy(logp) if options["entropy_coef"] else None
    settings = LossSettings(aggregation=aggregation, max_completion_length=8, clip_high=0.28, **options)
    loss, _ = policy_loss(logp, old, adv, mask, settings, ref_logp=ref, entropy=entropy)
    expected = loop_reference(logp, old, adv, mask, 0.2, 0.28, aggregation, 8, ref=ref, entropy=entropy, **options)
    assert float(loss) == pytest.approx(expected, rel=1e-4, abs=1e-5)
