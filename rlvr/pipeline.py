"""The recipe of `lab`/`train`, in phases: cold-start SFT -> evaluate -> RL -> evaluate -> save.

A phase is one named step of this one run, a function over a `RunContext` (`phases_for` lists
them) that runs a stage (rlvr/stages/: SFT, evaluation) or the RL loop (loop.py). Each phase that
finishes writes a completion checkpoint (`checkpoints/phase-<name>/`), so a resumed run skips
every phase already done and continues the first one that is not (RL from its step checkpoints).
(`rlvr recipe` chains whole runs, its [[stage]] tables, each of which runs these phases.)

`rlvr lab` runs it with the built-in defaults (tiny model, arithmetic); `rlvr train CONFIG` runs
it on the user's model and data. Everything a run produces lands in run.output_dir:

    config.toml           the resolved config (rerun with `rlvr train config.toml`)
    metrics.jsonl         one line per RL step
    samples.jsonl         sampled completions with rewards and advantages
    eval_<name>.jsonl     every held-out completion with its verdict (before_rl, after_rl, ...)
    eval_<name>_samples.jsonl  with eval.samples = N: every sampled held-out completion with its verdict
    summary.json          accuracies (overall, per level), behaviour, timings; with samples, the discovery
                          ledger's counts (`ledger`: which problems RL discovered, sharpened, lost, ...)
    reward_curve.png      the reward during RL, with held-out accuracy before/after
    report.html           the run on one page: plots, evaluations, doctor, hack monitor, samples
                          (at every phase's end and every run.report_every RL steps; `rlvr report`)
    stopped.json          only when the run stopped (hack monitor, NaN streak: the step; an error: the phase) and why
    model/                the final policy (save_pretrained)
"""

from __future__ import annotations

import functools
import itertools
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from rich.markup import escape as markup_escape
from rich.table import Table

from rlvr.checkpoint import (
    SFT_PREFIX,
    PHASE_PREFIX,
    complete_step_checkpoints,
    fault_point,
    is_complete,
    latest_step_checkpoint,
    load_trainer,
    load_weights,
    read_state,
    refuse_older_layout,
    remove_checkpoints,
    restore_rng_state,
    rng_state,
    save_checkpoint,
    save_weights,
)
from rlvr.config import Config, ConfigError, flatten, load_config, save_config, to_toml
from rlvr.data import Example, Problem, format_prompt
from rlvr.data_check import data_report, summary_line
from rlvr.distributed import make_learner
from rlvr.distributed.plan import check_learner_fits
from rlvr.files import atomic_write_text
from rlvr.loop import TrainingError, rl_train
from rlvr.metrics import STOP_FILE, JsonlWriter, PhaseBar, Reporter, plot_reward_curve, rewind_jsonl
from rlvr.models import add_lora, check_model_path, count_parameters, merged, save_pretrained
from rlvr.report.runs import run_ledger
from rlvr.reward import build_reward_terms, close_reward_terms, correctness_term, other_terms
from rlvr.rollout.multiturn import ToolRenderer, ToolSettings
from rlvr.runtime import (
    RESUMABLE_CHANGES,
    apply_run_settings,
    changes_breaking_resume,
    check_engine,
    check_routes,
    data_fingerprint,
    draw_report,
    evaluation_options,
    forward_precision,
    new_run_dir,
    prepare_model,
    run_dir_name,
    seed_everything,
)
from rlvr.sources import load_teacher
from rlvr.stages.evaluate import EvalResult, evaluate, headline, key_figures, num_batches, percent, write_eval
from rlvr.stages.sft import SFTProgress, TokenTarget, sft_train
from rlvr.tasks import load_splits, task_for
from rlvr.trackers import Trackers


def prepare_run_dir(cfg: Config, command: str, resume: bool) -> tuple[Path, bool]:
    """The run directory, and whether this run continues one that is already there."""
    if not cfg.run.output_dir:
        if resume:
            raise ConfigError("run.output_dir: resuming needs the run directory")
        cfg.run.output_dir = run_dir_name(command)
    run_dir = Path(cfg.run.output_dir)
    started = (run_dir / "config.toml").exists()
    if resume and not started:
        raise ConfigError(f"run.output_dir: {run_dir} holds no run to resume (no config.toml)")
    if started and not (resume or cfg.checkpoint.auto_resume):
        raise ConfigError(
            f"run.output_dir: {run_dir} already holds a run; continue it with --resume {run_dir} "
            "(or checkpoint.auto_resume=true), or choose another directory"
        )
    if started:  # resuming past an older layout's stage-<name> checkpoints would redo those phases
        refuse_older_layout(run_dir, "run.output_dir")
    return new_run_dir(command, run_dir, setting="run.output_dir"), started


