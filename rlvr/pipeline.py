"""The recipe: model -> data -> stages: cold-start SFT -> evaluate -> RL -> evaluate -> save.

The stages are named functions over a `RunContext` (`stages_for` lists them); each one that
finishes writes a completion checkpoint (`checkpoints/stage-<name>/`), so a resumed run skips
every stage already done and continues the first one that is not (RL from its step checkpoints).

`rlvr lab` runs it with the built-in defaults (tiny model, arithmetic); `rlvr train CONFIG` runs
it on the user's model and data. Everything a run produces lands in run.output_dir:

    config.toml           the resolved config (rerun with `rlvr train config.toml`)
    metrics.jsonl         one line per RL step
    samples.jsonl         sampled completions with rewards and advantages
    eval_<stage>.jsonl    every held-out completion with its verdict
    summary.json          accuracies (overall, per level), behaviour, timings
    reward_curve.png      the reward during RL, with held-out accuracy before/after
    report.html           the run on one page: plots, evaluations, doctor, hack monitor, samples
                          (at every stage's end and every run.report_every RL steps; `rlvr report`)
    stopped.json          only when the run stopped (hack monitor, NaN streak: the step; an error: the stage) and why
    model/                the final policy (save_pretrained)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import os
import random
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from rich.markup import escape as markup_escape
from rich.table import Table

from rlvr.allocator import retain_freed_memory
from rlvr.checkpoint import (
    RL_START,
    SFT_PREFIX,
    STAGE_PREFIX,
    CheckpointError,
    complete_step_checkpoints,
    fault_point,
    is_complete,
    latest_step_checkpoint,
    load_trainer,
    load_weights,
    read_state,
    remove_checkpoints,
    restore_rng_state,
    rng_state,
    save_checkpoint,
    step_name,
)
from rlvr.config import RESUMABLE_CHANGES, Config, ConfigError, atomic_write_text, changes_breaking_resume, flatten, load_config, save_config, to_toml
from rlvr.data import Example, Problem, format_prompt, load_jsonl_splits, solution_targets
from rlvr.distributed import make_learner
from rlvr.logprobs import set_logits_budget, set_prompt_sharing
from rlvr.rollout.engines import set_weight_packing
from rlvr.trackers import Trackers
from rlvr.loop import TrainingError, rl_train
from rlvr.metrics import STOP_FILE, JsonlWriter, PhaseBar, Reporter, plot_reward_curve, rewind_jsonl
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
from rlvr.sources import ModelSource, resolve_model, run_start
from rlvr.stages.evaluate import EvalResult, evaluate, headline, key_figures, num_batches, percent, write_eval
from rlvr.stages.sft import SFTProgress, sft_train
from rlvr.tasks.arithmetic import make_splits, sft_targets as arithmetic_sft_targets
from rlvr.tasks.code import sft_targets as code_sft_targets
from rlvr.reward import answer_check, build_reward_terms, close_reward_terms, correctness_term, other_terms, route_of


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


def check_routes(examples: Iterable[Example], terms: list, route_field: str) -> None:
    """Every row that names its own reward term (reward.route_field) names one that exists: a row
    no term may score would have a missing reward every time."""
    names = {t.name for t in terms}
    unknown = {}
    for e in examples:
        route = route_of(e, route_field)
        if route is not None and route not in names:
            unknown.setdefault(route, e.info.get("source") or e.prompt[:40])
    if unknown:
        raise ConfigError(f"reward.functions: rows name reward terms in their {route_field!r} field that no term is: "
                          f"{sorted(unknown)} (e.g. from {list(unknown.values())[0]!r}); the terms are {sorted(names)}")


def load_splits(cfg: Config, skipped: list[Problem] | None = None) -> tuple[list[Example], list[Example]]:
    if cfg.data.mix:
        from rlvr.data_mix import load_mixture

        return load_mixture(cfg, load_splits, skipped)
    if cfg.data.source == "arithmetic":
        return make_splits(cfg.task, cfg.run.seed)
    if cfg.data.source == "word_problems":
        from rlvr.tasks.word_problems import make_word_splits

        t = cfg.task
        return make_word_splits(t.min_ops, t.max_ops, t.max_value, t.num_train, t.num_eval, cfg.run.seed)
    if cfg.data.source == "code":
        from rlvr.tasks.code import make_code_splits

        return make_code_splits(cfg.task, cfg.run.seed)
    # a gold answer the correctness verifier refuses (boxed_math: cannot match it to itself) can never be rewarded
    if cfg.data.source == "reasoning_gym":
        from rlvr.tasks.gym import gym_splits

        return gym_splits(cfg.data, cfg.run.seed, cfg.reward.route_field)
    if cfg.data.source == "hf":
        from rlvr.data_hf import load_hf_splits

        return load_hf_splits(cfg.data, cfg.run.seed, need_solution=cfg.sft.steps > 0, answer_ok=answer_check(cfg.reward), skipped=skipped)
    return load_jsonl_splits(cfg.data, cfg.run.seed, need_solution=cfg.sft.steps > 0, answer_ok=answer_check(cfg.reward), skipped=skipped)


def prepare_model(cfg: Config, run_dir: Path):
    """The user's model, or the tiny lab model built, saved and loaded back the standard way."""
    device = resolve_device(cfg.run.device)
    path = cfg.model.path
    if not path:
        tokenizer = build_char_tokenizer(thinking=cfg.task.format != "plain", code=cfg.data.source == "code")
        path = str(save_pretrained(build_tiny_model(tokenizer, cfg.model.tiny, cfg.run.seed), tokenizer, run_dir / "init"))
    tokenizer = load_tokenizer(path, cfg.model.trust_remote_code)
    if cfg.data.chat_template:  # the template the run trains with is saved with its tokenizer (model/, exports)
        tokenizer.chat_template = Path(cfg.data.chat_template).read_text(encoding="utf-8")
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


