"""The recipe: model -> data -> cold-start SFT -> evaluate -> GRPO -> evaluate -> save.

`rlvr lab` runs it with the built-in defaults (tiny model, arithmetic); `rlvr train CONFIG` runs
it on the user's model and data. Everything a run produces lands in run.output_dir:

    config.toml           the resolved config (rerun with `rlvr train config.toml`)
    metrics.jsonl         one line per RL step
    samples.jsonl         sampled completions with rewards and advantages
    eval_<stage>.jsonl    every held-out completion with its verdict
    summary.json          accuracies (overall, per level), behaviour, timings
    reward_curve.png      the reward during RL, with held-out accuracy before/after
    model/                the final policy (save_pretrained)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections import Counter
import random
import shutil
import time
from datetime import datetime
from pathlib import Path

import torch
from rich.table import Table

from rlvr.checkpoint import (
    RL_START,
    CheckpointError,
    complete_step_checkpoints,
    fault_point,
    is_complete,
    latest_step_checkpoint,
    load_trainer,
    load_weights,
    read_state,
    restore_rng_state,
    rng_state,
    save_checkpoint,
    step_name,
)
from rlvr.config import RESUMABLE_CHANGES, Config, ConfigError, atomic_write_text, changes_breaking_resume, load_config, save_config, to_toml
from rlvr.data import Example, Problem, load_jsonl_splits
from rlvr.loop import TrainingError, grpo_train
from rlvr.metrics import Reporter, plot_reward_curve
from rlvr.models import (
    add_lora,
    build_char_tokenizer,
    build_tiny_model,
    check_model_path,
    count_parameters,
    load_model,
    load_tokenizer,
    merged,
    resolve_device,
    save_pretrained,
)
from rlvr.stages.evaluate import EvalResult, evaluate, num_batches
from rlvr.stages.sft import sft_train
from rlvr.tasks.arithmetic import make_splits
from rlvr.reward import answer_check, build_reward_terms, close_reward_terms, correctness_term


def prepare_run_dir(cfg: Config, command: str, resume: bool) -> tuple[Path, bool]:
    """The run directory, and whether this run continues one that is already there."""
    if not cfg.run.output_dir:
        if resume:
            raise ConfigError("run.output_dir: resuming needs the run directory")
        cfg.run.output_dir = f"runs/{command}-{datetime.now():%Y%m%d-%H%M%S}"
    run_dir = Path(cfg.run.output_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"run.output_dir: {run_dir} is a file, not a directory")
    started = (run_dir / "config.toml").exists()
    if resume and not started:
        raise ConfigError(f"run.output_dir: {run_dir} holds no run to resume (no config.toml)")
    if started and not (resume or cfg.checkpoint.auto_resume):
        raise ConfigError(
            f"run.output_dir: {run_dir} already holds a run; continue it with --resume {run_dir} "
            "(or checkpoint.auto_resume=true), or choose another directory"
        )
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a parent that is a file, no permission, a read-only disk
        raise ConfigError(f"run.output_dir: cannot create {run_dir}: {err.strerror or err}") from None
    return run_dir, started


def load_splits(cfg: Config, skipped: list[Problem] | None = None) -> tuple[list[Example], list[Example]]:
    if cfg.data.source == "arithmetic":
        return make_splits(cfg.task, cfg.run.seed)
    # a gold answer the correctness verifier refuses (boxed_math: cannot match it to itself) can never be rewarded
    return load_jsonl_splits(cfg.data, cfg.run.seed, need_solution=cfg.sft.steps > 0, answer_ok=answer_check(cfg.reward), skipped=skipped)


def prepare_model(cfg: Config, run_dir: Path):
    """The user's model, or the tiny lab model built, saved and loaded back the standard way."""
    device = resolve_device(cfg.run.device)
    path = cfg.model.path
    if not path:
        tokenizer = build_char_tokenizer()
        path = str(save_pretrained(build_tiny_model(tokenizer, cfg.model.tiny, cfg.run.seed), tokenizer, run_dir / "init"))
    tokenizer = load_tokenizer(path, cfg.model.trust_remote_code)
    model = load_model(path, cfg.run.dtype, str(device), cfg.model.trust_remote_code)
    return model, tokenizer


def forward_precision(cfg: Config, device: torch.device):
    """Mixed precision (`run.autocast`): forwards in bf16 under torch.autocast, weights and optimizer
    state in run.dtype. SFT, evaluation and GRPO all run inside it; their backward calls step out of
    it (`backward_outside_autocast`), as torch recommends."""
    if cfg.run.autocast == "none":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=getattr(torch, cfg.run.autocast))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def configure_cpu_math() -> None:
    """Flush denormal floats to zero. Training drives some activations and gradients into the
    denormal range (below ~1e-38), where x86 float math is ~100x slower: measured here, an SFT
    step of the lab model took 2.2 s with denormals and 0.11 s without. Values that small are
    numerically zero for training purposes."""
    torch.set_flush_denormal(True)


