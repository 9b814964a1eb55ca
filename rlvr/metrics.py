"""Metrics: one JSON line per step (flushed and fsynced), progress bars, and the reward plot.

Metric names are namespaced by where they come from: `reward/`, `rollout/`, `loss/`, `time/`.
"""

from __future__ import annotations

import json
import math
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from rlvr.files import atomic_write_text


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null so every line stays parseable."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


STOP_FILE = "stopped.json"  # a run that stopped itself (hack monitor, NaN streak): the step and the reason


class JsonlWriter:
    """Appends one complete line per record; each line is flushed and fsynced before returning,
    so a killed run leaves every finished step on disk."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl_records(path: str | Path) -> list[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def rewind_jsonl(path: str | Path, last_step: int) -> list[dict[str, Any]]:
    """Keep the records with step <= last_step (a resumed run rewrites the rest), repairing a
    last line torn by a kill; rewritten atomically. Returns the kept records.

    Only the last line may be torn (every line is fsynced before the next is written): an
    unparseable line anywhere else is corruption and raises instead of being dropped."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break  # torn by a kill mid-write: that step is redone
            raise ValueError(f"{path}:{i + 1}: corrupt line (not the last one, so not a torn write)") from None
        if record.get("step", 0) <= last_step:
            kept.append(record)
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in kept))
    return kept