def apply_run_settings(cfg: Config) -> None:
    """What every command that computes applies first: run.threads, the logits budget, prompt sharing, weight
    packing, the allocator's policy for freed memory and denormal flushing."""
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    set_logits_budget(cfg.run.logits_budget_mib)
    set_prompt_sharing(cfg.run.share_prompts)
    set_weight_packing(cfg.rollout.pack_weights)
    retain_freed_memory(cfg.run.retain_freed_memory)
    configure_cpu_math()


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


@dataclass
class RunContext:
    """What the stages share: the config, the model, the data, the run directory, the results."""

    cfg: Config
    reporter: Reporter
    run_dir: Path
    model: Any
    tokenizer: Any
    train: list[Example]
    held_out: list[Example]
    reward_terms: list
    evals: dict[str, EvalResult] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)
    resumed_from: Path | None = None
    resuming: bool = False
    trackers: Trackers | None = None  # run.trackers: TensorBoard, W&B, MLflow, trackio
    stage: str = ""  # the stage running now (what a failure's stopped.json names)

    @property
    def checkpoints(self) -> Path:
        return self.run_dir / "checkpoints"

    def timed(self, name: str, fn: Callable[[], Any]) -> Any:
        t = time.perf_counter()
        with forward_precision(self.cfg, next(self.model.parameters()).device):
            result = fn()
        self.seconds[name] = round(time.perf_counter() - t, 1)
        return result


@dataclass(frozen=True)
class Stage:
    """A named step of the recipe. `changes_weights`: its completion checkpoint carries the model."""

    name: str
    run: Callable[[RunContext], None]
    changes_weights: bool = False
    checkpointed: bool = True  # RL keeps its own step checkpoints; the final save needs none


def first_eval(cfg: Config) -> str:
    """The name of the evaluation RL's gain is measured from."""
    return "after_sft" if cfg.sft.steps > 0 else "before_rl"


def stages_for(cfg: Config) -> list[Stage]:
    """The recipe as data: SFT (if any) -> evaluate -> RL -> evaluate (if RL trains) -> save."""
    first = first_eval(cfg)
    plan = [Stage("eval_before_sft", functools.partial(eval_stage, "before_sft"))] if cfg.sft.steps > 0 and cfg.eval.before_sft else []
    plan += [Stage("sft", sft_stage, changes_weights=True)] if cfg.sft.steps > 0 else []
    if cfg.eval.before_rl:
        plan.append(Stage(f"eval_{first}", functools.partial(eval_stage, first)))
    plan.append(Stage("rl", rl_stage, checkpointed=False))
    if cfg.train.steps > 0 and cfg.eval.after_rl:
        plan.append(Stage("eval_after_rl", functools.partial(eval_stage, "after_rl")))
    plan.append(Stage("save", save_stage, checkpointed=False))
    return plan


