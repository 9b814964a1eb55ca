"""The RL loop: per step, rollout -> verify -> (filter) -> advantages -> update, then log.

    for step in range(train.steps):
        examples  = next prompts_per_step problems
        rollouts  = learner.generate(examples)                         (1) learner.py, rollout/
        rewards   = weighted reward terms per completion               (2) reward.py, verifiers/
        (dynamic sampling: drop all-equal groups, sample again until the batch is full)
        (KL in reward: rewards -= beta * learner.reference_kl(rollouts))
        adv       = compute_advantages(rewards, G, ...)                (3) algorithms/advantage.py
        (on-policy distillation: the teacher's per-token term joins adv in the update)
        metrics   = learner.update(rollouts, adv, include)             (4, 5) algorithms/loss.py, update.py
        write one metrics line; sometimes sample completions; checkpoint

The loop touches the policy only through a `Learner` (rlvr/learner.py).
"""

from __future__ import annotations

import json
import random
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from rlvr.algorithms import compute_advantages, group_stats, informative_groups
from rlvr.checkpoint import (
    CheckpointError, fault_point, latest_step_checkpoint, load_step, restore_rng_state, rng_state, save_step, step_name,
)
from rlvr.config import AlgoConfig, Config, to_toml
from rlvr.files import atomic_write_text
from rlvr.data import Example
from rlvr.errors import LearnerLost, RunStopped
from rlvr.learner import Learner
from rlvr.metrics import STOP_FILE, JsonlWriter, PhaseBar, read_jsonl_records, rewind_jsonl
from rlvr.monitor import HackMonitor, learned_term_metrics
from rlvr.reward import RewardError, RewardTerm, Scores, correctness_term, score_completions
from rlvr.rollout import Rollouts, ToolTrace, completion_id_lists, concat_rollouts
from rlvr.rollout.multiturn import merged_tool_metrics
from rlvr.trackers import Trackers
from rlvr.verifiers.math import boxed_math


class TrainingError(RunStopped):
    """Training cannot go on (e.g. the loss keeps turning NaN); a checkpoint of the last good state exists."""


class PromptStream:
    """Endless shuffled passes over the training problems (a new order each epoch, from the seed).

    Curriculum (data.skip_solved_rate > 0): each problem's pass rate in the last round it was
    sampled (the share of its G completions with full marks) is kept, and a problem at or above
    the rate, or never solved with data.skip_never_solved, is passed over, or taken anyway with
    probability data.solved_keep_prob, so steps go to problems that still teach something. A pass
    over a whole epoch's worth that finds nothing to take takes what comes.
    """

    def __init__(self, examples: list[Example], seed: int, skip_rate: float = 0.0, keep_prob: float = 0.0, skip_never: bool = False):
        self.examples, self.rng, self.order = examples, random.Random(f"prompts:{seed}"), []
        self.skip_rate, self.keep_prob, self.skip_never = skip_rate, keep_prob, skip_never
        self.rates: dict[int, float] = {}  # example index -> pass rate in its last sampled round
        self.skipped = 0  # problems passed over since the last metrics
        # The index each example handed out came from, by object identity: an Arrow-backed source
        # builds a new Example at every access, so an example cannot be looked up in `examples`.
        self._taken: dict[int, int] = {}

    def state(self) -> dict:
        """Where the stream is: its RNG, the rest of the current epoch's order and the pass rates (exact resume)."""
        return {"rng": self.rng.getstate(), "order": list(self.order), "rates": dict(self.rates)}

    def set_state(self, state: dict) -> None:
        self.rng.setstate(state["rng"])
        self.order = list(state["order"])
        self.rates = dict(state.get("rates", {}))

    def record(self, examples: list[Example], rates: list[float]) -> None:
        """The pass rate each of `examples` (taken from this stream) just had."""
        if self.skip_rate > 0:
            for e, rate in zip(examples, rates):
                if id(e) not in self._taken:
                    raise ValueError("PromptStream.record takes the examples of the stream's last take(), in any order; "
                                     f"{e.prompt[:40]!r} is not one of them")
                self.rates[self._taken[id(e)]] = rate

    def _passes_over(self, i: int) -> bool:
        rate = self.rates.get(i)
        if rate is None or not (rate >= self.skip_rate or (self.skip_never and rate == 0.0)):
            return False  # no RNG drawn: without a curriculum the order is what it always was
        return self.rng.random() >= self.keep_prob

    def curriculum_metrics(self) -> dict[str, float]:
        """The pass-rate histogram of the problems seen so far, and how many were passed over."""
        rates, skipped = list(self.rates.values()), self.skipped
        self.skipped = 0
        n = max(len(rates), 1)
        return {"curriculum/skipped": skipped, "curriculum/seen": len(rates),
                "curriculum/rate_0": sum(r == 0.0 for r in rates) / n, "curriculum/rate_below_half": sum(0.0 < r < 0.5 for r in rates) / n,
                "curriculum/rate_half_up": sum(0.5 <= r < 1.0 for r in rates) / n, "curriculum/rate_1": sum(r == 1.0 for r in rates) / n}

    def peek(self, n: int, rounds: int) -> list[list[Example]]:
        """What the next `rounds` calls of take(n) will return, without taking them (a learner
        with asynchronous rollouts starts sampling them early)."""
        if rounds <= 0:
            return []
        saved, taken, skipped = self.state(), self._taken, self.skipped
        ahead = [self.take(n) for _ in range(rounds)]
        self.set_state(saved)
        self._taken, self.skipped = taken, skipped
        return ahead

    def take(self, n: int) -> list[Example]:
        """The next n problems; `record` takes their pass rates until the next take."""
        batch, passed = [], 0
        self._taken = {}
        while len(batch) < n:
            if not self.order:
                self.order = list(range(len(self.examples)))
                self.rng.shuffle(self.order)
            i = self.order.pop()
            if self.skip_rate > 0 and passed < len(self.examples) and self._passes_over(i):
                passed += 1
                continue
            example = self.examples[i]
            self._taken[id(example)] = i
            batch.append(example)
        self.skipped += passed
        return batch


