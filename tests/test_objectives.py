"""The objectives added since GRPO (issue 38), each against hand-worked values, an independent
reference and the update itself: the importance weights' modes (truncate or mask) and lower bound
at token and sequence level; DeepSeek-V3.2's off-policy sequence mask (a dropped completion gives
exactly the gradient of the batch where its surrogate is zero); the top-entropy token quantile
(exact across micro-batches); GDPO's per-term normalisation; PKPO's estimator (against brute force
over subsets); adaptive entropy control. The defaults leave today's update as it was."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlvr.algorithms import off_policy_sequence_mask, truncated_is_weights
from rlvr.config import AlgoConfig, ConfigError, load_config


def test_modes_and_floor_hand_worked():
    # ratios pi_old / pi_sampler per token: e^0.5, e^-1, e^2, (padding)
    old = torch.tensor([[0.0, -1.0, 1.0, 5.0]])
    sampler = torch.tensor([[-0.5, 0.0, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    e = math.exp
    w, cut = truncated_is_weights(old, sampler, mask, cap=3.0, floor=0.5)  # truncate into [0.5, 3]
    assert w.tolist()[0] == pytest.approx([e(0.5), 0.5, 3.0, 0.0]) and cut.tolist() == [[False, True, True, False]]
    w, cut = truncated_is_weights(old, sampler, mask, cap=3.0, floor=0.5, mode="mask")  # outside [0.5, 3]: 0
    assert w.tolist()[0] == pytest.approx([e(0.5), 0.0, 0.0, 0.0]) and cut.tolist() == [[False, True, True, False]]
    w, _ = truncated_is_weights(old, sampler, mask, cap=3.0, mode="mask")  # no floor: only the cap masks
    assert w.tolist()[0] == pytest.approx([e(0.5), e(-1.0), 0.0, 0.0])
    # sequence level: one ratio e^(0.5 - 1 + 2) = e^1.5 ~ 4.48 for the whole completion
    w, _ = truncated_is_weights(old, sampler, mask, cap=10.0, level="sequence", mode="mask")
    assert w.tolist()[0] == pytest.approx([e(1.5)] * 3 + [0.0])
    w, cut = truncated_is_weights(old, sampler, mask, cap=3.0, level="sequence", mode="mask")
    assert w.tolist()[0] == [0.0] * 4 and cut.tolist() == [[True, True, True, False]]
    w, _ = truncated_is_weights(old, sampler, mask, cap=10.0, floor=0.9, level="sequence")
    assert w.tolist()[0] == pytest.approx([e(1.5)] * 3 + [0.0])


def reference_weights(old, sampler, mask, cap, floor, level, mode):
    """TRL's description, written out plainly: ratio = exp(old - sampler) per token (or exp of the row's summed
    log-ratio); truncate = clamp(ratio, floor, cap); mask = ratio where floor <= ratio <= cap, else 0."""
    out = torch.zeros_like(old)
    for b in range(old.shape[0]):
        logs = [float(old[b, t] - sampler[b, t]) if mask[b, t] else 0.0 for t in range(old.shape[1])]
        row = [sum(logs)] * len(logs) if level == "sequence" else logs
        for t, x in enumerate(row):
            if not mask[b, t]:
                continue
            r = math.exp(min(x, 50.0))
            lo = floor if floor > 0 else -math.inf
            out[b, t] = min(max(r, lo), cap) if mode == "truncate" else (r if lo <= r <= cap else 0.0)
    return out


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("mode", ["truncate", "mask"])
@pytest.mark.parametrize("floor", [0.0, 0.6])
def test_weights_equal_an_independent_reference(level, mode, floor):
    g = torch.Generator().manual_seed(11)
    old = torch.randn(6, 9, generator=g) * 0.3
    sampler = old + torch.randn(6, 9, generator=g) * 0.4
    mask = (torch.rand(6, 9, generator=g) > 0.2).long()
    mask[0] = 0  # an empty row
    w, _ = truncated_is_weights(old, sampler, mask, cap=2.0, floor=floor, level=level, mode=mode)
    torch.testing.assert_close(w, reference_weights(old, sampler, mask, 2.0, floor, level, mode), rtol=1e-5, atol=1e-6)


def test_off_policy_sequence_mask_hand_worked():
    # per-row mean of (sampler - current) over real tokens: 0.25, 1.0, 1.0, 0.0 (padding ignored)
    logp = torch.tensor([[-1.0, -1.5, -9.0], [-2.0, -2.0, 0.0], [-2.0, -2.0, 0.0], [-1.0, -1.0, -1.0]])
    sampler = torch.tensor([[-1.0, -1.0, 0.0], [-1.0, -1.0, 0.0], [-1.0, -1.0, 0.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0], [1, 1, 1]])
    adv = torch.tensor([-1.0, -1.0, 0.5, -2.0])
    keep = off_policy_sequence_mask(logp, sampler, mask, adv, threshold=0.5)
    assert keep.tolist() == [True, False, True, True]  # dropped: negative advantage and KL 1.0 > 0.5
    assert off_policy_sequence_mask(logp, sampler, mask, adv, threshold=1.0).tolist() == [True] * 4


def test_config_refuses_what_it_cannot_honour():
    with pytest.raises(ConfigError, match="algo.tis_floor"):
        load_config(overrides=["algo.tis_cap=2", "algo.tis_floor=1.5"])
    with pytest.raises(ConfigError, match="algo.tis_mode"):
        load_config(overrides=["algo.tis_mode=\"mask\""])  # no cap: nothing to shape
    with pytest.raises(ConfigError, match="algo.off_policy_mask"):
        load_config(overrides=["algo.off_policy_mask=-1"])
    assert AlgoConfig().off_policy_mask == 0.0 and AlgoConfig().tis_mode == "truncate"


def test_a_masked_completion_gives_the_gradient_of_its_zero_surrogate():
    """Through rl_update on a real model: with off-policy sequence masking, the gradient equals that of the same batch
    with the dropped completions' advantages set to 0 (the same denominator: masking removes a completion's surrogate,
    not its tokens from the normaliser), and with masking off it is the unmasked batch's."""
    from rlvr.models import build_char_tokenizer, build_tiny_model
    from rlvr.config import TinyModelConfig
    from rlvr.rollout import Sampler
    from rlvr.sampling import Sampling
    from rlvr.update import UpdateSettings, rl_update

    tok = build_char_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64), 0)
    sampler = Sampler(model, tok, Sampling(max_new_tokens=8, temperature=1.0))
    rollouts = sampler.sample(["1+2=", "3*4="], 4, torch.Generator().manual_seed(0)).rollouts
    # the sampler "was" far more confident on rows 1 and 5 than the policy now is: their KL estimate is 2 nats a token
    rollouts.sample_logp_BT = rollouts.sample_logp_BT + torch.tensor([0, 2.0, 0, 0, 0, 2.0, 0, 0]).unsqueeze(1) * rollouts.completion_mask_BT
    adv = torch.tensor([0.5, -1.0, 0.5, 0.0, -0.5, 1.0, 0.2, -0.2])  # row 1 dropped (A < 0); row 5 kept (A > 0)

    def grads(off_policy_mask, advantages):
        m = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64), 0)
        m.load_state_dict(model.state_dict())
        algo = AlgoConfig(aggregation="token_mean", off_policy_mask=off_policy_mask)
        st = UpdateSettings.from_algo(algo, temperature=1.0, max_new_tokens=8, micro_batch_size=3, max_grad_norm=0.0)
        opt = torch.optim.SGD(m.parameters(), lr=0.0)
        out = rl_update(m, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), rollouts, advantages, st)
        return {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}, out

    masked, out = grads(0.5, adv)
    expected, _ = grads(0.0, torch.where(torch.arange(8) == 1, 0.0, adv))
    plain, _ = grads(0.0, adv)
    for name in masked:
        torch.testing.assert_close(masked[name], expected[name], rtol=1e-5, atol=1e-6 * float(expected[name].abs().max()) + 1e-9)  # fp32 order: CPUs differ
    assert any(not torch.allclose(masked[n], plain[n]) for n in masked)
    forwarded = adv != 0  # with no KL or entropy term, a zero-advantage completion is not forwarded at all
    share = float(rollouts.completion_mask_BT[1].sum() / rollouts.completion_mask_BT[forwarded].sum())
    assert out["loss/off_policy_masked_frac"] == pytest.approx(share, rel=1e-5)


