"""Every preset runs, and its settings reach the math: the wiring, not only the formulas.

test_algorithms.py proves `policy_loss` and `compute_advantages` right; test_presets.py pins each
preset file's values. Here the loop and the update are checked to *use* them: the loss the update
computes (and its gradient) equals `policy_loss` called with the preset's settings on the same
batch, and the advantages the loop hands to the update are `compute_advantages` with the preset's
baseline and std scaling. Each check first proves it can fail: on the very batch it uses, dropping
any setting the preset changes (or swapping clip_low and clip_high) changes the expected value.
"""

import copy
import dataclasses
import json
import math

import pytest
import torch

from rlvr.algorithms import LossSettings, compute_advantages, policy_loss
from rlvr.config import load_config, preset_names
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import encode_prompts, generate
from rlvr.sampling import Sampling
from rlvr.logprobs import completion_logprobs
from rlvr.update import UpdateSettings, rl_update

TINY = [
    "model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.intermediate_size=64",
    "task.num_train=200", "task.num_eval=30", "rollout.max_new_tokens=8",
    "rollout.group_size=4", "rollout.prompts_per_step=3", "train.micro_batch_size=5", "run.threads=1",
]
# The presets, and points no preset reaches, so that every loss setting is exercised somewhere.
CASES = [[f"algo.preset={name}"] for name in preset_names()] + [
    ["algo.surrogate=cispo", "algo.clip_low=0.1", "algo.clip_high=0.3", "algo.aggregation=seq_mean_token_mean"],
    ["algo.dual_clip=1.2", "algo.entropy_coef=0.05", "algo.beta=0.1", "algo.kl_estimator=k2", "algo.ratio_level=sequence",
     "algo.clip_high=0.1", "algo.aggregation=constant"],
]
L = 8  # max_new_tokens


def loss_settings(algo) -> LossSettings:
    """What the update must pass to policy_loss for these settings, spelled out independently."""
    return LossSettings(
        surrogate=algo.surrogate, ratio_level=algo.ratio_level, clip_low=algo.clip_low, clip_high=algo.clip_high,
        dual_clip=algo.dual_clip or None, aggregation=algo.aggregation, max_completion_length=L,
        kl_coef=algo.beta if algo.kl_in == "loss" else 0.0, kl_estimator=algo.kl_estimator, entropy_coef=algo.entropy_coef,
    )


def a_batch(model, tokenizer):
    """12 sampled completions, ragged, with stale old log-probs (ratios spread across every clip range),
    advantages of both signs, none zero (so every row is forwarded)."""
    prompts = [p for p in ["1+2=", "3*4-5=", "9-8+7*6="] for _ in range(4)]
    ids, mask = encode_prompts(tokenizer, prompts, torch.device("cpu"))
    rollouts = generate(model, ids, mask, Sampling(max_new_tokens=L), eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                        generator=torch.Generator().manual_seed(3))
    # An untrained model rarely stops early: cut the completions to ragged lengths (the aggregations differ then).
    keep_BT = torch.arange(L).unsqueeze(0) < torch.tensor([8, 3, 5, 1, 6, 8, 2, 7, 4, 8, 5, 3]).unsqueeze(1)
    rollouts.completion_ids_BT = torch.where(keep_BT, rollouts.completion_ids_BT, tokenizer.pad_token_id)
    rollouts.completion_mask_BT = keep_BT.long()
    with torch.no_grad():
        logp = completion_logprobs(model, rollouts.prompt_ids_BP, rollouts.prompt_mask_BP, rollouts.completion_ids_BT,
                                   rollouts.completion_mask_BT)
    # log pi - log pi_old per row, chosen so that each setting binds somewhere: with A from -1.5 to 1.3,
    # rho 1.65 at A = -1.5 (dual clip 1.2), 0.61 (clip_low), 0.78 (between 1 - 0.28 and 1 - 0.2),
    # 1.16 (between 1.1 and 1.2), 1.25 (between 1.2 and 1.28); the odd rows sit just inside or outside
    # GSPO's 1 - 4e-4 .. 1 + 4e-4 (exp(+-3.5e-4) lies between its swapped and unswapped bounds).
    log_ratio_B1 = torch.tensor([0.5, 3.5e-4, -0.5, -3.5e-4, -0.25, 2e-4, 0.15, -2e-4, 0.22, 3.5e-4, 0.15, -3.5e-4]).unsqueeze(1)
    jitter_BT = (torch.rand(logp.shape, generator=torch.Generator().manual_seed(4)) - 0.5) * 0.1 * torch.tensor([1.0, 0.0] * 6).unsqueeze(1)
    noise = -(log_ratio_B1 + jitter_BT)
    rollouts.sample_logp_BT = torch.where(rollouts.completion_mask_BT.bool(), logp + noise, 0.0)
    return rollouts, torch.linspace(-1.5, 1.3, 12)


