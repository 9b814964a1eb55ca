"""One benchmark run in its own process: rlvr or TRL's GRPOTrainer, with per-step phase timings.

    python bench/_trainers.py SPEC.json RESULT.json

Run by bench/vs_trl.py (never by hand, though it works): each run is a fresh process so that
its peak RSS is its own. SPEC holds the shared work (model directory, steps, G, prompts per
step, max completion length, beta, lr, warmup, seed, threads); RESULT gets one record per step
and the process's memory.

How each phase is timed (the same instruments for both trainers where possible):

- step seconds: wall time between consecutive step ends (rlvr: its progress bar's advance();
  TRL: the on_step_end callback); the first step starts when training starts.
- generate: rlvr's own `time/generate` (metrics.jsonl: prompt encoding + sampling); TRL: a
  wrapper around `GRPOTrainer._generate` (prompt tokenisation + `model.generate` + decoding).
- score: rlvr's `time/verify` (decoding + reward terms); TRL: a wrapper around
  `_calculate_rewards` (the reward function).
- forward / forward_nograd / gen_forward: hooks on the policy's (and reference's) top-level
  module call (and, for rlvr's static-cache engine, which calls the layers directly, its
  prefill and step). A call with an explicit `use_cache` or KV-cache argument is a decoding forward
  (gen_forward, part of generate); others are training forwards (forward when grad is on,
  forward_nograd for the reference / old log-prob passes).
- backward: a wrapper around `torch.autograd.backward` (what `Tensor.backward` calls).
- optimizer: `clip_grad_norm_` plus the optimizer step (global optimizer step hooks).
- faults / faults_<phase>: minor page faults (getrusage) in the step and in each hooked phase:
  memory the kernel mapped in afresh, each a few microseconds in a virtual machine.

spec fixed_length: every completion is exactly max_new_tokens long in both trainers (rlvr's
sampler never sees an EOS; TRL's generate gets min_new_tokens), so the two do the same work to
the token, where otherwise their random streams give completions of different lengths.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook


def rss_mb() -> float:
    """Resident set size now (VmRSS), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def page_faults() -> int:
    """Minor page faults of this process so far: memory the kernel mapped in (zeroed) on first touch."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class Phases:
    """Seconds per phase, accumulated until end_step() closes a step's record."""

    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []
        self.step_started = time.perf_counter()
        self.step_faults = page_faults()
        self._open: list[tuple[float, int, str]] = []
        self.rss_at_start = float("nan")  # RSS when the first step starts (model, optimizer, trainer built)
        self.profiler: Any = None  # torch.profiler.profile over the training steps, when asked for

    def start(self) -> None:
        self.rss_at_start = rss_mb()
        if self.profiler is not None:
            self.profiler.start()
        self.current.clear()
        self.step_started = time.perf_counter()
        self.step_faults = page_faults()

    def finish(self) -> None:
        if self.profiler is not None:
            self.profiler.stop()

    def end_step(self) -> None:
        now = time.perf_counter()
        record = dict(self.current)
        record["seconds"] = now - self.step_started
        faults = page_faults()
        record["faults"] = faults - self.step_faults
        self.steps.append(record)
        self.current.clear()
        self.step_started, self.step_faults = now, faults

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t, f = time.perf_counter(), page_faults()
            try:
                return fn(*args, **kwargs)
            finally:
                self.current[name] += time.perf_counter() - t
                self.current[f"faults_{name}"] += page_faults() - f

        return timed

    def install_torch_hooks(self) -> None:
        torch.autograd.backward = self.wrap("backward", torch.autograd.backward)
        torch.nn.utils.clip_grad_norm_ = self.wrap("optimizer", torch.nn.utils.clip_grad_norm_)
        started: list[float] = []
        register_optimizer_step_pre_hook(lambda *_: started.append(time.perf_counter()))

        def step_done(*_: Any) -> None:
            if started:
                self.current["optimizer"] += time.perf_counter() - started.pop()

        register_optimizer_step_post_hook(step_done)

    def watch(self, model: torch.nn.Module) -> None:
        """Time every top-level call of `model` (hooks survive copy.deepcopy, so a reference
        model copied from the policy is timed too)."""
        model.register_forward_pre_hook(_forward_pre, with_kwargs=True)
        model.register_forward_hook(_forward_post, with_kwargs=True)


