"""`rlvr eval`: greedy accuracy, pass@k, maj@k and mean@N of a model on held-out problems,
optionally beside a second model on the same problems with the same random numbers.

    rlvr eval runs/a                           the run's final policy on the run's own held-out split
    rlvr eval runs/a --compare runs/a@sft      ... beside the model RL started from
    rlvr eval path/to/model --data test.jsonl  any model on your problems
    rlvr eval runs/a --samples 32 --k 1,4,16 --temperature 0.7

Writes into --out: eval_<label>.jsonl (greedy completions with verdicts), eval_<label>_samples.jsonl
(every sampled completion with its verdict and the answer it votes for), summary.json and
pass_at_k.png (pass@k and maj@k against k, one colour per model); with --compare and samples, the
discovery ledger (`ledger` in summary.json, ledger.jsonl: each problem discovered, sharpened, unchanged,
blunted, lost or unsolved from the compared start to the model).
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from rlvr.config import Config, ConfigError, load_config, with_overrides
from rlvr.data import Example, read_jsonl
from rlvr.files import atomic_write_text
from rlvr.metrics import Reporter, plot_pass_at_k, plot_thinking_budget
from rlvr.models import resolve_device
from rlvr.reward import answer_check, build_reward_terms, close_reward_terms, correctness_name, correctness_term, other_terms
from rlvr.runtime import apply_run_settings, check_engine, evaluation_options, forward_precision, new_run_dir
from rlvr.sources import ModelSource, resolve_model
from rlvr.stages.estimators import LEDGER_CLASSES, discovery_ledger, solved_counts
from rlvr.stages.evaluate import EvalResult, evaluate, num_batches, percent, write_eval
from rlvr.tasks import load_splits, task_for


DEFAULT_SAMPLES = 8  # when neither --samples nor the config's eval.samples says


def eval_config(source: ModelSource, config_path: str | None, overrides: list[str]) -> Config:
    """The settings of an evaluation: a run's own config (its data, reward and eval sections) or
    the defaults (and --config), then the overrides."""
    if source.run_dir is not None:
        if config_path:
            raise ConfigError(f"--config: {source.run_dir} is a run directory and brings its own config.toml; give overrides instead")
        config_path = str(source.run_dir / "config.toml")
    cfg = load_config(config_path, overrides, for_training=False)
    task_for(cfg)  # data.source's own rules (Config.validate cannot know the tasks, which read it)
    return cfg


def held_out_problems(cfg: Config, data: str | None) -> tuple[list[Example], str]:
    """The problems to evaluate on and where they come from: --data, else the config's held-out split."""
    if data:
        return read_jsonl(data, cfg.data, answer_ok=answer_check(cfg.reward)), data
    return load_splits(cfg)[1], task_for(cfg).held_out_label(cfg)


def evaluate_source(source: ModelSource, cfg: Config, problems: list[Example], terms, reporter: Reporter, label: str,
                    budgets: list[int] | None = None) -> EvalResult | dict[int, EvalResult]:
    """Load `source` and evaluate it under cfg.eval (forwards under run.autocast, as in training);
    with `budgets`, once per thinking budget ({budget: result}, -1: none)."""
    apply_run_settings(cfg)
    device = resolve_device(cfg.run.device)
    model, tokenizer = source.load(cfg.run.dtype, str(device))
    results = {}
    for budget in budgets if budgets is not None else [cfg.thinking.budget]:
        run_cfg = with_overrides(cfg, [f"thinking.budget={budget}"], for_training=False)
        name = label if budgets is None else f"{label}:{'none' if budget < 0 else budget}"
        with forward_precision(cfg, device), reporter.phase(f"eval:{name}", num_batches(len(problems), cfg.eval)) as bar:
            results[budget] = evaluate(model, tokenizer, problems, run_cfg.data, run_cfg.eval, correctness_term(terms), bar,
                                       **evaluation_options(run_cfg), others=other_terms(terms))
    return results if budgets is not None else results[cfg.thinking.budget]