def test_high_entropy_mask_at_several_quantiles_hand_worked():
    from rlvr.algorithms import entropy_threshold, high_entropy_mask

    entropy = torch.tensor([[0.1, 0.2, 0.3, 9.0], [0.4, 0.5, 0.6, 0.7]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    values = entropy[mask.bool()]  # 0.1 .. 0.7, seven tokens; padding's 9.0 never counts
    for q, kept in ((1.0, 7), (0.5, 4), (0.2, 2), (0.01, 1)):
        threshold = entropy_threshold(values, q)
        keep = high_entropy_mask(entropy, mask, threshold)
        assert int(keep.sum()) == kept, q
        assert not keep[0, 3]
    assert entropy_threshold(values, 0.5) == pytest.approx(0.4)  # the median of 0.1 .. 0.7


def _tiny():
    from rlvr.config import TinyModelConfig
    from rlvr.models import build_char_tokenizer, build_tiny_model

    tok = build_char_tokenizer()
    return tok, build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64), 0)


def _grads(model, rollouts, advantages, micro_batch_size, **algo):
    from rlvr.update import UpdateSettings, rl_update

    settings = UpdateSettings.from_algo(AlgoConfig(**algo), temperature=1.0, max_new_tokens=8, micro_batch_size=micro_batch_size,
                                        max_grad_norm=0.0)
    for p in model.parameters():
        p.grad = None
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    out = rl_update(model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), rollouts, advantages, settings)
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, out