PHASES = Phases()
NEVER = -1  # spec fixed_length: rlvr's sampler gets this EOS id, which no token has


def _is_decoding(kwargs: dict) -> bool:
    return bool(kwargs.get("use_cache")) or any(kwargs.get(k) is not None for k in ("past_key_values", "cache"))


def _forward_pre(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    PHASES._open.append((time.perf_counter(), page_faults(), "gen_forward" if _is_decoding(kwargs) else
                         "forward" if torch.is_grad_enabled() else "forward_nograd"))


def _forward_post(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
    t, f, name = PHASES._open.pop()
    PHASES.current[name] += time.perf_counter() - t
    PHASES.current[f"faults_{name}"] += page_faults() - f


# --------------------------------------------------------------------------------------- rlvr


class _Bar:
    def __init__(self, on_advance: Callable[[], None] | None):
        self.on_advance = on_advance

    def advance(self, info: str = "") -> None:
        if self.on_advance is not None:
            self.on_advance()


class _Reporter:
    """Duck-types rlvr.metrics.Reporter: silent, and the RL phase's bar closes step records."""

    @contextmanager
    def phase(self, name: str, total: int):
        if name == "rl":  # the pipeline's RL phase (it was called "grpo" once: the harness then recorded no steps)
            PHASES.start()
            yield _Bar(PHASES.end_step)
            PHASES.finish()
        else:
            yield _Bar(None)

    def print(self, *args: Any) -> None:
        pass


def rlvr_overrides(spec: dict, run_dir: Path) -> list[str]:
    """The same work as the TRL run, through rlvr's public config (dotted overrides)."""
    return [
        f"model.path={json.dumps(spec['model_dir'])}",
        "sft.steps=0",
        f"train.steps={spec['steps']}",
        f"train.lr={spec['lr']}",
        f"train.warmup_steps={spec['warmup']}",
        "train.max_grad_norm=1.0",
        "train.weight_decay=0.0",
        f"train.micro_batch_size={spec['prompts_per_step'] * spec['G']}",  # one forward per step, as TRL
        "train.save_model=false",
        "train.log_samples_every=1000000",
        f"rollout.group_size={spec['G']}",
        f"rollout.prompts_per_step={spec['prompts_per_step']}",
        f"rollout.max_new_tokens={spec['max_new_tokens']}",
        "rollout.temperature=1.0",
        "rollout.top_p=1.0",
        f"algo.beta={spec['beta']}",
        "model.gradient_checkpointing=false",
        f"run.seed={spec['seed']}",
        f"run.threads={spec['threads']}",
        "run.device=cpu",
        "run.dtype=float32",
        f"run.output_dir={json.dumps(str(run_dir))}",
        "checkpoint.every=0",
        "checkpoint.keep_last=1",
        "eval.max_problems=4",  # the pipeline's before/after evaluations: 4 greedy problems, outside the steps
        f"eval.max_new_tokens={spec['max_new_tokens']}",
    ] + (['reward.functions=["_trainers:even_length"]'] if spec.get("reward") == "even_length" else []) + list(spec.get("rlvr_overrides", []))


def run_rlvr(spec: dict, work: Path) -> dict:
    from rlvr.config import load_config
    from rlvr.metrics import read_jsonl_records
    from rlvr.pipeline import run

    run_dir = work / "rlvr-run"
    cfg = load_config(overrides=rlvr_overrides(spec, run_dir))
    PHASES.install_torch_hooks()
    watched: list[torch.nn.Module] = []
    import rlvr.runtime as runtime  # prepare_model loads the policy through the load_model it imported

    load_model = runtime.load_model

    def load_and_watch(*args: Any, **kwargs: Any) -> torch.nn.Module:
        model = load_model(*args, **kwargs)
        PHASES.watch(model)
        watched.append(model)
        return model

    runtime.load_model = load_and_watch  # the policy; the reference is deep-copied from it, hooks included
    # The static-cache engine drives the model's layers without a top-level module call, so
    # its forwards are timed at the engine (the transformers engine goes through the hooks).
    from rlvr.rollout.engines import StaticCacheEngine

    if spec.get("mkl_packing"):  # a variant: decoding packed for MKL instead of oneDNN
        import _mkl_packing

        _mkl_packing.install(spec["prompts_per_step"] * spec["G"])
    StaticCacheEngine.prefill = PHASES.wrap("gen_forward", StaticCacheEngine.prefill)
    StaticCacheEngine.step = PHASES.wrap("gen_forward", StaticCacheEngine.step)
    if spec.get("fixed_length"):  # no row ends early: an EOS id no token has (TRL: min_new_tokens)
        import rlvr.rollout.sampler as sampler

        sample = sampler.generate
        sampler.generate = lambda *args, **kwargs: sample(*args, **{**kwargs, "eos_id": NEVER})
    summary = run(cfg, _Reporter(), command="bench")
    records = read_jsonl_records(run_dir / "metrics.jsonl")
    steps = []
    for rec, phases in zip(records, PHASES.steps):
        B = spec["prompts_per_step"] * spec["G"]
        steps.append({
            **phases,
            # the update's phases as rlvr times them: its scoring need not be one top-level model call (the
            # output layer runs in chunks past run.logits_budget_mib), so the forward hooks would miss it
            "forward": rec["time/forward"], "backward": rec["time/backward"], "optimizer": rec["time/optimizer"],
            "generate": rec["time/generate"],
            "score": rec["time/verify"],
            "reward": rec["reward/mean"],
            "mean_length": rec["rollout/mean_length"],
            "tokens": rec["rollout/mean_length"] * B,
            "active_frac": rec.get("loss/active_frac"),
            "own_step_s": rec["time/step"],
        })
    return {"steps": steps, "params": summary["parameters"],
            "info": {"watched_models": len(watched)}}


# ---------------------------------------------------------------------------------------- TRL


def bench_prompts(spec: dict) -> list:
    """The problems rlvr's loop will draw, in its order: TRL gets them unshuffled in that order."""
    from rlvr.config import load_config
    from rlvr.loop import PromptStream
    from rlvr.tasks.arithmetic import make_splits

    cfg = load_config(overrides=[f"run.seed={spec['seed']}"])
    train, _ = make_splits(cfg.task, cfg.run.seed)
    return PromptStream(train, cfg.run.seed).take(spec["steps"] * spec["prompts_per_step"])


def boxed_math_reward(prompts: list[str], completions: list[str], answer: list[str], **_: Any) -> list[float]:
    """rlvr's boxed_math verifier in TRL's reward signature."""
    from rlvr.verifiers.math import boxed_math

    return [boxed_math(c, a) for c, a in zip(completions, answer)]


def even_length(completion: str, answer: str) -> float:
    """A timing reward (spec reward = even_length), not a task: 1 for a completion of even length
    in characters. A real model that never boxes an answer scores 0 on boxed_math everywhere, and
    rlvr would then skip the update; this gives mixed groups, so both trainers run a full update."""
    return float(len(completion) % 2 == 0)


def even_length_reward(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
    """`even_length` in TRL's reward signature."""
    return [even_length(c, "") for c in completions]


def trl_config(spec: dict, out_dir: Path):
    """GRPOConfig matched to rlvr's defaults; every field that differs from TRL's default is here."""
    from trl import GRPOConfig

    B = spec["prompts_per_step"] * spec["G"]
    return GRPOConfig(
        output_dir=str(out_dir),
        # the work: 4 prompts x G per step, one generation per optimizer step, one forward/backward
        per_device_train_batch_size=B,
        gradient_accumulation_steps=1,
        num_generations=spec["G"],
        max_completion_length=spec["max_new_tokens"],
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_steps=spec["steps"],
        shuffle_dataset=False,  # the dataset is already in rlvr's prompt order
        # the loss: rlvr's defaults (grpo advantages, token_mean aggregation, clip 0.2, k3 KL in the loss)
        loss_type="dapo",  # sum over all completion tokens of the batch / their count == rlvr token_mean
        scale_rewards="group",
        epsilon=0.2,
        beta=spec["beta"],
        num_iterations=1,
        # the optimiser: rlvr's AdamW(betas=(0.9, 0.99)), linear warmup then constant, clip 1.0
        learning_rate=spec["lr"],
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=spec["warmup"],
        adam_beta1=0.9,
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        # no extra work: CPU fp32, no checkpointing, no vLLM, no eval, no saving, no trackers
        use_cpu=True,
        bf16=False,
        fp16=False,
        activation_checkpointing=False,  # TRL's default is on (gradient_checkpointing=True)
        gradient_checkpointing=False,
        use_vllm=False,
        eval_strategy="no",
        save_strategy="no",
        report_to="none",
        logging_steps=1,  # per-step rewards (an in-memory dict, cheap)
        log_completions=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=spec["seed"],
        model_init_kwargs={"dtype": "float32"},
        # fixed_length: every completion is max_completion_length tokens (EOS masked until then), as rlvr's
        generation_kwargs={"min_new_tokens": spec["max_new_tokens"]} if spec.get("fixed_length") else None,
    )


def run_trl(spec: dict, work: Path) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    examples = bench_prompts(spec)
    dataset = Dataset.from_list([{"prompt": e.prompt, "answer": e.answer} for e in examples])
    logs: list[dict] = []

    class Steps(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            PHASES.start()

        def on_step_end(self, args, state, control, **kwargs):
            PHASES.end_step()

        def on_train_end(self, args, state, control, **kwargs):
            PHASES.finish()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                logs_copy = dict(logs)
                logs_copy["_step"] = state.global_step
                _logs.append(logs_copy)

    _logs = logs
    trainer = GRPOTrainer(
        model=spec["model_dir"], reward_funcs=even_length_reward if spec.get("reward") == "even_length" else boxed_math_reward, args=trl_config(spec, work / "trl-out"),
        train_dataset=dataset, callbacks=[Steps()],
    )
    PHASES.install_torch_hooks()
    PHASES.watch(trainer.model)
    if getattr(trainer, "ref_model", None) is not None:
        PHASES.watch(trainer.ref_model)
    for method, phase in (("_generate", "generate"), ("_calculate_rewards", "score")):  # private methods of TRL 1.x
        if not hasattr(trainer, method):
            raise SystemExit(f"GRPOTrainer.{method} is gone in this TRL version: update bench/_trainers.py to time '{phase}'")
        setattr(trainer, method, PHASES.wrap(phase, getattr(trainer, method)))
    trainer.train()
    by_step = {log["_step"]: log for log in logs}
    B = spec["prompts_per_step"] * spec["G"]
    steps = []
    for i, phases in enumerate(PHASES.steps, start=1):
        log = by_step.get(i, {})
        steps.append({
            **phases,
            "reward": log.get("reward"),
            "mean_length": log.get("completions/mean_length"),
            "tokens": log["completions/mean_length"] * B if "completions/mean_length" in log else None,
            "own_step_s": log.get("step_time"),
        })
    optimizer = trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer
    info = {
        "optimizer": type(optimizer).__name__, "fused": optimizer.defaults.get("fused"), "foreach": optimizer.defaults.get("foreach"),
        "betas": optimizer.defaults.get("betas"), "weight_decay": sorted({g["weight_decay"] for g in optimizer.param_groups}),
        "ref_model": getattr(trainer, "ref_model", None) is not None,
    }
    return {"steps": steps,
            "params": sum(p.numel() for p in trainer.model.parameters()), "info": info}


# --------------------------------------------------------------------------------------- main


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    work = Path(spec["work_dir"])
    work.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(spec["threads"])
    torch.set_flush_denormal(True)  # rlvr's pipeline does this; TRL gets the same CPU math
    started = time.perf_counter()
    if spec.get("profile"):  # torch's op-level profile of the training steps (it slows them: not for timings)
        from torch.profiler import ProfilerActivity, profile

        PHASES.profiler = profile(activities=[ProfilerActivity.CPU])
    result = (run_rlvr if spec["trainer"] == "rlvr" else run_trl)(spec, work)
    if PHASES.profiler is not None:
        events = PHASES.profiler.key_averages()
        result["profile"] = {
            "table": events.table(sort_by="self_cpu_time_total", row_limit=spec.get("profile_rows", 20), max_name_column_width=48),
            "op_calls_per_step": sum(e.count for e in events if e.key.startswith("aten::")) / spec["steps"],
        }
    result.update({
        "trainer": spec["trainer"], "peak_rss_mb": peak_rss_mb(), "rss_at_train_start_mb": PHASES.rss_at_start, "wall_s": time.perf_counter() - started,
        "torch_threads": torch.get_num_threads(), "pid": os.getpid(),
    })
    out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
