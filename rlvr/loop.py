"""The RL loop: per step, rollout -> verify -> (filter) -> advantages -> update, then log.

    for step in range(train.steps):
        prompts   = next prompts_per_step problems, each repeated G times
        rollouts  = generate(policy, prompts)                          (1) rollout/
        rewards   = weighted reward terms per completion               (2) reward.py, verifiers/
        (dynamic sampling: drop all-equal groups, sample again until the batch is full)
        (KL in reward: rewards -= beta * KL(completion))
        adv       = compute_advantages(rewards, G, ...)                (3) algorithms/advantage.py
        metrics   = rl_update(policy, rollouts, adv, ...)              (4, 5) algorithms/loss.py, update.py
        write one metrics line; sometimes sample completions
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.algorithms import compute_advantages, group_stats, informative_groups
from rlvr.checkpoint import (
    CheckpointError,
    fault_point,
    load_trainer,
    load_weights,
    read_state,
    restore_rng_state,
    rng_state,
    save_checkpoint,
    step_name,
)
from rlvr.config import AlgoConfig, Config, to_toml
from rlvr.data import Example, format_prompt
from rlvr.metrics import JsonlWriter, PhaseBar, rewind_jsonl
from rlvr.models import reference_for
from rlvr.reward import RewardError, RewardTerm, Scores, score_completions
from rlvr.rollout import Rollouts, concat_rollouts, decode_completions, encode_prompts, generate
from rlvr.update import rl_update, sequence_kl_to_reference


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss keeps turning NaN); a checkpoint of the last good state exists."""


class PromptStream:
    """Endless shuffled passes over the training problems (a new order each epoch, from the seed)."""

    def __init__(self, examples: list[Example], seed: int):
        self.examples, self.rng, self.order = examples, random.Random(f"prompts:{seed}"), []

    def state(self) -> dict:
        """Where the stream is: its RNG and the rest of the current epoch's order (exact resume)."""
        return {"rng": self.rng.getstate(), "order": list(self.order)}

    def set_state(self, state: dict) -> None:
        self.rng.setstate(state["rng"])
        self.order = list(state["order"])

    def take(self, n: int) -> list[Example]:
        batch = []
        while len(batch) < n:
            if not self.order:
                self.order = list(range(len(self.examples)))
                self.rng.shuffle(self.order)
            batch.append(self.examples[self.order.pop()])
        return batch


@dataclass
class Sampled:
    """Completions of some prompts, G consecutive rows per prompt, with their rewards."""

    examples: list[Example]  # one per completion
    rollouts: Rollouts
    texts: list[str]
    rewards_B: torch.Tensor  # weighted sum of the reward terms; NaN = missing
    correct_B: torch.Tensor  # the correctness verifier's score (the first reward term); NaN = missing

    def rows(self, rows: torch.Tensor) -> "Sampled":
        return Sampled(
            [self.examples[i] for i in rows.tolist()], self.rollouts.select(rows), [self.texts[i] for i in rows.tolist()],
            self.rewards_B[rows], self.correct_B[rows],
        )


@dataclass
class StepSamples:
    """Everything one step generated, and the training batch chosen from it."""

    batch: Sampled | None  # prompts_per_step groups; fewer, or None, if dynamic sampling ran out of rounds
    scores: Scores  # of every completion generated this step (what the step's reward metrics describe)
    generated: list[Rollouts]  # every round's rollouts
    rounds: int
    dropped_groups: int
    generate_s: float
    verify_s: float


def collect_batch(
    sample_round: Callable[[], tuple[Sampled, Scores, float, float]],
    prompts_per_step: int,
    G: int,
    algo: AlgoConfig,
    pad_id: int,
) -> StepSamples:
    """One generation round, or, with DAPO dynamic sampling (Yu et al. 2025, sec. 3.2), rounds
    until prompts_per_step groups with signal are kept (at most algo.max_sampling_rounds).
    As in the paper (eq. 11: 0 < #correct < G) a group is dropped when its *correctness* scores
    are all equal: all right or all wrong. Filtering on the shaped total instead would keep an
    all-correct group whose only spread is a small overlong or KL term, and std scaling would
    blow that spread up to full-size advantages. Surplus groups of the last round are dropped."""
    kept: list[Sampled] = []
    all_scores, generated = [], []
    gen_s = verify_s = 0.0
    rounds = dropped = 0
    while True:
        rounds += 1
        sampled, scores, g_s, v_s = sample_round()
        all_scores.append(scores)
        generated.append(sampled.rollouts)
        gen_s, verify_s = gen_s + g_s, verify_s + v_s
        if not algo.dynamic_sampling:
            kept.append(sampled)
            break
        keep_N = informative_groups(sampled.correct_B, G)
        dropped += int((~keep_N).sum())
        if keep_N.any():
            kept.append(sampled.rows(torch.nonzero(keep_N.repeat_interleave(G)).squeeze(1)))
        if sum(len(k.texts) for k in kept) >= prompts_per_step * G or rounds >= algo.max_sampling_rounds:
            break
    batch = None
    if kept:
        batch = Sampled(
            [e for k in kept for e in k.examples], concat_rollouts([k.rollouts for k in kept], pad_id),
            [t for k in kept for t in k.texts], torch.cat([k.rewards_B for k in kept]), torch.cat([k.correct_B for k in kept]),
        )
        batch = batch.rows(torch.arange(min(len(batch.texts), prompts_per_step * G)))
    return StepSamples(batch, Scores.merge(all_scores), generated, rounds, dropped, gen_s, verify_s)