@dataclass
class Sampled:
    """Completions of some prompts, G consecutive rows per prompt, with their rewards."""

    examples: list[Example]  # one per completion
    rollouts: Rollouts
    texts: list[str]
    rewards_B: torch.Tensor  # weighted sum of the reward terms; NaN = missing
    correct_B: torch.Tensor  # the correctness term's score (reward.correctness; Scores.correct_B); NaN = missing
    trace: ToolTrace | None = None  # multi-turn rollouts: each row's conversation and tool calls

    def rows(self, rows: torch.Tensor) -> "Sampled":
        return Sampled(
            [self.examples[i] for i in rows.tolist()], self.rollouts.select(rows), [self.texts[i] for i in rows.tolist()],
            self.rewards_B[rows], self.correct_B[rows], self.trace.select(rows.tolist()) if self.trace is not None else None,
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
    traces: list[ToolTrace | None] = field(default_factory=list)  # every round's conversations (multi-turn), else None each


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
    all_scores, generated, traces = [], [], []
    gen_s = verify_s = 0.0
    rounds = dropped = 0
    while True:
        rounds += 1
        sampled, scores, g_s, v_s = sample_round()
        all_scores.append(scores)
        generated.append(sampled.rollouts)
        traces.append(sampled.trace)
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
            None if any(k.trace is None for k in kept) else ToolTrace.concat([k.trace for k in kept]),
        )
        batch = batch.rows(torch.arange(min(len(batch.texts), prompts_per_step * G)))
    return StepSamples(batch, Scores.merge(all_scores), generated, rounds, dropped, gen_s, verify_s, traces)