def _run(cfg: Config, reporter: Reporter, command: str, resume: bool, reward_terms) -> dict:
    started = time.perf_counter()
    skipped: list[Problem] = []
    train, held_out = load_splits(cfg, skipped)  # bad data or model paths stop the run before anything is written
    check_routes(itertools.chain(train, held_out), reward_terms, cfg.reward.route_field)
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
    if resuming:  # what said the run had finished or stopped no longer holds (report.html reads both)
        (run_dir / "summary.json").unlink(missing_ok=True)
        (run_dir / STOP_FILE).unlink(missing_ok=True)
    apply_run_settings(cfg)
    seed_everything(cfg.run.seed)
    if skipped:
        reporter.print(f"[yellow]skipped {len(skipped)} bad rows[/] (data.skip_bad_rows): {dict(Counter(p.kind for p in skipped))}")
    model, tokenizer = prepare_model(cfg, run_dir)
    reporter.print(
        f"run dir [bold]{run_dir}[/]  model {cfg.model.path or 'tiny Qwen3'} ({count_parameters(model) / 1e6:.2f}M params)  "
        f"train {len(train)}  held-out {len(held_out)}  device {next(model.parameters()).device}"
    )
    # What the model sees, exactly (a prompt templated twice, or not at all, shows here at once).
    reporter.print("first prompt as the model sees it:", markup_escape(repr(format_prompt(tokenizer, train[0], cfg.data))))
    trackers = Trackers(cfg.run.trackers, run_dir, flatten(cfg), cfg.run.project, resuming)
    ctx = RunContext(cfg, reporter, run_dir, model, tokenizer, train, held_out, reward_terms, resuming=resuming, trackers=trackers)
    try:
        plan = stages_for(cfg)
        done = _completed_stages(ctx, plan) if resuming else 0
        for index, stage in enumerate(plan):
            if index < done:
                continue
            ctx.stage = stage.name
            stage.run(ctx)
            if stage.checkpointed:
                _record_completion(ctx, stage)
                refresh_report(ctx)
        ctx.seconds["total"] = round(time.perf_counter() - started, 1)
        summary = _write_summary(ctx, skipped)
        refresh_report(ctx)
        return summary
    except Exception as err:
        if not (run_dir / STOP_FILE).exists():  # the loop writes its own stops; anything else is said here
            atomic_write_text(run_dir / STOP_FILE, json.dumps({"step": None, "stage": ctx.stage, "by": "error",
                                                                "reason": f"{type(err).__name__}: {err}"}, indent=2) + "\n")
        refresh_report(ctx)  # a run that had to stop shows how far it got, and why
        raise
    finally:
        trackers.close()


def refresh_report(ctx: RunContext) -> None:
    """Redraw report.html from the run directory's files (run.report)."""
    if ctx.cfg.run.report:
        draw_report(ctx.run_dir, ctx.reporter)


def draw_report(run_dir: Path, reporter: Reporter) -> None:
    """report.html of a run or recipe directory. A page that fails to draw is a warning on the
    console: it must never be what ends a training run (the import too is inside the guard)."""
    try:
        from rlvr.report import write_report

        write_report([run_dir])
    except Exception as err:  # noqa: BLE001 - any plotting or reading failure, reported and survived
        reporter.print(f"[yellow]report.html not redrawn[/] ({type(err).__name__}: {markup_escape(str(err))}); "
                       f"`rlvr report {markup_escape(str(run_dir))}` retries")


# ----------------------------------------------------------------------------- the stages