def run_eval(spec: str, overrides: list[str], reporter: Reporter, *, config_path: str | None = None, data: str | None = None,
             compare: str | None = None, out: str | None = None, budgets: list[int] | None = None) -> dict:
    """Evaluate `spec` (and `compare`) and write the results into `out`; returns the summary. With
    `budgets`, `spec` is evaluated once per thinking budget instead (run_budgets)."""
    if budgets is not None:
        if compare:
            raise ConfigError("--thinking-budget evaluates one model at several budgets; it cannot be combined with --compare")
        return run_budgets(spec, overrides, reporter, budgets, config_path=config_path, data=data, out=out)
    source = resolve_model(spec)
    other = resolve_model(compare, "--compare") if compare else None
    def key(override: str) -> str:
        return override.split("=", 1)[0].strip()

    if not any(key(o) == "eval.samples" for o in overrides):  # the command is about pass@k: sample unless told not to
        base = eval_config(source, config_path, [o for o in overrides if key(o) != "eval.k"])
        if not base.eval.samples:
            overrides = [f"eval.samples={DEFAULT_SAMPLES}", *overrides]
    cfg = eval_config(source, config_path, overrides)
    if not cfg.eval.samples and compare:
        reporter.print("[yellow]note:[/] eval.samples = 0: comparing greedy accuracy only (pass@k needs --samples N)")
    problems, where = held_out_problems(cfg, data)
    out_dir = new_run_dir("eval", out)
    check_engine(cfg)
    terms = build_reward_terms(cfg.reward)
    try:
        results = {}
        for label, src in (("model", source), ("compare", other)):
            if src is None:
                continue
            results[label] = result = evaluate_source(src, cfg, problems, terms, reporter, label)
            write_eval(out_dir, label, result)
            reporter.print(f"{label}: {src.description}")
    finally:
        close_reward_terms(terms)
    summary = {
        "problems": {"count": next(iter(results.values())).num_problems, "source": where},
        "settings": {"samples": cfg.eval.samples, "temperature": cfg.eval.temperature, "top_p": cfg.eval.top_p, "k": cfg.eval.ks(),
                     "max_new_tokens": cfg.eval.max_new_tokens, "seed": cfg.run.seed, "correctness": correctness_name(cfg.reward)},
        "models": {label: {"source": src.description, **results[label].summary()} for label, src in (("model", source), ("compare", other)) if src},
    }
    if other is not None and cfg.eval.samples:  # which problems RL moved, and how: --compare is the start
        ledger = ledger_of(results["compare"], results["model"], problems)
        atomic_write_text(out_dir / "ledger.jsonl", "".join(json.dumps(row) + "\n" for row in ledger.pop("rows")))
        summary["ledger"] = ledger
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    if cfg.eval.samples:
        title = f"{len(problems)} problems, N = {cfg.eval.samples} samples at T = {cfg.eval.temperature} ({where})"
        plot_pass_at_k({f"{label} ({src.spec})": summary["models"][label] for label, src in (("model", source), ("compare", other)) if src},
                       out_dir / "pass_at_k.png", title)
    reporter.print(comparison_table(results, {"model": source, "compare": other}))
    if "ledger" in summary:
        reporter.print(ledger_table(summary["ledger"], other.spec, source.spec))  # type: ignore[union-attr]
    reporter.print(f"written to [bold]{out_dir}[/]")
    return summary


def ledger_of(start: EvalResult, end: EvalResult, problems: list[Example]) -> dict:
    """The discovery ledger of two evaluations of the same problems with the same N (rlvr.stages.estimators), with
    one row per problem: the start's pass@1 and pass@N, the end's, and the class."""
    n, problems = start.samples_per_problem, problems[: start.num_problems]  # eval.max_problems: only the first were evaluated
    s, e = solved_counts(start.sampled_rows, len(problems)), solved_counts(end.sampled_rows, len(problems))
    ledger = discovery_ledger(s, e, n, [str(p.level) for p in problems])
    ledger["rows"] = [{"problem": i, "level": p.level, "prompt": p.prompt, "start_pass@1": s[i] / n, f"start_pass@{n}": float(s[i] > 0),
                       "end_pass@1": e[i] / n, f"end_pass@{n}": float(e[i] > 0), "class": cls}
                      for i, (p, cls) in enumerate(zip(problems, ledger.pop("classes")))]
    return ledger


def ledger_table(ledger: dict, start: str, end: str) -> Table:
    """Problems per class, overall and per level."""
    n = ledger["samples_per_problem"]
    table = Table(title=f"discovery ledger: {start} -> {end}, {n} samples per problem each ({ledger['samples_per_model']} per model); "
                        f"discovered = never solved by the start in {n}, solved after")
    table.add_column("level")
    for cls in LEDGER_CLASSES:
        table.add_column(cls, justify="right")
    for level, counts in [*ledger["by_level"].items(), ("all", ledger["counts"])]:
        table.add_row(level, *[str(counts[c]) for c in LEDGER_CLASSES])
    return table