def test_top_entropy_training_is_exact_across_micro_batches_and_equals_its_reference():
    """The threshold is the whole batch's (one no-grad forward first): micro-batches of 1, 3 and all rows give one
    gradient, equal to the whole-batch loss with the surrogate weighted by the high-entropy mask computed
    independently; quantile 1.0 is today's update bit for bit."""
    from rlvr.algorithms import LossSettings, entropy_threshold, high_entropy_mask, policy_loss
    from rlvr.logprobs import completion_logprobs
    from rlvr.rollout import Sampler
    from rlvr.sampling import Sampling

    tok, model = _tiny()
    rollouts = Sampler(model, tok, Sampling(max_new_tokens=8, temperature=1.0)).sample(["1+2=", "3*4="], 4, torch.Generator().manual_seed(0)).rollouts
    adv = torch.tensor([0.5, -1.0, 0.5, 0.3, -0.5, 1.0, 0.2, -0.2])
    got = [_grads(model, rollouts, adv, mbs, top_entropy_quantile=0.3, aggregation="token_mean")[0] for mbs in (1, 3, 8)]
    for other in got[1:]:
        for name in got[0]:
            torch.testing.assert_close(other[name], got[0][name], rtol=1e-5, atol=1e-6 * float(got[0][name].abs().max()) + 1e-9)  # fp32 order
    # the reference: one whole-batch loss, the mask from the batch's own entropies
    model.zero_grad(set_to_none=True)
    r = rollouts
    logp, entropy = completion_logprobs(model, r.prompt_ids_BP, r.prompt_mask_BP, r.completion_ids_BT, r.completion_mask_BT, with_entropy=True)
    mask = r.completion_mask_BT.bool()
    keep = high_entropy_mask(entropy.detach(), mask, entropy_threshold(entropy.detach()[mask], 0.3))
    assert 0 < int(keep.sum()) < int(mask.sum())
    loss, _ = policy_loss(logp, logp.detach(), adv, r.completion_mask_BT, LossSettings(aggregation="token_mean"), is_weights=keep.float())
    loss.backward()
    for name, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(got[0][name], p.grad, rtol=1e-4, atol=1e-6)
    today, _ = _grads(model, rollouts, adv, 3)
    same, out = _grads(model, rollouts, adv, 3, top_entropy_quantile=1.0)
    assert all(torch.equal(today[n], same[n]) for n in today) and "loss/top_entropy_kept_frac" not in out
    _, out = _grads(model, rollouts, adv, 3, top_entropy_quantile=0.3)
    assert out["loss/top_entropy_kept_frac"] == pytest.approx(0.3, abs=0.1)