def run(cfg: Config, reporter: Reporter, command: str = "train", resume: bool = False) -> dict:
    """The whole recipe; with `resume` (or checkpoint.auto_resume) it continues the run in
    run.output_dir from its newest complete checkpoint, with the result of an uninterrupted run."""
    check_engine(cfg)  # a vLLM engine that cannot work here, before any model loads
    reward_terms = build_reward_terms(cfg.reward)  # import errors and a missing sandbox surface here, before any work
    try:
        return _run(cfg, reporter, command, resume, reward_terms)
    finally:
        close_reward_terms(reward_terms)


@dataclass
class RunContext:
    """What the phases share: the config, the model, the data, the run directory, the results."""

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
    phase: str = ""  # the phase running now (what a failure's stopped.json names)

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
class Phase:
    """A named step of one lab/train run (a new one: a function of the RunContext, listed in
    `phases_for`). `changes_weights`: its completion checkpoint carries the model."""

    name: str
    run: Callable[[RunContext], None]
    changes_weights: bool = False
    checkpointed: bool = True  # RL keeps its own step checkpoints; the final save needs none


def first_eval(cfg: Config) -> str:
    """The name of the evaluation RL's gain is measured from."""
    return "after_sft" if cfg.sft.steps > 0 else "before_rl"


def phases_for(cfg: Config) -> list[Phase]:
    """The recipe as data: SFT (if any) -> evaluate -> RL -> evaluate (if RL trains) -> save."""
    first = first_eval(cfg)
    plan = [Phase("eval_before_sft", functools.partial(eval_phase, "before_sft"))] if cfg.sft.steps > 0 and cfg.eval.before_sft else []
    plan += [Phase("sft", sft_phase, changes_weights=True)] if cfg.sft.steps > 0 else []
    if cfg.eval.before_rl:
        plan.append(Phase(f"eval_{first}", functools.partial(eval_phase, first)))
    plan.append(Phase("rl", rl_phase, checkpointed=False))
    if cfg.train.steps > 0 and cfg.eval.after_rl:
        plan.append(Phase("eval_after_rl", functools.partial(eval_phase, "after_rl")))
    plan.append(Phase("save", save_phase, checkpointed=False))
    return plan


def _run(cfg: Config, reporter: Reporter, command: str, resume: bool, reward_terms) -> dict:
    started = time.perf_counter()
    skipped: list[Problem] = []
    train, held_out = load_splits(cfg, skipped)  # bad data or model paths stop the run before anything is written
    check_routes(itertools.chain(train, held_out), reward_terms, cfg.reward.route_field)
    if cfg.model.path:
        check_model_path(cfg.model.path)
    if cfg.train.steps > 0:  # a learner that cannot fit its device is refused now, naming what would fit, not at its first step
        check_learner_fits(cfg, train)
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
    reporter.print(summary_line(data_report(train, held_out)))  # `rlvr data-check` says more, and fails on thresholds
    model, tokenizer = prepare_model(cfg, run_dir)
    reporter.print(
        f"run dir [bold]{run_dir}[/]  model {cfg.model.path or 'tiny Qwen3'} ({count_parameters(model) / 1e6:.2f}M params)  "
        f"train {len(train)}  held-out {len(held_out)}  device {next(model.parameters()).device}"
    )
    # What the model sees, exactly (a prompt templated twice, or not at all, shows here at once).
    tools = ToolSettings.from_config(cfg.rollout)  # with tools: rendered with them (and this loads them now, not after SFT)
    first = ToolRenderer(tokenizer, tools, cfg.data).start(train[0]).prompt_text if tools else format_prompt(tokenizer, train[0], cfg.data)
    reporter.print("first prompt as the model sees it:", markup_escape(repr(first)))
    trackers = Trackers(cfg.run.trackers, run_dir, flatten(cfg), cfg.run.project, resuming)
    ctx = RunContext(cfg, reporter, run_dir, model, tokenizer, train, held_out, reward_terms, resuming=resuming, trackers=trackers)
    try:
        plan = phases_for(cfg)
        done = _completed_phases(ctx, plan) if resuming else 0
        for index, phase in enumerate(plan):
            if index < done:
                continue
            ctx.phase = phase.name
            phase.run(ctx)
            if phase.checkpointed:
                _record_completion(ctx, phase)
                refresh_report(ctx)
        ctx.seconds["total"] = round(time.perf_counter() - started, 1)
        summary = _write_summary(ctx, skipped)
        refresh_report(ctx)
        return summary
    except Exception as err:
        if not (run_dir / STOP_FILE).exists():  # the loop writes its own stops; anything else is said here
            atomic_write_text(run_dir / STOP_FILE, json.dumps({"step": None, "phase": ctx.phase, "by": "error",
                                                                "reason": f"{type(err).__name__}: {err}"}, indent=2) + "\n")
        refresh_report(ctx)  # a run that had to stop shows how far it got, and why
        raise
    finally:
        trackers.close()