def sft_stage(ctx: RunContext) -> None:
    """Cold-start SFT on (prompt, target) pairs: the arithmetic task's worked/bare mixture, or the
    data's own solutions (a user's, or verified traces from `rlvr rft`/`distill`), with the
    teacher's token-level term when distill.kl_coef > 0. Resumes from its newest sft-* checkpoint."""
    cfg = ctx.cfg
    if cfg.data.source in ("arithmetic", "word_problems"):  # the built-in tasks' worked / bare mixture
        fmt = cfg.task.format if cfg.data.source == "arithmetic" else "plain"
        targets = arithmetic_sft_targets(ctx.train, cfg.sft.batch_size, cfg.sft.worked_fraction, cfg.run.seed, fmt)
    elif cfg.data.source == "code":
        targets = code_sft_targets(ctx.train, cfg.sft.batch_size, cfg.sft.worked_fraction, cfg.run.seed)
    else:
        targets = solution_targets(ctx.train, cfg.sft.batch_size, cfg.run.seed)
    pairs = ((format_prompt(ctx.tokenizer, e, cfg.data), target) for e, target in targets)
    resume = None
    latest = complete_step_checkpoints(ctx.checkpoints, SFT_PREFIX)[-1:] if ctx.resuming else []
    if latest:
        state = read_state(latest[0])
        if state.get("data") != data_fingerprint(ctx.train):
            raise ConfigError(f"data.train_path: the training problems changed since {latest[0]} was written; a resume would draw different pairs")
        load_weights(latest[0], ctx.model)
        trainer = load_trainer(latest[0])
        resume = SFTProgress(state["step"], trainer["optimizer"], trainer["scheduler"])
        ctx.reporter.print(f"resuming SFT from {latest[0]} (step {resume.step} of {cfg.sft.steps})")
    rewind_jsonl(ctx.run_dir / "sft_metrics.jsonl", resume.step if resume else 0)
    teacher = load_teacher(cfg, ctx.tokenizer, ctx.model) if cfg.distill.kl_coef > 0 else None

    def save(progress: SFTProgress) -> None:
        path = save_checkpoint(ctx.checkpoints, f"{SFT_PREFIX}{progress.step:06d}", policy=ctx.model,
                               trainer={"optimizer": progress.optimizer, "scheduler": progress.scheduler},
                               state={"step": progress.step, "data": data_fingerprint(ctx.train)},
                               config_text=to_toml(cfg).lstrip("\n"))
        remove_checkpoints(ctx.checkpoints, SFT_PREFIX, keep=path)

    with ctx.reporter.phase("sft", cfg.sft.steps) as bar, JsonlWriter(ctx.run_dir / "sft_metrics.jsonl") as log:
        ctx.timed("sft", lambda: sft_train(ctx.model, ctx.tokenizer, pairs, cfg.sft, bar, resume=resume, checkpoint_every=cfg.checkpoint.sft_every,
                                           save=save, log=log.write, teacher=teacher, kl_coef=cfg.distill.kl_coef))
    ctx.model.zero_grad(set_to_none=True)  # SFT's last gradients must not leak into RL's first step or its metrics
    if cfg.sft.save_model:
        save_pretrained(ctx.model, ctx.tokenizer, ctx.run_dir / "sft")


def load_teacher(cfg: Config, tokenizer, student):
    """The frozen teacher of distillation's token-level term: it must share the student's tokenizer
    and output width (a KL over the vocabulary compares the same tokens, position by position)."""
    teacher, teacher_tokenizer = resolve_model(cfg.distill.teacher, "distill.teacher").load(cfg.run.dtype, str(next(student.parameters()).device))
    fix = "; set distill.kl_coef = 0 to distill by SFT on the teacher's verified traces alone"
    if teacher_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ConfigError(
            f"distill.kl_coef: the token-level term needs teacher and student to share a tokenizer, but {cfg.distill.teacher}'s "
            f"vocabulary ({len(teacher_tokenizer)} tokens) differs from the student's ({len(tokenizer)}){fix}"
        )
    widths = [m.get_output_embeddings().weight.shape[0] for m in (teacher, student)]
    if widths[0] != widths[1]:
        raise ConfigError(f"distill.kl_coef: teacher and student share a tokenizer but their output layers have {widths[0]} and {widths[1]} rows{fix}")
    teacher.eval().requires_grad_(False)
    return teacher


def eval_stage(name: str, ctx: RunContext) -> None:
    """Held-out evaluation (greedy, and pass@k / maj@k from eval.samples samples), written to
    eval_<name>.jsonl (and eval_<name>_samples.jsonl)."""
    cfg, held_out = ctx.cfg, ctx.held_out
    fault_point(f"eval_{name}")
    with ctx.reporter.phase(f"eval:{name}", num_batches(len(held_out), cfg.eval)) as bar:
        result = ctx.timed(f"eval_{name}", lambda: evaluate(ctx.model, ctx.tokenizer, held_out, cfg.data, cfg.eval, correctness_term(ctx.reward_terms),
                                                            bar, **evaluation_options(cfg), others=other_terms(ctx.reward_terms)))
    write_eval(ctx.run_dir, name, result)
    ctx.evals[name] = result
    if ctx.trackers is not None:
        ctx.trackers.log_eval(len(ctx.records) if name == "after_rl" else 0, name, result.summary())
    modes = "".join(f"  {mode}: {m['accuracy']:.1%} (length {m['mean_length']:.1f})" for mode, m in result.by_mode.items())
    thinking = f"  well-formed thinking {result.well_formed:.0%}" if result.well_formed is not None else ""
    ctx.reporter.print(f"held-out {name}: {headline(result)}  by level {_pct(result.by_level)}  "
                       f"shows work {result.shows_work:.0%}  mean length {result.mean_length:.1f}{thinking}{modes}")