def test_gdpo_normalises_each_term_within_its_group_before_summing():
    """reward.aggregation = "normalize_then_sum" against TRL's formula written out plainly, with a missing value; the
    default ("sum") is the weighted sum as before."""
    from rlvr.config import RewardConfig
    from rlvr.data import Example
    from rlvr.reward import RewardTerm, group_normalized, score_completions

    correct = [1.0, 0.0, 1.0, 1.0]  # group 1: one right of two; group 2: both right (no spread)
    short = [0.9, 0.1, 0.2, None]  # a second term with a missing value in group 2

    def first(c, a):
        return correct[int(a)]

    def second(c, a):
        return short[int(a)]

    terms = [RewardTerm("first", 1.0, first, False, correctness=True), RewardTerm("second", 0.5, second, False)]
    examples = [Example("p", str(i)) for i in range(4)]
    gdpo = score_completions(terms, RewardConfig(aggregation="normalize_then_sum"), ["p"] * 4, ["x"] * 4, examples, [1] * 4, 8,
                             group_size=2)
    s = math.sqrt(0.5)  # the unbiased std of {1, 0}
    eps = 1e-4
    first_n = [0.5 / (s + eps), -0.5 / (s + eps), 0.0, 0.0]
    second_n = [0.4 / (math.sqrt(0.32) + eps), -0.4 / (math.sqrt(0.32) + eps), 0.0, None]  # group 2: one present value -> 0
    expected = [f + 0.5 * (v or 0.0) for f, v in zip(first_n, second_n)]
    assert gdpo.total_B.tolist() == pytest.approx(expected, rel=1e-5)
    plain = score_completions(terms, RewardConfig(), ["p"] * 4, ["x"] * 4, examples, [1] * 4, 8)
    assert plain.total_B.tolist() == pytest.approx([1.45, 0.05, 1.1, 1.0])
    assert gdpo.correct_B.tolist() == plain.correct_B.tolist()  # correctness is the verdict, whatever RL trains on
    with pytest.raises(ValueError, match="group_size"):
        score_completions(terms, RewardConfig(aggregation="normalize_then_sum"), ["p"] * 4, ["x"] * 4, examples, [1] * 4, 8)
    assert torch.isnan(group_normalized(torch.tensor([1.0, float("nan")]), 2)[1])


def brute_force_pkpo(rewards, k):
    """PKPO's s^(loo-1) by its definition: over every k-subset holding i, max(I) - max(I without i), over C(n, k)."""
    import itertools

    n = len(rewards)
    out = []
    for i in range(n):
        total = 0.0
        for subset in itertools.combinations(range(n), k):
            if i in subset:
                rest = [rewards[j] for j in subset if j != i]
                total += max(rewards[j] for j in subset) - (max(rest) if rest else 0.0)
        out.append(total / math.comb(n, k))
    return out


@pytest.mark.parametrize("n, k", [(4, 2), (5, 3), (6, 6), (8, 4), (7, 2)])
def test_pkpo_weights_equal_brute_force_over_subsets(n, k):
    from rlvr.algorithms import pass_at_k_weights

    g = torch.Generator().manual_seed(n * 10 + k)
    for rewards in (torch.rand(n, generator=g).tolist(), (torch.rand(n, generator=g) > 0.6).float().tolist(),
                    [0.5] * (n - 1) + [1.0]):  # continuous, binary, ties
        assert pass_at_k_weights(rewards, k) == pytest.approx(brute_force_pkpo(rewards, k), abs=1e-12)