def grpo_train(
    policy: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: list[Example],
    cfg: Config,
    reward_terms: list[RewardTerm],
    run_dir: Path,
    bar: PhaseBar,
    resume_from: Path | None = None,
) -> list[dict]:
    """Train `policy` in place for cfg.train.steps; returns the per-step metric records.

    `policy` must hold the RL starting weights (the KL reference is anchored to them); with
    `resume_from` (a complete step checkpoint) the policy, optimizer, scheduler, prompt stream and
    every RNG continue from it, so the remaining steps are those of an uninterrupted run."""
    device = next(policy.parameters()).device
    G, rc, tc, ac = cfg.rollout.group_size, cfg.rollout, cfg.train, cfg.algo
    reference = reference_for(policy) if ac.beta > 0 else None  # none at beta = 0: no memory, no forward
    trainable = [p for p in policy.parameters() if p.requires_grad]  # with LoRA: the adapters only
    optimizer = torch.optim.AdamW(trainable, lr=tc.lr, betas=(0.9, 0.99), weight_decay=tc.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, tc.warmup_steps)))
    stream = PromptStream(examples, cfg.run.seed)
    generator = torch.Generator(device=device).manual_seed(cfg.run.seed)
    if cfg.model.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    policy.train()
    checkpoints = run_dir / "checkpoints"

    def save(step: int) -> None:
        trainer = {
            "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "stream": stream.state(), "rng": rng_state(generator),
        }
        save_checkpoint(
            checkpoints, step_name(step), policy=policy, trainer=trainer, state={"step": step, "bad_streak": bad_streak},
            config_text=to_toml(cfg).lstrip("\n"), keep_last=cfg.checkpoint.keep_last,
        )

    start, bad_streak = 0, 0
    if resume_from is not None:
        load_weights(resume_from, policy)
        trainer = load_trainer(resume_from)
        optimizer.load_state_dict(trainer["optimizer"])
        scheduler.load_state_dict(trainer["scheduler"])
        stream.set_state(trainer["stream"])
        restore_rng_state(trainer["rng"], generator)
        state = read_state(resume_from)
        start, bad_streak = state["step"], state["bad_streak"]
    try:
        records = rewind_jsonl(run_dir / "metrics.jsonl", start)  # steps after the checkpoint are redone
        rewind_jsonl(run_dir / "samples.jsonl", start)
    except ValueError as err:
        raise CheckpointError(f"cannot resume: {err}") from None
    if len(records) != start or [r["step"] for r in records] != list(range(1, start + 1)):
        raise CheckpointError(f"{run_dir / 'metrics.jsonl'} does not hold steps 1..{start} of checkpoint {resume_from}; cannot resume cleanly")
    for _ in range(start):
        bar.advance()

    def sample_round(batch: list[Example]) -> tuple[Sampled, Scores, float, float]:
        """One generation round: rollouts for `batch`, decoded and scored. Returns timings too."""
        t0 = time.perf_counter()
        fault_point("generate")
        per_row = [e for e in batch for _ in range(G)]
        distinct = [format_prompt(tokenizer, e.prompt, cfg.data) for e in batch]
        prompts = [p for p in distinct for _ in range(G)]
        prompt_ids, prompt_mask = encode_prompts(tokenizer, distinct, device)  # prefilled once, shared by G samples
        rollouts = generate(
            policy, prompt_ids, prompt_mask,
            max_new_tokens=rc.max_new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
            temperature=rc.temperature, top_p=rc.top_p, generator=generator, group_size=G, engine=rc.engine,
        )
        t1 = time.perf_counter()
        texts = decode_completions(tokenizer, rollouts)
        scores = score_completions(reward_terms, cfg.reward, prompts, texts, per_row, rollouts.lengths_B.tolist(), rc.max_new_tokens)
        correct = [float("nan") if v is None else v for v in scores.terms[reward_terms[0].name].values]
        sampled = Sampled(per_row, rollouts, texts, scores.total_B.to(device), torch.tensor(correct, device=device))
        return sampled, scores, t1 - t0, time.perf_counter() - t1

    with JsonlWriter(run_dir / "metrics.jsonl") as metrics_out, JsonlWriter(run_dir / "samples.jsonl") as samples_out:
        for step in range(start + 1, tc.steps + 1):
            t_start = time.perf_counter()
            step_samples = collect_batch(
                lambda: sample_round(stream.take(rc.prompts_per_step)), rc.prompts_per_step, G, ac, tokenizer.pad_token_id
            )
            batch, scores = step_samples.batch, step_samples.scores
            missing_frac = float((~torch.isfinite(scores.total_B)).float().mean())
            if missing_frac > cfg.reward.max_missing_frac:
                raise RewardError(
                    f"step {step}: {missing_frac:.0%} of rewards are missing (reward.max_missing_frac = "
                    f"{cfg.reward.max_missing_frac}): {scores.problems()}"
                )
            t_verified = time.perf_counter()

            record: dict = {"step": step, **group_stats(scores.total_B, G), **scores.metrics(), "loss/kl": None}
            if ac.dynamic_sampling:
                record.update({
                    "sampling/rounds": step_samples.rounds,
                    "sampling/groups_dropped": step_samples.dropped_groups,
                    "sampling/batch_fill": (len(batch.texts) if batch else 0) / (rc.prompts_per_step * G),
                })
            if batch is not None:
                rewards_B = batch.rewards_B
                if reference is not None and ac.kl_in == "reward":
                    kl_B = sequence_kl_to_reference(
                        policy, reference, batch.rollouts,
                        estimator=ac.kl_estimator, temperature=rc.temperature, micro_batch_size=tc.micro_batch_size,
                    )
                    rewards_B = rewards_B - ac.beta * kl_B
                    record["reward/kl_sequence"] = float(kl_B.mean())
                advantages_B = compute_advantages(rewards_B, G, baseline=ac.baseline, std_scale=ac.std_scale, eps=ac.adv_eps)
                include_B = torch.isfinite(rewards_B)  # missing rewards: out of the loss entirely
                if ac.mask_truncated:
                    include_B &= ~batch.rollouts.truncated_B
                record.update(rl_update(
                    policy, optimizer, scheduler, batch.rollouts, advantages_B, ac,
                    reference=reference, temperature=rc.temperature, max_new_tokens=rc.max_new_tokens,
                    micro_batch_size=tc.micro_batch_size, max_grad_norm=tc.max_grad_norm, include_B=include_B,
                    micro_batch_tokens=tc.micro_batch_tokens, bucket_overhead_tokens=tc.bucket_overhead_tokens,
                ))
            t_end = time.perf_counter()

            generated = step_samples.generated
            lengths_B = torch.cat([r.lengths_B for r in generated])
            n_tokens = int(lengths_B.sum())
            record.update({
                "rollout/mean_length": float(lengths_B.float().mean()),
                "rollout/max_length": int(lengths_B.max()),  # decoding steps: the longest completion sets them
                "rollout/truncated_frac": float(torch.cat([r.truncated_B for r in generated]).float().mean()),
                "rollout/entropy": sum(r.entropy_sum for r in generated) / max(n_tokens, 1),
                "rollout/tokens_per_s": n_tokens / max(step_samples.generate_s, 1e-9),
                "time/generate": step_samples.generate_s,
                "time/verify": step_samples.verify_s,
                "time/update": t_end - t_verified,
                "time/step": t_end - t_start,
            })
            metrics_out.write(record)
            records.append(record)
            if batch is not None and (step % tc.log_samples_every == 0 or step == tc.steps):
                for i in range(min(2 * G, len(batch.texts))):
                    samples_out.write({
                        "step": step, "prompt": batch.examples[i].prompt, "completion": batch.texts[i],
                        "answer": batch.examples[i].answer, "reward": float(rewards_B[i]), "advantage": float(advantages_B[i]),
                    })
            bar.advance(f"reward {record['reward/mean']:.2f}" if record["reward/mean"] is not None else "reward n/a")
            fault_point("step_end")
            bad_streak = bad_streak + 1 if record.get("loss/skipped_nonfinite") else 0
            if bad_streak >= tc.max_nonfinite_steps:
                save(step)  # the skipped updates left the weights at the last good state
                raise TrainingError(
                    f"step {step}: {bad_streak} steps in a row had a NaN/inf loss or gradient (train.max_nonfinite_steps = "
                    f"{tc.max_nonfinite_steps}); stopped. The last good weights are in {checkpoints / step_name(step)}. "
                    "Lower train.lr, check the reward scale, or set train.max_grad_norm."
                )
            if (cfg.checkpoint.every and step % cfg.checkpoint.every == 0) or step == tc.steps:
                save(step)
                fault_point("step_saved")
    if cfg.model.gradient_checkpointing:
        policy.gradient_checkpointing_disable()
    return records