def run(cfg: Config, reporter: Reporter, command: str = "train", resume: bool = False) -> dict:
    """The whole recipe; with `resume` (or checkpoint.auto_resume) it continues the run in
    run.output_dir from its newest complete checkpoint, with the result of an uninterrupted run."""
    reward_terms = build_reward_terms(cfg.reward)  # import errors and a missing sandbox surface here, before any work
    try:
        return _run(cfg, reporter, command, resume, reward_terms)
    finally:
        close_reward_terms(reward_terms)


def _run(cfg: Config, reporter: Reporter, command: str, resume: bool, reward_terms) -> dict:
    started = time.perf_counter()
    skipped: list[Problem] = []
    train, held_out = load_splits(cfg, skipped)  # bad data or model paths stop the run before anything is written
    if cfg.model.path:
        check_model_path(cfg.model.path)
    run_dir, resuming = prepare_run_dir(cfg, command, resume)
    if resuming:  # the optimizer, data order and reference come from the checkpoint: settings must agree
        changed = changes_breaking_resume(load_config(run_dir / "config.toml", for_training=False), cfg)
        if changed:
            raise ConfigError(
                f"run.output_dir: resuming {run_dir} with changed settings would not continue the same run: {'; '.join(changed)}. "
                f"Only {', '.join(RESUMABLE_CHANGES)} may change; start a new run from `rlvr export` weights instead"
            )
    save_config(cfg, run_dir / "config.toml")
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    seed_everything(cfg.run.seed)
    configure_cpu_math()
    if skipped:
        reporter.print(f"[yellow]skipped {len(skipped)} bad rows[/] (data.skip_bad_rows): {dict(Counter(p.kind for p in skipped))}")
    model, tokenizer = prepare_model(cfg, run_dir)
    reporter.print(
        f"run dir [bold]{run_dir}[/]  model {cfg.model.path or 'tiny Qwen3'} ({count_parameters(model) / 1e6:.2f}M params)  "
        f"train {len(train)}  held-out {len(held_out)}  device {next(model.parameters()).device}"
    )
    seconds: dict[str, float] = {}
    evals: dict[str, EvalResult] = {}
    checkpoints = run_dir / "checkpoints"

    def timed(name, fn):
        t = time.perf_counter()
        with forward_precision(cfg, next(model.parameters()).device):
            result = fn()
        seconds[name] = round(time.perf_counter() - t, 1)
        return result

    def run_eval(stage: str) -> None:
        fault_point(f"eval_{stage}")
        with reporter.phase(f"eval:{stage}", num_batches(len(held_out), cfg.eval)) as bar:
            result = timed(f"eval_{stage}", lambda: evaluate(model, tokenizer, held_out, cfg.data, cfg.eval, correctness_term(reward_terms), bar, engine=cfg.rollout.engine))
        atomic_write_text(run_dir / f"eval_{stage}.jsonl", "".join(json.dumps(sample) + "\n" for sample in result.samples))
        evals[stage] = result
        reporter.print(f"held-out greedy accuracy {stage}: {result.accuracy:.1%}  by level {_pct(result.by_level)}  "
                       f"shows work {result.shows_work:.0%}  mean length {result.mean_length:.1f}")

    first = "after_sft" if cfg.sft.steps > 0 else "before_rl"
    rl_start = checkpoints / RL_START
    if resuming and is_complete(rl_start):
        # SFT and the first evaluation are done: take their results, and the RL starting weights
        state = read_state(rl_start)
        if state.get("data") not in (None, data_fingerprint(train)):
            raise ConfigError(f"data.train_path: the training problems changed since {run_dir} started; a resume would draw different prompts")
        evals.update({k: EvalResult(**v) for k, v in state["evals"].items()})
        seconds.update(state["seconds"])
        if (rl_start / "model.safetensors").exists():
            load_weights(rl_start, model)
        restore_rng_state(load_trainer(rl_start)["rng"], None)  # as an uninterrupted run would enter RL
    else:  # a new run, or one killed before RL began: SFT is deterministic, so redoing it is exact
        if cfg.sft.steps > 0:
            with reporter.phase("sft", cfg.sft.steps) as bar:
                timed("sft", lambda: sft_train(model, tokenizer, train, cfg.data, cfg.sft, cfg.run.seed, bar))
            model.zero_grad(set_to_none=True)  # SFT's last gradients must not leak into RL's first step or its metrics
            if cfg.sft.save_model:
                save_pretrained(model, tokenizer, run_dir / "sft")
        run_eval(first)
        save_checkpoint(
            checkpoints, RL_START, policy=model if cfg.sft.steps > 0 else None, trainer={"rng": rng_state(None)},
            state={"evals": {k: v.summary() for k, v in evals.items()}, "seconds": dict(seconds), "data": data_fingerprint(train)},
            config_text=to_toml(cfg).lstrip("\n"),
        )
    if cfg.model.lora_rank:  # after SFT and rl-start: RL trains adapters on the cold-started weights
        model = add_lora(model, cfg.model)
    resume_from = latest_step_checkpoint(checkpoints) if resuming else None
    if resume_from is not None:
        at = read_state(resume_from)["step"]
        if at > cfg.train.steps:
            raise ConfigError(f"train.steps: {cfg.train.steps} is below the checkpoint's step {at} ({resume_from}); raise it to resume")
        reporter.print(f"resuming from {resume_from} (step {at} of {cfg.train.steps})")
    records = []
    if cfg.train.steps > 0:
        with reporter.phase("grpo", cfg.train.steps) as bar:
            records = timed("grpo", lambda: grpo_train(model, tokenizer, train, cfg, reward_terms, run_dir, bar, resume_from))
        if len(records) != cfg.train.steps:  # never exit 0 having silently trained too little
            raise TrainingError(f"RL ended after {len(records)} of {cfg.train.steps} steps; see {run_dir / 'metrics.jsonl'}")
        run_eval("after_rl")
        plot_reward_curve(records, run_dir / "reward_curve.png", {k: v.accuracy for k, v in evals.items()})
    if cfg.train.save_model:
        save_pretrained(merged(model), tokenizer, run_dir / "model")
    seconds["total"] = round(time.perf_counter() - started, 1)

    summary = {
        "run_dir": str(run_dir),
        "parameters": count_parameters(model),
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "eval": {k: v.summary() for k, v in evals.items()},
        "gain_points": round(100 * (evals["after_rl"].accuracy - evals[first].accuracy), 1) if "after_rl" in evals else None,
        "seconds": seconds,
        "rl_steps": len(records),
        "resumed_from": str(resume_from) if resume_from else None,
        "data_rows_skipped": [f"{p.where}: {p.message}" for p in skipped],
    }
    atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    reporter.print(summary_table(evals, seconds))
    return summary