def comparison_table(results: dict[str, EvalResult], sources: dict[str, ModelSource | None]) -> Table:
    """One row per figure (greedy accuracy, pass@k, maj@k, mean@N), one column per model, with intervals."""
    table = Table(title="held-out evaluation (95% bootstrap intervals over problems)")
    table.add_column("figure")
    for label in results:
        table.add_column(f"{label}: {sources[label].spec}", justify="right")  # type: ignore[union-attr]
    names = ["accuracy"] + list(dict.fromkeys(n for r in results.values() for n in r.sampled))
    for name in names:
        cells = []
        for r in results.values():
            value, interval = r.figure(name), r.intervals.get(name)
            cells.append(percent(value) + (f" [{interval[0]:.1%}, {interval[1]:.1%}]" if interval and value is not None else ""))
        table.add_row("greedy accuracy" if name == "accuracy" else name, *cells)
    for term in dict.fromkeys(t for r in results.values() for t in r.terms):
        for where in ("greedy", "samples"):
            values = [r.terms.get(term, {}).get(where) for r in results.values()]
            if any(v is not None for v in values):
                table.add_row(f"{term} ({where})", *["n/a" if v is None else f"{v:.3f}" for v in values])
    return table


def evaluate_into(source: ModelSource, cfg: Config, data: str | None, out_dir: Path, reporter: Reporter) -> dict:
    """Evaluate one model under cfg (on `data`, else the config's held-out split) into out_dir:
    eval_model*.jsonl and summary.json; returns the evaluation's summary."""
    problems, where = held_out_problems(cfg, data)
    check_engine(cfg)
    terms = build_reward_terms(cfg.reward)
    try:
        result = evaluate_source(source, cfg, problems, terms, reporter, "model")
    finally:
        close_reward_terms(terms)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_eval(out_dir, "model", result)
    summary = {"problems": {"count": len(problems), "source": where}, "models": {"model": {"source": source.description, **result.summary()}}}
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    return result.summary()


def run_budgets(spec: str, overrides: list[str], reporter: Reporter, budgets: list[int], *, config_path: str | None = None,
                data: str | None = None, out: str | None = None) -> dict:
    """The latency/accuracy trade-off: `spec` evaluated with no budget, then at each thinking budget
    (budget forcing, thinking.*), on the same problems with the same settings. Writes
    eval_budget_<b>*.jsonl, summary.json and thinking_budget.png into `out`."""
    if any(b < 0 for b in budgets):
        raise ConfigError(f"--thinking-budget: budgets are thinking tokens, >= 0; got {budgets}")
    source = resolve_model(spec)
    cfg = eval_config(source, config_path, overrides)
    problems, where = held_out_problems(cfg, data)
    out_dir = new_run_dir("eval-budget", out)
    check_engine(cfg)
    terms = build_reward_terms(cfg.reward)
    try:
        results = evaluate_source(source, cfg, problems, terms, reporter, "model", budgets=[-1, *sorted(set(budgets))])
    finally:
        close_reward_terms(terms)
    for budget, result in results.items():
        write_eval(out_dir, f"budget_{'none' if budget < 0 else budget}", result)
    summary = {
        "model": source.description, "problems": {"count": len(problems), "source": where},
        "thinking": {"open": cfg.thinking.open, "close": cfg.thinking.close, "forced": cfg.thinking.forced},
        "budgets": {("none" if b < 0 else str(b)): r.summary() for b, r in results.items()},
    }
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    plot_thinking_budget(summary["budgets"], out_dir / "thinking_budget.png", f"{source.spec}: {len(problems)} problems ({where})")
    reporter.print(budget_table(results))
    reporter.print(f"written to [bold]{out_dir}[/]")
    return summary


def budget_table(results: dict[int, EvalResult]) -> Table:
    """One row per budget: greedy accuracy (overall, per level), mean total length, thinking length, well-formed share."""
    table = Table(title="held-out accuracy and length against the thinking budget (greedy; budget forcing)")
    levels = sorted({lv for r in results.values() for lv in r.by_level})
    modes = list(dict.fromkeys(m for r in results.values() for m in r.by_mode))
    for column in ("budget", "accuracy", *[f"level {lv}" for lv in levels], *[f"{m} mode" for m in modes], "mean length", "thinking length",
                   "well-formed"):
        table.add_column(column, justify="right")
    for budget, r in results.items():
        table.add_row("none" if budget < 0 else str(budget), f"{r.accuracy:.1%}", *[percent(r.by_level.get(lv)) for lv in levels],
                      *[percent(r.by_mode.get(m, {}).get("accuracy")) for m in modes],
                      f"{r.mean_length:.1f}", "n/a" if r.thinking_length is None else f"{r.thinking_length:.1f}", percent(r.well_formed))
    return table