def refresh_report(ctx: RunContext) -> None:
    """Redraw report.html from the run directory's files (run.report)."""
    if ctx.cfg.run.report:
        draw_report(ctx.run_dir, ctx.reporter)


# ----------------------------------------------------------------------------- the phases


def tool_pairs(renderer: ToolRenderer, targets: Iterator[tuple[Example, Any]]) -> Iterator[tuple[list[int], TokenTarget]]:
    """SFT pairs of a run with tools: a target is the model's answer (text) or a tool trace (the messages after the
    prompt: assistant turns and tool results), laid out in tokens as the multi-turn sampler lays it out. A data row
    with a `conversation` field (what `rlvr rft` keeps from a tool run) trains on that conversation, not on its
    `solution` text (the model's turns joined, for reading)."""
    for example, target in targets:
        saved = example.info.get("conversation") if isinstance(example.info, dict) else None
        if isinstance(target, list):
            completion = target
        elif isinstance(saved, list) and target == example.solution:  # a row `rlvr rft` kept from a tool run: its conversation
            completion = saved
        else:
            completion = [{"role": "assistant", "content": target}]
        prompt_ids, ids, trained = renderer.sft_pair(example, completion)
        yield prompt_ids, TokenTarget(ids, trained)


def sft_phase(ctx: RunContext) -> None:
    """Cold-start SFT on (prompt, target) pairs, as the task draws them (`Task.sft_targets`): the built-in
    tasks' worked/bare mixture, or the data's own solutions (a user's, or verified traces from `rlvr rft`/`distill`), with the
    teacher's token-level term when distill.kl_coef > 0. Resumes from its newest sft-* checkpoint."""
    cfg = ctx.cfg
    targets = task_for(cfg).sft_targets(cfg, ctx.train)
    tools = ToolSettings.from_config(cfg.rollout)
    if tools is None:
        pairs = ((format_prompt(ctx.tokenizer, e, cfg.data), target) for e, target in targets)
    else:  # prompts rendered with their tools, as RL samples them; a target may be a whole tool trace
        pairs = tool_pairs(ToolRenderer(ctx.tokenizer, tools, cfg.data), targets)
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
        path = save_checkpoint(ctx.checkpoints, f"{SFT_PREFIX}{progress.step:06d}", weights=functools.partial(save_weights, policy=ctx.model),
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


def eval_phase(name: str, ctx: RunContext) -> None:
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


def held_out_figures(ctx: RunContext, model) -> dict[str, float | None]:
    """The held-out figures RL logs every eval.every steps (eval/accuracy, eval/pass@k, ...)."""
    cfg = ctx.cfg
    result = evaluate(model, ctx.tokenizer, ctx.held_out, cfg.data, cfg.eval, correctness_term(ctx.reward_terms), PhaseBar(None, None),
                      **evaluation_options(cfg), others=other_terms(ctx.reward_terms))
    return {"eval/accuracy": result.accuracy, **{f"eval/{name}": value for name, value in result.sampled.items()},
            **{f"eval/{name}": value["greedy"] for name, value in result.terms.items()}}


def rl_phase(ctx: RunContext) -> None:
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
    if cfg.distributed.backend == "ray" and cfg.distributed.learner_workers > 0:
        # The ranks hold the policy (and the object store its first weights): this process keeps
        # no copy of its own until the ranks hand back the trained one (issue 35).
        ctx.model.to("meta")
    evaluate_policy = functools.partial(held_out_figures, ctx) if cfg.eval.every else None
    try:
        with ctx.reporter.phase("rl", cfg.train.steps) as bar:
            ctx.records = ctx.timed("rl", lambda: rl_train(learner, ctx.train, cfg, ctx.reward_terms, ctx.run_dir, bar, resume_from,
                                                           evaluate_policy, trackers=ctx.trackers, on_progress=lambda _: refresh_report(ctx)))
        with learner.evaluation_policy() as trained:  # learner ranks hold the trained weights: gathered into the run's model
            if trained is not ctx.model:
                if next(ctx.model.parameters()).is_meta:
                    ctx.model = trained
                else:
                    ctx.model.load_state_dict(trained.state_dict())
    finally:
        learner.close()  # Ray: its workers stop with the run, however it ends
    if len(ctx.records) != cfg.train.steps:  # never exit 0 having silently trained too little
        raise TrainingError(f"RL ended after {len(ctx.records)} of {cfg.train.steps} steps; see {ctx.run_dir / 'metrics.jsonl'}")


def save_phase(ctx: RunContext) -> None:
    """The reward plot and the final model (LoRA adapters merged in)."""
    if ctx.records:
        plot_reward_curve(ctx.records, ctx.run_dir / "reward_curve.png", {k: v.accuracy for k, v in ctx.evals.items()})
    if ctx.cfg.train.save_model:
        save_pretrained(merged(ctx.model), ctx.tokenizer, ctx.run_dir / "model")


# ----------------------------------------------------------------------------- phase completion and resume


def _record_completion(ctx: RunContext, phase: Phase) -> None:
    """A checkpoint that says `phase` is done: its results so far, the RNG state an uninterrupted
    run has here, and the weights when the phase changed them."""
    save_checkpoint(
        ctx.checkpoints, PHASE_PREFIX + phase.name, weights=functools.partial(save_weights, policy=ctx.model) if phase.changes_weights else None,
        trainer={"rng": rng_state(None)},
        state={"phase": phase.name, "evals": {k: v.summary() for k, v in ctx.evals.items()}, "seconds": dict(ctx.seconds),
               "data": data_fingerprint(ctx.train)},
        config_text=to_toml(ctx.cfg).lstrip("\n"),
    )
    if phase.name == "sft":  # SFT's own progress checkpoints are superseded by the phase's
        remove_checkpoints(ctx.checkpoints, SFT_PREFIX)


def _completed_phases(ctx: RunContext, plan: list[Phase]) -> int:
    """How many leading phases of `plan` a resumed run can skip; restores their results, weights
    and the RNG state at the end of the last one."""
    checkpoints = [ctx.checkpoints / (PHASE_PREFIX + s.name) if s.checkpointed else None for s in plan]
    done = 0
    while done < len(plan) and checkpoints[done] is not None and is_complete(checkpoints[done]):
        done += 1
    if done == 0:
        return 0
    last = checkpoints[done - 1]
    state = read_state(last)
    if state["data"] != data_fingerprint(ctx.train):
        raise ConfigError(f"data.train_path: the training problems changed since {ctx.run_dir} started; a resume would draw different prompts")
    ctx.evals.update({k: EvalResult(**v) for k, v in state["evals"].items()})
    ctx.seconds.update(state["seconds"])
    with_weights = [c for c, s in zip(checkpoints[:done], plan) if s.changes_weights]
    if with_weights:
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
    # from the files the evaluations wrote, as the report reads them (a resumed run's results hold no samples)
    summary["ledger"], _ = run_ledger(ctx.run_dir, summary["eval"])
    atomic_write_text(ctx.run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    ctx.reporter.print(summary_table(evals, ctx.seconds))
    if summary["ledger"]:
        ledger = summary["ledger"]
        ctx.reporter.print(f"discovery ledger {ledger['start']} -> {ledger['end']} (N = {ledger['samples_per_problem']} samples per problem "
                           f"each, {ledger['problems']} problems): " + ", ".join(f"{cls} {count}" for cls, count in ledger["counts"].items()))
    return summary


def _pct(levels: dict[str, float]) -> str:
    return " ".join(f"L{k}={v:.0%}" for k, v in levels.items())


def summary_table(evals: dict[str, EvalResult], seconds: dict[str, float]) -> Table:
    table = Table(title="held-out evaluation (greedy; pass@k and maj@k from eval.samples; all figures in summary.json)")
    table.add_column("evaluation")
    table.add_column("accuracy", justify="right")
    levels = sorted({k for e in evals.values() for k in e.by_level})
    for level in levels:
        table.add_column(f"level {level}", justify="right")
    sampled = key_figures(name for e in evals.values() for name in e.sampled)
    for name in sampled:
        table.add_column(name, justify="right")
    tools = any(e.tools for e in evals.values())  # a run with tools: how often the model called one, and the no-tool control
    if tools:
        table.add_column("tool calls", justify="right")
        table.add_column("calls failed", justify="right")
        table.add_column("without tools", justify="right")
    table.add_column("shows work", justify="right")
    table.add_column("mean length", justify="right")
    for label, e in evals.items():
        tool_cells = [percent(e.tools.get("tools/call_rate")), percent(e.tools.get("tools/failed_frac")),
                      percent(e.without_tools["accuracy"] if e.without_tools else None)] if tools else []
        table.add_row(
            label, f"{e.accuracy:.1%}", *[f"{e.by_level.get(level, float('nan')):.1%}" for level in levels],
            *[percent(e.sampled.get(name)) for name in sampled], *tool_cells, f"{e.shows_work:.0%}", f"{e.mean_length:.1f}",
        )
        for mode, m in e.by_mode.items():  # a fused model: its prompts of each mode (per-level columns are of both)
            table.add_row(f"  {mode} prompts", f"{m['accuracy']:.1%}", *[""] * len(levels),
                          *[percent(e.sampled_by_mode.get(mode, {}).get(name)) for name in sampled], *[""] * len(tool_cells),
                          f"{m['shows_work']:.0%}", f"{m['mean_length']:.1f}")
    table.caption = "seconds: " + ", ".join(f"{k} {v}" for k, v in seconds.items())
    return table