def data_fingerprint(examples: list[Example]) -> str:
    """A hash of the training problems in order: a resume must see the same ones."""
    digest = hashlib.sha256()
    for e in examples:
        digest.update(json.dumps([e.prompt, e.answer, e.solution]).encode())
    return digest.hexdigest()[:16]


def export_checkpoint(run_dir: Path, out_dir: Path, step: int | None = None) -> Path:
    """Write the policy of a run's checkpoint (the newest complete one, or `step`) as a Hugging
    Face model + tokenizer directory that `AutoModelForCausalLM.from_pretrained` loads."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if not (run_dir / "config.toml").is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no config.toml)")
    cfg = load_config(run_dir / "config.toml", for_training=False)  # exporting trains nothing
    checkpoints = run_dir / "checkpoints"
    if step is None:
        source = latest_step_checkpoint(checkpoints)
        if source is None:
            raise CheckpointError(f"{checkpoints}: no complete step checkpoint to export")
    else:
        source = checkpoints / step_name(step)
        if not is_complete(source):
            found = ", ".join(str(read_state(p)["step"]) for p in complete_step_checkpoints(checkpoints)) or "none"
            raise CheckpointError(f"{source}: no complete checkpoint for step {step} (complete steps: {found})")
    out, run = out_dir.resolve(), run_dir.resolve()
    if out == run or run in out.parents or out in run.parents:
        raise ConfigError(f"{out_dir}: the export must go outside the run directory and must not contain it")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        earlier_export = out.is_dir() and (out / "config.json").is_file() and not (out / "config.toml").exists() and not (out / "checkpoints").exists()
        if not earlier_export:
            raise ConfigError(f"{out_dir} exists and is not an earlier export; give a new or empty directory")
    skeleton = str(run_dir / "init") if not cfg.model.path else cfg.model.path
    tokenizer = load_tokenizer(skeleton, cfg.model.trust_remote_code)
    model = load_model(skeleton, cfg.run.dtype, "cpu", cfg.model.trust_remote_code)
    if cfg.model.lora_rank:
        model = add_lora(model, cfg.model)
    load_weights(source, model)
    model = merged(model)  # a LoRA run exports its adapters folded into the weights
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_pretrained(model, tokenizer, tmp)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return source


def _pct(levels: dict[str, float]) -> str:
    return " ".join(f"L{k}={v:.0%}" for k, v in levels.items())


def summary_table(evals: dict[str, EvalResult], seconds: dict[str, float]) -> Table:
    table = Table(title="held-out evaluation (greedy)")
    table.add_column("stage")
    table.add_column("accuracy", justify="right")
    levels = sorted({k for e in evals.values() for k in e.by_level})
    for level in levels:
        table.add_column(f"level {level}", justify="right")
    table.add_column("shows work", justify="right")
    table.add_column("mean length", justify="right")
    for stage, e in evals.items():
        table.add_row(
            stage, f"{e.accuracy:.1%}", *[f"{e.by_level.get(level, float('nan')):.1%}" for level in levels],
            f"{e.shows_work:.0%}", f"{e.mean_length:.1f}",
        )
    table.caption = "seconds: " + ", ".join(f"{k} {v}" for k, v in seconds.items())
    return table