def evaluation_options(cfg: Config) -> dict:
    """What `evaluate` takes from the rest of the config: the engine, the seed of its sampling, how
    completions end (rollout.stop) and the thinking tags and budget."""
    return {"engine": cfg.rollout.engine, "seed": cfg.run.seed, "stops": cfg.rollout.stop, "thinking": cfg.thinking}


def held_out_figures(ctx: RunContext, model) -> dict[str, float | None]:
    """The held-out figures RL logs every eval.every steps (eval/accuracy, eval/pass@k, ...)."""
    cfg = ctx.cfg
    result = evaluate(model, ctx.tokenizer, ctx.held_out, cfg.data, cfg.eval, correctness_term(ctx.reward_terms), PhaseBar(None, None),
                      **evaluation_options(cfg), others=other_terms(ctx.reward_terms))
    return {"eval/accuracy": result.accuracy, **{f"eval/{name}": value for name, value in result.sampled.items()},
            **{f"eval/{name}": value["greedy"] for name, value in result.terms.items()}}


def rl_stage(ctx: RunContext) -> None:
    """RL under the configured preset, through the configured learner (local, or Ray workers); resumes from its own step checkpoints."""
    cfg = ctx.cfg
    if cfg.model.lora_rank:  # after SFT: RL trains adapters on the cold-started weights
        ctx.model = add_lora(ctx.model, cfg.model)
    if cfg.train.steps == 0:
        return
    resume_from = latest_step_checkpoint(ctx.checkpoints) if ctx.resuming else None
    if resume_from is not None:
        at = read_state(resume_from)["step"]
        if at > cfg.train.steps:
            raise ConfigError(f"train.steps: {cfg.train.steps} is below the checkpoint's step {at} ({resume_from}); raise it to resume")
        ctx.reporter.print(f"resuming from {resume_from} (step {at} of {cfg.train.steps})")
    ctx.resumed_from = resume_from
    learner = make_learner(ctx.model, ctx.tokenizer, cfg)
    evaluate_policy = functools.partial(held_out_figures, ctx, learner.policy) if cfg.eval.every else None
    try:
        with ctx.reporter.phase("rl", cfg.train.steps) as bar:
            ctx.records = ctx.timed("rl", lambda: rl_train(learner, ctx.train, cfg, ctx.reward_terms, ctx.run_dir, bar, resume_from,
                                                           evaluate_policy, trackers=ctx.trackers, on_progress=lambda _: refresh_report(ctx)))
    finally:
        learner.close()  # Ray: its workers stop with the run, however it ends
    if len(ctx.records) != cfg.train.steps:  # never exit 0 having silently trained too little
        raise TrainingError(f"RL ended after {len(ctx.records)} of {cfg.train.steps} steps; see {ctx.run_dir / 'metrics.jsonl'}")


def save_stage(ctx: RunContext) -> None:
    """The reward plot and the final model (LoRA adapters merged in)."""
    if ctx.records:
        plot_reward_curve(ctx.records, ctx.run_dir / "reward_curve.png", {k: v.accuracy for k, v in ctx.evals.items()})
    if ctx.cfg.train.save_model:
        save_pretrained(merged(ctx.model), ctx.tokenizer, ctx.run_dir / "model")


# ----------------------------------------------------------------------------- stage completion and resume


def _record_completion(ctx: RunContext, stage: Stage) -> None:
    """A checkpoint that says `stage` is done: its results so far, the RNG state an uninterrupted
    run has here, and the weights when the stage changed them."""
    save_checkpoint(
        ctx.checkpoints, STAGE_PREFIX + stage.name, policy=ctx.model if stage.changes_weights else None,
        trainer={"rng": rng_state(None)},
        state={"stage": stage.name, "evals": {k: v.summary() for k, v in ctx.evals.items()}, "seconds": dict(ctx.seconds),
               "data": data_fingerprint(ctx.train)},
        config_text=to_toml(ctx.cfg).lstrip("\n"),
    )
    if stage.name == "sft":  # SFT's own progress checkpoints are superseded by the stage's
        remove_checkpoints(ctx.checkpoints, SFT_PREFIX)


