"""The RL loop: per step, rollout -> verify -> advantages -> update, then log.

    for step in range(train.steps):
        prompts   = next prompts_per_step problems, each repeated G times
        rollouts  = generate(policy, prompts)                       (1) rollout.py
        rewards   = verifier(completion, gold) for each completion  (2) verifiers/
        adv       = compute_advantages(rewards, G, ...)             (3) algorithms/advantage.py
        metrics   = rl_update(policy, rollouts, adv, ...)           (4, 5) algorithms/loss.py, update.py
        write one metrics line; sometimes sample completions
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.algorithms import compute_advantages, group_stats
from rlvr.config import Config
from rlvr.data import Example, format_prompt
from rlvr.metrics import JsonlWriter, PhaseBar
from rlvr.models import frozen_copy
from rlvr.rollout import decode_completions, encode_prompts, generate
from rlvr.update import rl_update
from rlvr.verifiers import Verifier


class PromptStream:
    """Endless shuffled passes over the training problems (a new order each epoch, from the seed)."""

    def __init__(self, examples: list[Example], seed: int):
        self.examples, self.rng, self.order = examples, random.Random(f"prompts:{seed}"), []

    def take(self, n: int) -> list[Example]:
        batch = []
        while len(batch) < n:
            if not self.order:
                self.order = list(range(len(self.examples)))
                self.rng.shuffle(self.order)
            batch.append(self.examples[self.order.pop()])
        return batch


def grpo_train(
    policy: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: list[Example],
    cfg: Config,
    verifier: Verifier,
    run_dir: Path,
    bar: PhaseBar,
) -> list[dict]:
    """Train `policy` in place for cfg.train.steps; returns the per-step metric records."""
    device = next(policy.parameters()).device
    G, rc, tc = cfg.rollout.group_size, cfg.rollout, cfg.train
    reference = frozen_copy(policy) if cfg.algo.beta > 0 else None  # none at beta = 0: no memory, no forward
    optimizer = torch.optim.AdamW(policy.parameters(), lr=tc.lr, betas=(0.9, 0.99), weight_decay=tc.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, tc.warmup_steps)))
    stream = PromptStream(examples, cfg.run.seed)
    generator = torch.Generator(device=device).manual_seed(cfg.run.seed)
    if cfg.model.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    policy.train()

    records = []
    with JsonlWriter(run_dir / "metrics.jsonl") as metrics_out, JsonlWriter(run_dir / "samples.jsonl") as samples_out:
        for step in range(1, tc.steps + 1):
            t0 = time.perf_counter()
            batch = stream.take(rc.prompts_per_step)
            prompts = [format_prompt(tokenizer, e.prompt, cfg.data) for e in batch for _ in range(G)]
            prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts, device)
            rollouts = generate(
                policy, prompt_ids, prompt_mask,
                max_new_tokens=rc.max_new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                temperature=rc.temperature, top_p=rc.top_p, generator=generator,
            )
            t1 = time.perf_counter()

            texts = decode_completions(tokenizer, rollouts)
            golds = [e for e in batch for _ in range(G)]
            rewards_B = torch.tensor([float(verifier(t, e.answer)) for t, e in zip(texts, golds)], device=device)
            t2 = time.perf_counter()

            advantages_B = compute_advantages(rewards_B, G, cfg.algo.estimator, cfg.algo.std_scale, cfg.algo.adv_eps)
            update = rl_update(
                policy, optimizer, scheduler, rollouts, advantages_B, cfg.algo,
                reference=reference, temperature=rc.temperature, max_new_tokens=rc.max_new_tokens,
                micro_batch_size=tc.micro_batch_size, max_grad_norm=tc.max_grad_norm,
            )
            t3 = time.perf_counter()

            n_tokens = int(rollouts.lengths_B.sum())
            record = {
                "step": step,
                **group_stats(rewards_B, G),
                "loss/kl": None,  # no reference model when beta = 0; filled from the update otherwise
                **update,
                "rollout/mean_length": float(rollouts.lengths_B.float().mean()),
                "rollout/truncated_frac": float(rollouts.truncated_B.float().mean()),
                "rollout/entropy": rollouts.entropy_sum / max(n_tokens, 1),
                "rollout/tokens_per_s": n_tokens / max(t1 - t0, 1e-9),
                "time/generate": t1 - t0,
                "time/verify": t2 - t1,
                "time/update": t3 - t2,
                "time/step": t3 - t0,
            }
            metrics_out.write(record)
            records.append(record)
            if step % tc.log_samples_every == 0 or step == tc.steps:
                for g in range(min(2, len(batch))):
                    for i in range(g * G, g * G + G):
                        samples_out.write(
                            {"step": step, "prompt": golds[i].prompt, "completion": texts[i], "answer": golds[i].answer,
                             "reward": float(rewards_B[i]), "advantage": float(advantages_B[i])}
                        )
            bar.advance(f"reward {record['reward/mean']:.2f}")
    if cfg.model.gradient_checkpointing:
        policy.gradient_checkpointing_disable()
    return records