def test_pkpo_advantages_in_the_loop_shape():
    """Binary rewards, G = 4, k = 2: the rarer a right answer in its group, the larger its advantage (pass@k rewards
    finding one), a wrong one gets 0, all-equal groups and missing rewards 0; k = 1 is today's advantages."""
    from rlvr.algorithms import compute_advantages

    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, float("nan"), 0.0, 0.0])
    adv = compute_advantages(r, 4, std_scale="none", pass_at_k=2)
    assert adv[:4].tolist() == pytest.approx([0.5, 0.0, 0.0, 0.0])
    assert adv[4:8].tolist() == pytest.approx([1 / 6, 1 / 6, 1 / 6, 0.0])
    assert adv[8:12].tolist() == [0.0] * 4
    assert adv[12:].tolist() == pytest.approx([2 / 3, 0.0, 0.0, 0.0])  # three present: k = 2 of n = 3
    assert torch.equal(compute_advantages(r, 4, pass_at_k=1), compute_advantages(r, 4))
    with pytest.raises(ConfigError, match="algo.pass_at_k"):
        load_config(overrides=["algo.pass_at_k=9", "rollout.group_size=8"])


def test_adaptive_entropy_control_steps_the_coefficient_and_resumes(tmp_path):
    """The learner applies the bonus while the last measured entropy is at or below the target, steps the
    coefficient after each update from the entropy the update measured, and keeps both in its trainer state."""
    from rlvr.algorithms import adapt_entropy_coef
    from rlvr.config import Config
    from rlvr.learner import LocalLearner
    from rlvr.rollout import Sampler
    from rlvr.sampling import Sampling

    assert adapt_entropy_coef(0.5, 0.1, 0.2, 0.3, 0.0, 0.6) == 0.6  # capped at the maximum
    assert adapt_entropy_coef(0.1, 0.3, 0.2, 0.3, 0.0, 1.0) == 0.0  # floored at the minimum
    tok, model = _tiny()
    rollouts = Sampler(model, tok, Sampling(max_new_tokens=8, temperature=1.0)).sample(["1+2=", "3*4="], 4, torch.Generator().manual_seed(0)).rollouts
    adv = torch.tensor([0.5, -1.0, 0.5, 0.3, -0.5, 1.0, 0.2, -0.2])
    include = torch.ones(8, dtype=torch.bool)

    def learner(target):
        cfg = load_config(overrides=["algo.entropy_adaptive=true", "algo.entropy_coef=0.01", f"algo.entropy_target={target}",
                                     "algo.entropy_coef_delta=0.004", "rollout.max_new_tokens=8", "train.lr=1e-6"])
        return LocalLearner(model, tok, cfg)

    high = learner(100.0)  # the entropy (~4.6 nats on a fresh model) is below the target: the bonus acts and grows
    out = high.update(rollouts, adv, include)
    assert out["loss/entropy_coef"] == 0.01 and out["loss/entropy"] > 1.0
    assert high.entropy_control.coef == pytest.approx(0.014) and high.entropy_control.last == pytest.approx(out["loss/entropy"])
    low = learner(0.5)  # above the target: the coefficient falls, and the next update applies no bonus
    low.update(rollouts, adv, include)
    assert low.entropy_control.coef == pytest.approx(0.006)
    assert low.update(rollouts, adv, include)["loss/entropy_coef"] == 0.0 and low.entropy_control.coef == pytest.approx(0.002)
    state = low.trainer_state()
    again = learner(0.5)
    again.load_trainer_state(state)
    assert again.entropy_control.state() == low.entropy_control.state()
    torch.save(state, tmp_path / "trainer.pt")
    assert torch.load(tmp_path / "trainer.pt", weights_only=True)["entropy_control"]["coef"] == low.entropy_control.coef
    # Learner ranks run it too, and top-entropy training and on-policy distillation (tests/test_learner_group.py).
    assert load_config(overrides=["algo.entropy_adaptive=true", "algo.top_entropy_quantile=0.2", "distill.on_policy_coef=1.0",
                                  'distill.teacher="runs/t"', 'distributed.backend="ray"', "distributed.learner_workers=2"])