def rl_train(
    learner: Learner,
    examples: list[Example],
    cfg: Config,
    reward_terms: list[RewardTerm],
    run_dir: Path,
    bar: PhaseBar,
    resume_from: Path | None = None,
    evaluate_policy: Callable[[torch.nn.Module], dict] | None = None,
    trackers: Trackers | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> list[dict]:
    """Train the learner's policy for cfg.train.steps under any preset; returns the per-step
    metric records. With `resume_from` (a complete step checkpoint) weights, optimizer,
    scheduler, prompt stream and every RNG continue from it, so the remaining steps are those of
    an uninterrupted run. `evaluate_policy(policy)` (held-out figures of the policy the learner
    lends, drawing on no training RNG) runs every cfg.eval.every steps after the update; its
    figures join that step's line.
    `trackers` (run.trackers) get every line and the sampled completions as they are written.
    `on_progress(step)` runs every cfg.run.report_every steps (the pipeline redraws report.html).
    A run that stops itself (the hack monitor, a NaN streak) leaves stopped.json saying why.

    A learner that loses a part (LearnerLost: a learner rank's process or node died) is asked to
    `recover`, and training goes on from the last complete step checkpoint (from the start when
    there is none) exactly as a resume would: the steps after it are redone and their lines
    rewritten, so the run ends where an unharmed one does. At most distributed.max_restarts
    times (-1: always); checkpoint.every bounds the work redone."""
    # Only a learner with parts on other processes can be lost (the RNG state would touch every GPU).
    losable = cfg.distributed.backend == "ray" and cfg.distributed.learner_workers > 0
    at_start, restarts, rewound = rng_state(None) if losable else None, 0, False
    while True:
        try:
            if rewound:  # inside the try: a part lost again while re-forming counts as one more restart
                learner.recover()
                resume_from = latest_step_checkpoint(run_dir / "checkpoints")
                if resume_from is None:  # back to the run's first step: its RNG as it was then
                    restore_rng_state(at_start, None)
            return _train(learner, examples, cfg, reward_terms, run_dir, bar, resume_from, evaluate_policy, trackers, on_progress, rewound)
        except LearnerLost as err:
            limit = cfg.distributed.max_restarts
            if 0 <= limit <= restarts:
                raise LearnerLost(f"{err}. The learner was re-formed {restarts} time(s) in this run, distributed.max_restarts = "
                                  f"{limit}: stopped; resume from {run_dir / 'checkpoints'} once the cluster is whole") from err
            restarts += 1
            warnings.warn(f"{err}; re-forming the learner ({restarts} of {'unlimited' if limit < 0 else limit} restarts) and "
                          "training on from the last checkpoint", RuntimeWarning, stacklevel=2)
            rewound = True


def _train(learner: Learner, examples: list[Example], cfg: Config, reward_terms: list[RewardTerm], run_dir: Path, bar: PhaseBar,
           resume_from: Path | None, evaluate_policy: Callable[[torch.nn.Module], dict] | None, trackers: Trackers | None,
           on_progress: Callable[[int], None] | None, rewound: bool) -> list[dict]:
    """rl_train from `resume_from` (None: the first step); `rewound`: this process already ran
    those steps (the trackers have them, the bar counted them)."""
    G, rc, tc, ac = cfg.rollout.group_size, cfg.rollout, cfg.train, cfg.algo
    dc = cfg.data
    stream = PromptStream(examples, cfg.run.seed, dc.skip_solved_rate, dc.solved_keep_prob, dc.skip_never_solved)
    checkpoints = run_dir / "checkpoints"
    mc = cfg.monitor
    judge = correctness_term(reward_terms) if reward_terms else None  # strict math beside boxed_math itself would add nothing
    monitor = HackMonitor(mc.compare_strict and judge is not None and judge.fn is not boxed_math, mc.stop_on_hack, mc.patience, mc.min_gap, mc.window)
    start, bad_streak = 0, 0
    if resume_from is not None:
        trainer, state = load_step(resume_from, learner.load_policy)
        learner.load_trainer_state(trainer)
        stream.set_state(trainer["stream"])
        monitor.set_state(trainer.get("monitor", {}))
        start, bad_streak = state["step"], state["bad_streak"]
    records = _records_before(run_dir, start, resume_from)
    (run_dir / STOP_FILE).unlink(missing_ok=True)  # a resumed run is no longer stopped
    if trackers is not None and records and not rewound:
        trackers.replay(records, read_jsonl_records(run_dir / "samples.jsonl"))
    if rewound:
        bar.rewind(start)
    else:
        for _ in range(start):
            bar.advance()

    def save(step: int) -> None:
        save_step(checkpoints, step, weights=learner.save_policy,
                  trainer={**learner.trainer_state(), "stream": stream.state(), "monitor": monitor.state()},
                  loop={"bad_streak": bad_streak}, config_text=to_toml(cfg).lstrip("\n"), keep_last=cfg.checkpoint.keep_last)

    with JsonlWriter(run_dir / "metrics.jsonl") as metrics_out, JsonlWriter(run_dir / "samples.jsonl") as samples_out:
        for step in range(start + 1, tc.steps + 1):
            t_start = time.perf_counter()
            def one_round():
                batch = stream.take(rc.prompts_per_step)
                out = sample_round(learner, batch, reward_terms, cfg, stream.peek(rc.prompts_per_step, learner.lookahead))
                stream.record(batch, group_pass_rates(out[0].correct_B, G))
                return out

            samples = collect_batch(one_round, rc.prompts_per_step, G, ac, learner.pad_token_id)
            batch, scores = samples.batch, samples.scores
            _check_missing(step, scores, cfg)
            t_verified = time.perf_counter()
            record: dict = {"step": step, **group_stats(scores.total_B, G), **scores.metrics(), "loss/kl": None}
            if ac.dynamic_sampling:
                record.update(_sampling_metrics(samples, rc.prompts_per_step * G))
            if batch is not None:
                rewards_B = batch.rewards_B
                if ac.beta > 0 and ac.kl_in == "reward":
                    kl_B = learner.reference_kl(batch.rollouts)
                    rewards_B = rewards_B - ac.beta * kl_B
                    record["reward/kl_sequence"] = float(kl_B.mean())
                advantages_B = compute_advantages(rewards_B, G, baseline=ac.baseline, std_scale=ac.std_scale, eps=ac.adv_eps,
                                                  pass_at_k=ac.pass_at_k)
                include_B = torch.isfinite(rewards_B)  # missing rewards: out of the loss entirely
                if cfg.distill.on_policy_coef > 0:  # the teacher's per-token term joins these in the update
                    advantages_B, include_B = beside_teacher(advantages_B, include_B, cfg.distill.verifier_advantage)
                if ac.mask_truncated:
                    include_B &= ~batch.rollouts.truncated_B
                record.update(learner.update(batch.rollouts, advantages_B, include_B))
            record.update(_rollout_metrics(samples, t_start, t_verified, time.perf_counter()))
            record.update(learner.step_metrics())
            if dc.skip_solved_rate > 0:
                record.update(stream.curriculum_metrics())
            hack_reason = None
            if mc.enabled and batch is not None:
                hack_metrics, hack_reason = monitor.step(
                    [e.prompt for e in batch.examples], batch.texts, [e.answer for e in batch.examples],
                    batch.rollouts.truncated_B.tolist(), [None if v != v else float(v) for v in batch.correct_B.tolist()], batch.trace)
                record.update(hack_metrics)
                record.update(learned_term_metrics(scores, reward_terms, G))  # a reward model or judge against the verifier
            if evaluate_policy is not None and cfg.eval.every and step % cfg.eval.every == 0:
                t_eval = time.perf_counter()
                with learner.evaluation_policy() as policy:
                    record.update(evaluate_policy(policy))
                record["time/eval"] = time.perf_counter() - t_eval
            metrics_out.write(record)
            records.append(record)
            if trackers is not None:
                trackers.log(step, record)
            if batch is not None and (step % tc.log_samples_every == 0 or step == tc.steps):
                rows = _write_samples(samples_out, step, batch, rewards_B, advantages_B, 2 * G)
                if trackers is not None:
                    trackers.log_samples(step, rows)
            bar.advance(f"reward {record['reward/mean']:.2f}" if record["reward/mean"] is not None else "reward n/a")
            fault_point("step_end")
            bad_streak = bad_streak + 1 if record.get("loss/skipped_nonfinite") else 0
            if bad_streak >= tc.max_nonfinite_steps:
                save(step)  # the skipped updates left the weights at the last good state
                raise _stopped(run_dir, step, "nonfinite",
                    f"step {step}: {bad_streak} steps in a row had a NaN/inf loss or gradient (train.max_nonfinite_steps = "
                    f"{tc.max_nonfinite_steps}); stopped. The last good weights are in {checkpoints / step_name(step)}. "
                    "Lower train.lr, check the reward scale, or set train.max_grad_norm."
                )
            if hack_reason is not None:
                save(step)
                raise _stopped(run_dir, step, "hack_monitor", f"step {step}: the hack monitor stopped the run (monitor.stop_on_hack): {hack_reason}. "
                               f"The weights of this step are in {checkpoints / step_name(step)}.")
            if (cfg.checkpoint.every and step % cfg.checkpoint.every == 0) or step == tc.steps:
                save(step)
                fault_point("step_saved")
            if on_progress is not None and cfg.run.report_every and step % cfg.run.report_every == 0 and step < tc.steps:
                on_progress(step)
    return records


def _stopped(run_dir: Path, step: int, by: str, reason: str) -> TrainingError:
    """The error that stops the run, with stopped.json beside the metrics so that a report (drawn
    now or later) says at which step and why."""
    atomic_write_text(run_dir / STOP_FILE, json.dumps({"step": step, "by": by, "reason": reason}, indent=2) + "\n")
    return TrainingError(reason)


def sample_round(learner: Learner, batch: list[Example], terms: list[RewardTerm], cfg: Config,
                 upcoming: list[list[Example]] = ()) -> tuple[Sampled, Scores, float, float]:
    """One generation round: completions for `batch`, scored. Returns the generate and verify
    seconds too (a learner that verifies on its own workers, as each slice is sampled, hands back
    scores: their time is in the generate seconds). `upcoming`: the next rounds' examples."""
    t0 = time.perf_counter()
    generation = learner.generate(batch, upcoming)
    t1 = time.perf_counter()
    G, rollouts, device = cfg.rollout.group_size, generation.rollouts, generation.rollouts.completion_ids_BT.device
    per_row = [e for e in batch for _ in range(G)]
    scores = generation.scores if generation.scores is not None else score_completions(
        terms, cfg.reward, generation.prompts, generation.texts, per_row, rollouts.lengths_B.tolist(), cfg.rollout.max_new_tokens,
        prompt_messages=generation.prompt_messages, completion_ids=completion_id_lists(rollouts), trace=generation.trace, group_size=G,
    )
    sampled = Sampled(per_row, rollouts, generation.texts, scores.total_B.to(device), scores.correct_B.to(device), generation.trace)
    return sampled, scores, t1 - t0, time.perf_counter() - t1


def group_pass_rates(correct_B: torch.Tensor, G: int) -> list[float]:
    """Each group's share of completions with full marks (a missing verdict counts as not solved)."""
    return ((correct_B.view(-1, G) == 1.0).float().mean(dim=1)).tolist()


def _records_before(run_dir: Path, start: int, resume_from: Path | None) -> list[dict]:
    """The metric records of steps 1..start (a resume redoes the steps after its checkpoint)."""
    try:
        records = rewind_jsonl(run_dir / "metrics.jsonl", start)
        rewind_jsonl(run_dir / "samples.jsonl", start)
    except ValueError as err:
        raise CheckpointError(f"cannot resume: {err}") from None
    if len(records) != start or [r["step"] for r in records] != list(range(1, start + 1)):
        raise CheckpointError(f"{run_dir / 'metrics.jsonl'} does not hold steps 1..{start} of checkpoint {resume_from}; cannot resume cleanly")
    return records


def _check_missing(step: int, scores: Scores, cfg: Config) -> None:
    missing_frac = float((~torch.isfinite(scores.total_B)).float().mean())
    if missing_frac > cfg.reward.max_missing_frac:
        raise RewardError(
            f"step {step}: {missing_frac:.0%} of rewards are missing (reward.max_missing_frac = "
            f"{cfg.reward.max_missing_frac}): {scores.problems()}"
        )


def _sampling_metrics(samples: StepSamples, batch_rows: int) -> dict:
    return {
        "sampling/rounds": samples.rounds,
        "sampling/groups_dropped": samples.dropped_groups,
        "sampling/batch_fill": (len(samples.batch.texts) if samples.batch else 0) / batch_rows,
    }


def _rollout_metrics(samples: StepSamples, t_start: float, t_verified: float, t_end: float) -> dict:
    generated = samples.generated
    lengths_B = torch.cat([r.lengths_B for r in generated])
    n_tokens = int(lengths_B.sum())
    return {
        "rollout/mean_length": float(lengths_B.float().mean()),
        "rollout/max_length": int(lengths_B.max()),  # decoding steps: the longest completion sets them
        "rollout/truncated_frac": float(torch.cat([r.truncated_B for r in generated]).float().mean()),
        "rollout/entropy": sum(r.entropy_sum for r in generated) / max(n_tokens, 1),
        "rollout/tokens_per_s": n_tokens / max(samples.generate_s, 1e-9),
        **merged_tool_metrics(samples.traces),
        "time/generate": samples.generate_s,
        "time/verify": samples.verify_s,
        "time/update": t_end - t_verified,
        "time/step": t_end - t_start,
    }


def beside_teacher(advantages_B: torch.Tensor, include_B: torch.Tensor, weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """On-policy distillation: the verifier's advantages at `weight` (distill.verifier_advantage) beside the teacher's
    per-token term. At 0 the teacher alone teaches: every completion trains, one with a missing reward too.

    >>> beside_teacher(torch.tensor([1.0, float("nan")]), torch.tensor([True, False]), 0.0)
    (tensor([0., 0.]), tensor([True, True]))
    """
    if weight == 0.0:
        return torch.zeros_like(advantages_B), torch.ones_like(include_B)
    return advantages_B * weight, include_B


def _write_samples(out: JsonlWriter, step: int, batch: Sampled, rewards_B: torch.Tensor, advantages_B: torch.Tensor, n: int) -> list[dict]:
    rows = [{"step": step, "prompt": batch.examples[i].prompt, "completion": batch.texts[i], "answer": batch.examples[i].answer,
             "reward": float(rewards_B[i]), "advantage": float(advantages_B[i])} for i in range(min(n, len(batch.texts)))]
    if batch.trace is not None:  # a tool run: the conversation (tool calls, their results), which the report shows
        for i, row in enumerate(rows):
            row["conversation"] = batch.trace.conversations[i]
    for row in rows:
        out.write(row)
    return rows