def expected_loss(model, reference, rollouts, adv, settings):
    """policy_loss on the whole batch in one call: (loss, gradient, metrics)."""
    model = copy.deepcopy(model)
    args = (rollouts.prompt_ids_BP, rollouts.prompt_mask_BP, rollouts.completion_ids_BT, rollouts.completion_mask_BT)
    logp, entropy = completion_logprobs(model, *args, with_entropy=True)
    ref = None
    if settings.kl_coef:
        with torch.no_grad():
            ref = completion_logprobs(reference, *args)
    loss, metrics = policy_loss(logp, rollouts.sample_logp_BT, adv, rollouts.completion_mask_BT, settings, ref_logp=ref,
                                entropy=entropy if settings.entropy_coef else None)
    loss.backward()
    return loss.detach(), torch.cat([p.grad.flatten() for p in model.parameters()]), metrics


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest difference relative to the largest entry of b."""
    return float((a - b).abs().max() / b.abs().max())


def mutations(settings: LossSettings, algo) -> dict[str, dict]:
    """The changes to the settings that drop one setting (back to LossSettings' default; not those the
    others make inert: L_max outside the constant aggregation, the KL estimator without a KL term),
    or swap the clip bounds, or move a reward-side KL into the loss."""
    values, defaults = dataclasses.asdict(settings), dataclasses.asdict(LossSettings())
    inert = {"max_completion_length": settings.aggregation != "constant", "kl_estimator": not settings.kl_coef}
    out = {f"drop {k}": {k: defaults[k]} for k in values if values[k] != defaults[k] and not inert.get(k)}
    if settings.clip_low != settings.clip_high:
        out["swap clips"] = {"clip_low": settings.clip_high, "clip_high": settings.clip_low}
    if algo.beta and algo.kl_in == "reward":  # the KL belongs in the reward, not in the loss
        out["KL in the loss"] = {"kl_coef": algo.beta}
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: " ".join(o.split("=", 1)[1] if "preset" in o else o[5:] for o in c))
def test_the_update_computes_policy_loss_with_the_configured_settings(case):
    # num_iterations 2 with the sampler's (stale) log-probs as the old policy: the ratios are not 1,
    # so the clip settings matter; an optimizer with lr 0 leaves both passes on the same weights.
    cfg = load_config(overrides=TINY + case + ["algo.num_iterations=2", "algo.reuse_sampling_logp=true"])
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, cfg.model.tiny, seed=0)
    reference = build_tiny_model(tokenizer, cfg.model.tiny, seed=1).eval()  # far from the policy: KL terms are large
    rollouts, adv = a_batch(model, tokenizer)
    settings = loss_settings(cfg.algo)
    loss, grad, metrics = expected_loss(model, reference, rollouts, adv, settings)

    # This batch tells every setting the case changes apart (else this test could not fail): each
    # change moves the loss or the gradient ten times further than the update is allowed to.
    for what, changes in mutations(settings, cfg.algo).items():
        try:
            other_loss, other_grad, _ = expected_loss(model, reference, rollouts, adv, dataclasses.replace(settings, **changes))
        except ValueError:
            continue  # e.g. constant aggregation without max_completion_length: a dropped setting that raises
        assert max(gap(other_loss, loss), gap(other_grad, grad) / 10) > 1e-5, what

    policy = copy.deepcopy(model).train()
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    update_settings = UpdateSettings.from_algo(cfg.algo, temperature=1.0, max_new_tokens=L, micro_batch_size=cfg.train.micro_batch_size,
                                               max_grad_norm=0.0)  # the config -> settings mapping is under test too
    out = rl_update(policy, optimizer, scheduler, rollouts, adv, update_settings, reference=reference)
    assert out["loss/forwards"] > 1  # micro-batched, with the whole batch's normaliser
    assert gap(torch.tensor(out["loss/policy"]), loss) < 1e-6  # seen: up to 3e-7 (float rounding of the micro-batch sums)
    assert gap(torch.cat([p.grad.flatten() for p in policy.parameters()]), grad) < 1e-5  # seen: up to 4e-7
    assert out["loss/grad_norm"] == pytest.approx(float(grad.norm()), rel=1e-4)
    assert out["loss/clip_frac"] == pytest.approx(float(metrics["loss/clip_frac"]), abs=1e-6)
    assert 0.0 < float(metrics["loss/clip_frac"]) < 1.0


def digit_share(completion: str, answer: str) -> float:
    """A dense stand-in reward for an untrained model: the share of digits (every group has signal)."""
    return sum(ch.isdigit() for ch in completion) / max(len(completion), 1)


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_trains_end_to_end_and_the_loop_uses_its_advantages(tmp_path, tiny_grpo, preset):
    cfg = load_config(overrides=TINY + [f"algo.preset={preset}", "train.steps=2", "train.lr=1e-3", "train.warmup_steps=1",
                                        "train.log_samples_every=1"])
    records, model, before = tiny_grpo(cfg, "digits", digit_share)
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert math.isfinite(r["loss/policy"]) and r["loss/grad_norm"] > 0 and r["loss/skipped_nonfinite"] == 0
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters())

    # samples.jsonl holds each step's first two groups with the rewards the advantages came from
    # (KL-in-reward included): they must be compute_advantages of them with the preset's settings.
    G, algo = cfg.rollout.group_size, cfg.algo
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    for step in (1, 2):
        rows = [s for s in samples if s["step"] == step]
        assert len(rows) == 2 * G
        rewards = torch.tensor([s["reward"] for s in rows])
        logged = torch.tensor([s["advantage"] for s in rows])
        expected = compute_advantages(rewards, G, baseline=algo.baseline, std_scale=algo.std_scale, eps=algo.adv_eps)
        torch.testing.assert_close(logged, expected, rtol=1e-5, atol=1e-6)
        for other in ({"baseline": "leave_one_out" if algo.baseline == "group_mean" else "group_mean", "std_scale": algo.std_scale},
                      {"baseline": algo.baseline, "std_scale": "none" if algo.std_scale == "group" else "group"}):
            assert not torch.allclose(logged, compute_advantages(rewards, G, eps=algo.adv_eps, **other), rtol=1e-3), other