@pytest.mark.parametrize("outcome", ["ok", "truncated", "error", "timeout", "unknown_tool", "bad_arguments", "malformed"])
def test_tool_use_terms_judge_every_outcome(outcome):
    """tool_calls_ok / tool_used over the whole class of call outcomes: only a call that ran (ok, or ok with its
    output cut) succeeds; a rollout without calls is not scored by tool_calls_ok and gets 0 from tool_used."""
    from rlvr.rollout.tools import OUTCOMES
    from rlvr.verifiers.tool_use import tool_calls_ok, tool_used

    assert set(OUTCOMES) == {"ok", "truncated", "error", "timeout", "unknown_tool", "bad_arguments", "malformed"}
    ran = outcome in ("ok", "truncated")
    assert tool_calls_ok("", "", [{"outcome": outcome}]) == float(ran)
    assert tool_calls_ok("", "", [{"outcome": "ok"}, {"outcome": outcome}]) == float(ran)
    assert tool_used("", "", [{"outcome": outcome}]) == float(ran)
    assert tool_used("", "", [{"outcome": outcome}, {"outcome": "ok"}]) == 1.0
    assert tool_calls_ok("", "", []) is None and tool_used("", "", []) == 0.0


# ----------------------------------------------------------------------------- on-policy distillation


def test_the_distillation_term_joins_each_tokens_advantage_hand_worked():
    """One row of two tokens, ratio 1, token_mean: the loss is -mean_t(A + a_t) and its gradient in log pi_t is
    -(A + a_t) / 2; token advantages of 0 are the loss without them, bit for bit; padding never counts."""
    from rlvr.algorithms import LossSettings, distillation_advantages, policy_loss

    settings = LossSettings(aggregation="token_mean")
    logp = torch.tensor([[-1.0, -0.5, -3.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0]])
    taught = distillation_advantages(torch.tensor([[0.0, -2.5, 5.0]]), logp.detach(), mask, 1.0)  # teacher - student
    assert taught.tolist() == [[1.0, -2.0, 0.0]]
    loss, _ = policy_loss(logp, logp.detach(), torch.tensor([0.5]), mask, settings, token_advantages=taught)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(-((0.5 + 1.0) + (0.5 - 2.0)) / 2)
    assert logp.grad[0].tolist() == pytest.approx([-0.75, 0.75, 0.0])
    plain = policy_loss(logp, logp.detach(), torch.tensor([0.5]), mask, settings)[0]
    zero = policy_loss(logp, logp.detach(), torch.tensor([0.5]), mask, settings, token_advantages=torch.zeros(1, 3))[0]
    assert torch.equal(plain, zero)
    with pytest.raises(ValueError, match="token_advantages"):
        policy_loss(logp, logp.detach(), torch.tensor([0.5]), mask, settings, token_advantages=torch.zeros(3))


def _distill_grads(model, teacher, rollouts, advantages, micro_batch_size, coef=1.0, **algo):
    from rlvr.update import UpdateSettings, rl_update

    settings = UpdateSettings.from_algo(AlgoConfig(**algo), temperature=1.0, max_new_tokens=8, micro_batch_size=micro_batch_size,
                                        max_grad_norm=0.0)
    settings = dataclasses.replace(settings, distill_coef=coef)
    for p in model.parameters():
        p.grad = None
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    out = rl_update(model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), rollouts, advantages, settings, teacher=teacher)
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, out


def test_a_teacher_equal_to_the_student_gives_exactly_zero():
    """teacher == student: every per-token term is 0, so with no verifier advantage the gradient is exactly 0 (every
    row forwarded, none skipped), and beside verifier advantages it is the update without distillation."""
    import copy

    from rlvr.rollout import Sampler
    from rlvr.sampling import Sampling

    tok, model = _tiny()
    twin = copy.deepcopy(model).eval().requires_grad_(False)
    rollouts = Sampler(model, tok, Sampling(max_new_tokens=8, temperature=1.0)).sample(["1+2=", "3*4="], 4, torch.Generator().manual_seed(0)).rollouts
    grads, out = _distill_grads(model, twin, rollouts, torch.zeros(8), 3)
    assert grads and all(bool((g == 0).all()) for g in grads.values())
    assert out["loss/teacher_kl"] == 0.0 and out["loss/active_frac"] == 1.0 and out["loss/grad_norm"] == 0.0
    adv = torch.tensor([0.5, -1.0, 0.5, 0.3, -0.5, 1.0, 0.2, -0.2])
    taught, _ = _distill_grads(model, twin, rollouts, adv, 3)
    plain, _ = _grads(model, rollouts, adv, 3)
    for name in plain:
        torch.testing.assert_close(taught[name], plain[name], rtol=1e-5, atol=1e-6 * float(plain[name].abs().max()) + 1e-9)  # fp32 order