def _completed_stages(ctx: RunContext, plan: list[Stage]) -> int:
    """How many leading stages of `plan` a resumed run can skip; restores their results, weights
    and the RNG state at the end of the last one. A run written before stage checkpoints existed
    has `rl-start` (SFT and the first evaluation done) instead."""
    checkpoints = [ctx.checkpoints / (STAGE_PREFIX + s.name) if s.checkpointed else None for s in plan]
    done = 0
    while done < len(plan) and checkpoints[done] is not None and is_complete(checkpoints[done]):
        done += 1
    legacy = ctx.checkpoints / RL_START
    if done == 0 and is_complete(legacy):
        done = next(i for i, s in enumerate(plan) if s.name == "rl")
        checkpoints[:done] = [legacy] * done
    if done == 0:
        return 0
    last = checkpoints[done - 1]
    state = read_state(last)
    if state.get("data") not in (None, data_fingerprint(ctx.train)):
        raise ConfigError(f"data.train_path: the training problems changed since {ctx.run_dir} started; a resume would draw different prompts")
    ctx.evals.update({k: EvalResult(**v) for k, v in state["evals"].items()})
    ctx.seconds.update(state["seconds"])
    with_weights = [c for c, s in zip(checkpoints[:done], plan) if s.changes_weights or c == legacy]
    if with_weights and (with_weights[-1] / "model.safetensors").exists():
        load_weights(with_weights[-1], ctx.model)
    restore_rng_state(load_trainer(last)["rng"], None)  # as an uninterrupted run would go on from here
    return done


def _write_summary(ctx: RunContext, skipped: list[Problem]) -> dict:
    evals, first = ctx.evals, first_eval(ctx.cfg)
    summary = {
        "run_dir": str(ctx.run_dir),
        "parameters": count_parameters(ctx.model),
        "trainable_parameters": sum(p.numel() for p in ctx.model.parameters() if p.requires_grad),
        "eval": {k: v.summary() for k, v in evals.items()},
        "gain_points": round(100 * (evals["after_rl"].accuracy - evals[first].accuracy), 1) if {"after_rl", first} <= set(evals) else None,
        "seconds": ctx.seconds,
        "rl_steps": len(ctx.records),
        "resumed_from": str(ctx.resumed_from) if ctx.resumed_from else None,
        "data_rows_skipped": [f"{p.where}: {p.message}" for p in skipped],
    }
    atomic_write_text(ctx.run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    ctx.reporter.print(summary_table(evals, ctx.seconds))
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
    # a LoRA run exports its adapters folded into the weights
    checkpoint = ModelSource(str(source), str(source), run_start(run_dir, cfg), source, cfg.model.lora_rank > 0, run_dir, cfg)
    model, tokenizer = checkpoint.load(cfg.run.dtype)
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
    table = Table(title="held-out evaluation (greedy; pass@k and maj@k from eval.samples; all figures in summary.json)")
    table.add_column("stage")
    table.add_column("accuracy", justify="right")
    levels = sorted({k for e in evals.values() for k in e.by_level})
    for level in levels:
        table.add_column(f"level {level}", justify="right")
    sampled = key_figures(name for e in evals.values() for name in e.sampled)
    for name in sampled:
        table.add_column(name, justify="right")
    table.add_column("shows work", justify="right")
    table.add_column("mean length", justify="right")
    for stage, e in evals.items():
        table.add_row(
            stage, f"{e.accuracy:.1%}", *[f"{e.by_level.get(level, float('nan')):.1%}" for level in levels],
            *[percent(e.sampled.get(name)) for name in sampled], f"{e.shows_work:.0%}", f"{e.mean_length:.1f}",
        )
        for mode, m in e.by_mode.items():  # a fused model: its prompts of each mode (per-level columns are of both)
            table.add_row(f"  {mode} prompts", f"{m['accuracy']:.1%}", *[""] * len(levels),
                          *[percent(e.sampled_by_mode.get(mode, {}).get(name)) for name in sampled], f"{m['shows_work']:.0%}", f"{m['mean_length']:.1f}")
    table.caption = "seconds: " + ", ".join(f"{k} {v}" for k, v in seconds.items())
    return table