def make_console(stderr: bool = True) -> Console:
    """A rich console. Written to a file or a pipe (CI logs, `> run.log`) its tables are laid out
    160 columns wide, not rich's default 80 (which cut the final table to `accura…`), and text is
    not wrapped, so a message stays one line to grep; progress bars print once, finished."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=160, soft_wrap=True)
    return console


class Reporter:
    """Progress bars for the phases of a run (rich), quiet when `enabled` is False."""

    def __init__(self, console: Console | None = None, enabled: bool = True):
        self.console = console or make_console()
        self.enabled = enabled

    @contextmanager
    def phase(self, name: str, total: int) -> Iterator["PhaseBar"]:
        if not self.enabled:
            yield PhaseBar(None, None)
            return
        progress = Progress(
            TextColumn("[bold]{task.description:<10}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
            console=self.console,
            transient=False,
        )
        with progress:
            yield PhaseBar(progress, progress.add_task(name, total=total, info=""))

    def print(self, *args: Any) -> None:
        if self.enabled:
            self.console.print(*args)


class PhaseBar:
    def __init__(self, progress: Progress | None, task: Any):
        self._progress, self._task = progress, task

    def advance(self, info: str = "") -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=1, info=info)

    def rewind(self, done: int) -> None:
        """Back to `done` finished (a run that redoes steps after a lost learner)."""
        if self._progress is not None:
            self._progress.update(self._task, completed=done)


NOT_TERMS = {"reward/mean", "reward/std", "reward/missing", "reward/frac_groups_all_equal", "reward/kl_sequence"}


def moving_average(values: list[float], window: int) -> list[float]:
    return [sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1]) for i in range(len(values))]


def plot_reward_curve(records: list[dict[str, Any]], path: str | Path, evals: dict[str, float] | None = None) -> None:
    """reward/mean per RL step with a moving average, each reward term's moving average when there
    are several, held-out accuracy before/after, and the held-out curve when the run evaluated
    during RL (eval.every), starting from the evaluation before RL."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [r for r in records if r.get("reward/mean") is not None]  # a step with every reward missing has none
    steps = [r["step"] for r in records]
    rewards = [r["reward/mean"] for r in records]
    window = max(1, len(rewards) // 20)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, rewards, alpha=0.3, label="train reward (mean of batch)")
    ax.plot(steps, moving_average(rewards, window), label=f"moving average ({window} steps)")
    terms = [k for k in (records[0] if records else {}) if k.startswith("reward/") and k.count("/") == 1 and k not in NOT_TERMS]
    if len(terms) > 1:  # a reward mix: each term on its own
        for key in terms:
            points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
            if points:
                ax.plot([s for s, _ in points], moving_average([v for _, v in points], window), linewidth=1, linestyle="-.",
                        label=f"{key.split('/', 1)[1]} (moving average)")
    held_out = [(r["step"], r["eval/accuracy"]) for r in records if r.get("eval/accuracy") is not None]
    if held_out:  # eval.every: the held-out curve during RL, from the evaluation before it
        start = [(0, next(iter(evals.values())))] if evals else []
        ax.plot(*zip(*(start + held_out)), marker="o", markersize=3, color="black", label="held-out greedy accuracy (eval.every)")
    if evals:
        for (name, acc), style in zip(evals.items(), ("--", ":")):
            ax.axhline(acc, linestyle=style, color="gray", label=f"held-out greedy accuracy {name}: {acc:.1%}")
    ax.set_xlabel("RL step")
    ax.set_ylabel("reward / accuracy")
    ax.set_ylim(-0.02, max([1.02] + [v + 0.05 for v in rewards]))  # a weighted mix can sum past 1
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Reward during RL")
    _save_figure(fig, path)


def plot_pass_at_k(curves: dict[str, dict[str, Any]], path: str | Path, title: str) -> None:
    """pass@k (solid) and maj@k (dashed) against k, one colour per model, with 95% intervals.

    `curves`: {label: EvalResult.summary()} of models evaluated on the same problems and samples."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    all_ks: set[int] = set()
    for (label, result), colour in zip(curves.items(), ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")):
        for metric, style in (("pass", "-"), ("maj", "--")):
            points = sorted((int(name.split("@")[1]), value) for name, value in result["sampled"].items()
                            if name.startswith(f"{metric}@") and value is not None)
            if not points:
                continue
            ks, values = zip(*points)
            all_ks.update(ks)
            low = [values[i] - result["intervals"].get(f"{metric}@{k}", [values[i]] * 2)[0] for i, k in enumerate(ks)]
            high = [result["intervals"].get(f"{metric}@{k}", [values[i]] * 2)[1] - values[i] for i, k in enumerate(ks)]
            ax.errorbar(ks, values, yerr=[low, high], linestyle=style, marker="o", markersize=3, capsize=2, color=colour,
                        label=f"{label}: {metric}@k")
        ax.axhline(result["accuracy"], linestyle=":", color=colour, alpha=0.7, label=f"{label}: greedy {result['accuracy']:.1%}")
    if all_ks:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(all_ks), [str(k) for k in sorted(all_ks)])
    finish_axes(ax, "k (samples per problem)", "held-out accuracy", title, unit=True, legend="lower right")
    _save_figure(fig, path)


def plot_thinking_budget(budgets: dict[str, dict[str, Any]], path: str | Path, title: str) -> None:
    """Greedy held-out accuracy (overall and per level) and mean total completion length against
    the thinking budget; the unbudgeted run as dotted lines. `budgets`: {"none" | "<b>": EvalResult.summary()}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = sorted((int(b), r) for b, r in budgets.items() if b != "none")
    natural = budgets.get("none")
    fig, (acc_ax, len_ax) = plt.subplots(1, 2, figsize=(10, 4))
    xs = [b for b, _ in points]
    acc_ax.plot(xs, [r["accuracy"] for _, r in points], marker="o", color="black", label="all levels")
    levels = sorted({lv for _, r in points for lv in r["by_level"]})
    for level in levels:
        acc_ax.plot(xs, [r["by_level"].get(level) for _, r in points], marker=".", linewidth=1, label=f"level {level}")
    for mode in dict.fromkeys(m for _, r in points for m in r.get("by_mode", {})):  # a fused model: each mode's prompts
        acc_ax.plot(xs, [r["by_mode"].get(mode, {}).get("accuracy") for _, r in points], marker="s", linestyle="--", label=f"{mode} prompts")
    len_ax.plot(xs, [r["mean_length"] for _, r in points], marker="o", color="black", label="all levels")
    for level in levels:
        len_ax.plot(xs, [r.get("length_by_level", {}).get(level) for _, r in points], marker=".", linewidth=1, label=f"level {level}")
    if natural is not None:
        acc_ax.axhline(natural["accuracy"], linestyle=":", color="gray", label=f"no budget: {natural['accuracy']:.1%}")
        len_ax.axhline(natural["mean_length"], linestyle=":", color="gray", label=f"no budget: {natural['mean_length']:.1f}")
    for ax, label in ((acc_ax, "held-out greedy accuracy"), (len_ax, "mean completion length (tokens)")):
        ax.set_xlabel("thinking budget (tokens)")
        ax.set_ylabel(label)
        if xs:
            ax.set_xticks(xs, [str(x) for x in xs])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    acc_ax.set_ylim(-0.02, 1.02)
    fig.suptitle(title, fontsize=10)
    _save_figure(fig, path)


def finish_axes(ax: Any, xlabel: str, ylabel: str, title: str, *, unit: bool = False, legend: str = "best", fontsize: int = 8) -> None:
    """The labels, grid, legend and title every single-panel plot shares; `unit`: a 0..1 y axis (accuracies, rates)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if unit:
        ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc=legend, fontsize=fontsize)
    ax.set_title(title, fontsize=10)


def _save_figure(fig: Any, path: str | Path) -> None:
    """Write a matplotlib figure atomically (a reader never sees half a PNG) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    tmp = Path(path).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