def test_on_policy_distillation_gradient_equals_an_independent_reference_across_micro_batches():
    """teacher != student: rl_update's gradient, at micro-batches of 1, 3 and all rows, equals the whole-batch loss
    -sum_t (A + c (log pi_T - sg log pi)) rho_t / N written out here with the two models' log-probs."""
    from rlvr.config import TinyModelConfig
    from rlvr.logprobs import completion_logprobs
    from rlvr.models import build_tiny_model
    from rlvr.rollout import Sampler
    from rlvr.sampling import Sampling

    tok, model = _tiny()
    teacher = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64), 7)
    teacher.eval().requires_grad_(False)
    r = Sampler(model, tok, Sampling(max_new_tokens=8, temperature=1.0)).sample(["1+2=", "3*4="], 4, torch.Generator().manual_seed(0)).rollouts
    adv = torch.tensor([0.5, 0.0, 0.5, 0.3, -0.5, 0.0, 0.2, -0.2])
    got = [_distill_grads(model, teacher, r, adv, mbs, coef=0.5, aggregation="token_mean") for mbs in (1, 3, 8)]
    model.zero_grad(set_to_none=True)
    mask = r.completion_mask_BT
    logp = completion_logprobs(model, r.prompt_ids_BP, r.prompt_mask_BP, r.completion_ids_BT, mask)
    with torch.no_grad():
        t_logp = completion_logprobs(teacher, r.prompt_ids_BP, r.prompt_mask_BP, r.completion_ids_BT, mask)
    per_token = (adv.unsqueeze(1) + 0.5 * (t_logp - logp.detach())) * torch.exp(logp - logp.detach())
    (-(per_token * mask).sum() / mask.sum()).backward()
    for grads, out in got:
        assert out["loss/teacher_kl"] == pytest.approx(float(((logp.detach() - t_logp) * mask).sum() / mask.sum()), rel=1e-4)
        for name, p in model.named_parameters():
            if p.grad is not None:
                torch.testing.assert_close(grads[name], p.grad, rtol=1e-4, atol=1e-6 * float(p.grad.abs().max()) + 1e-9)


def test_on_policy_distillation_settings_are_refused_where_they_cannot_work():
    with pytest.raises(ConfigError, match="distill.on_policy_coef"):
        load_config(overrides=["distill.on_policy_coef=1.0"])  # no teacher
    with pytest.raises(ConfigError, match="distill.verifier_advantage"):
        load_config(overrides=["distill.verifier_advantage=-1"])


def test_on_policy_distillation_refuses_settings_that_would_drop_or_blur_the_teachers_tokens():
    teacher = ['distill.on_policy_coef=1.0', 'distill.teacher="runs/t"']
    with pytest.raises(ConfigError, match="algo.ratio_level"):
        load_config(overrides=[*teacher, 'algo.ratio_level="sequence"'])
    with pytest.raises(ConfigError, match="algo.dynamic_sampling"):
        load_config(overrides=[*teacher, "distill.verifier_advantage=0", "algo.dynamic_sampling=true"])
    with pytest.raises(ConfigError, match="algo.kl_in"):
        load_config(overrides=[*teacher, "distill.verifier_advantage=0", "algo.beta=0.04", 'algo.kl_in="reward"'])
    load_config(overrides=[*teacher, "algo.dynamic_sampling=true"])  # beside verifier advantages, filtering groups is the user's choice


def test_a_token_the_teacher_rules_out_gives_a_bounded_advantage():
    from rlvr.algorithms import distillation_advantages

    out = distillation_advantages(torch.tensor([[float("-inf"), -1.0]]), torch.tensor([[-0.5, -1.0]]), torch.tensor([[1, 1]]), 1.0)
    assert out.tolist() == [[-20.0, 0.0]]
