"""The report's plots: matplotlib figures rendered to inline SVG text.

Each function takes the runs (one, or several to overlay: one colour per run) and returns an
SVG string, or None when no run has what the plot shows (an SFT-only run has no reward curve).
Text stays text in the SVG (svg.fonttype = none), so the page is small and searchable; every
figure gets its own hash salt so the element ids of two inline SVGs never collide.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import re
from typing import Any, Callable

from rlvr.metrics import NOT_TERMS, finish_axes, moving_average
from rlvr.report.runs import Run, metric_keys, series

COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
BEHAVIOUR = {  # metric -> panel title: what drifts when a run goes wrong
    "rollout/mean_length": "completion length (tokens)",
    "rollout/entropy": "sampling entropy (nats/token)",
    "loss/kl": "KL to the reference",
    "loss/clip_frac": "clipped fraction",
    "rollout/truncated_frac": "truncated fraction",
    "loss/grad_norm": "gradient norm",
    "reward/frac_groups_all_equal": "groups with all-equal rewards",
    "loss/ratio_max": "largest importance ratio",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _svg(fig: Any, salt: str) -> str:
    plt = _pyplot()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.tight_layout()
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg")
    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg"):]  # the XML prologue and doctype do not belong inside HTML
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.DOTALL)  # a creation date and RDF: nothing a reader needs


def _window(n: int) -> int:
    return max(1, n // 20)


def _plain(text: str) -> str:
    """Text from a run (its name, a reward term's, a recipe stage's) drawn as written: a '$' would start
    matplotlib's mathtext (and an unbalanced one raise)."""
    return text.replace("$", r"\$")


def _label(runs: list[Run], run: Run, what: str) -> str:
    return _plain(f"{run.name}: {what}" if len(runs) > 1 else what)


def reward_curve(runs: list[Run]) -> str | None:
    """reward/mean per step (faint) and its moving average; each term's average when there are several."""
    if not any(series(r.records, "reward/mean")[0] for r in runs):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for run, colour in zip(runs, COLOURS):
        steps, values = series(run.records, "reward/mean")
        window = _window(len(values))
        ax.plot(steps, values, color=colour, alpha=0.25, linewidth=0.8)
        ax.plot(steps, moving_average(values, window), color=colour, label=_label(runs, run, f"reward (moving average, {window} steps)"))
        terms = [k for k in metric_keys([run], "reward/") if k.count("/") == 1 and k not in NOT_TERMS]
        if len(terms) > 1:
            for key, style in zip(terms, ("--", "-.", ":", (0, (5, 1)), (0, (1, 3)))):
                term_steps, term_values = series(run.records, key)
                ax.plot(term_steps, moving_average(term_values, window), color=colour, linestyle=style, linewidth=1,
                        label=_label(runs, run, key.split("/", 1)[1]))
    finish_axes(ax, "RL step", "reward", "Training reward (per term)")
    return _svg(fig, "reward")


def held_out_curve(runs: list[Run]) -> str | None:
    """Held-out greedy accuracy during RL (eval.every), from the evaluation before it to the one
    after; every other term's held-out mean (e.g. the strict verifier beside a lenient reward) dashed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    drawn = False
    for run, colour in zip(runs, COLOURS):
        first = run.first_eval
        last_step = run.records[-1]["step"] if run.records else 0
        for key, style in [("eval/accuracy", "-")] + [(k, "--") for k in metric_keys([run], "eval/") if _is_term_figure(k)]:
            steps, values = series(run.records, key)
            name = key.split("/", 1)[1]
            start = _eval_value(first, name)
            if start is not None:
                steps, values = [0, *steps], [start, *values]
            after = _eval_value(run.evals.get("after_rl"), name)
            if after is not None and last_step and (not steps or steps[-1] != last_step):
                steps, values = [*steps, last_step], [*values, after]
            if len(steps) >= 2:
                ax.plot(steps, values, color=colour, linestyle=style, marker="o", markersize=3,
                        label=_label(runs, run, f"greedy accuracy ({run.judge})" if key == "eval/accuracy" else f"{name} (greedy mean)"))
                drawn = True
    if not drawn:
        _pyplot().close(fig)
        return None
    finish_axes(ax, "RL step", "held-out", "Held-out problems during RL", unit=True)
    return _svg(fig, "held-out")


def _is_term_figure(key: str) -> bool:
    """eval/<term> (a reward term's greedy mean), not eval/accuracy or a sampled figure (eval/pass@4)."""
    name = key.split("/", 1)[1]
    return key != "eval/accuracy" and "@" not in name


def _eval_value(summary: dict | None, name: str) -> float | None:
    if summary is None:
        return None
    if name == "accuracy":
        return summary.get("accuracy")
    return (summary.get("terms", {}).get(name) or {}).get("greedy")


def pass_at_k(runs: list[Run]) -> str | None:
    """pass@k (solid) and maj@k (dashed) against k for every evaluation, before and after."""
    curves = [(run, evaluation, result) for run in runs for evaluation, result in run.evals.items() if result.get("sampled")]
    if not curves:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    ks_seen: set[int] = set()
    palette = iter(COLOURS * 4)
    for run, evaluation, result in curves:
        colour = next(palette)
        for metric, style in (("pass", "-"), ("maj", "--")):
            points = sorted((int(n.split("@")[1]), v) for n, v in result["sampled"].items() if n.startswith(f"{metric}@") and v is not None)
            if points:
                ks_seen.update(k for k, _ in points)
                ax.plot(*zip(*points), color=colour, linestyle=style, marker="o", markersize=3, label=_label(runs, run, f"{evaluation}: {metric}@k"))
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(ks_seen), [str(k) for k in sorted(ks_seen)])
    finish_axes(ax, "k (samples per problem)", "held-out", "pass@k and maj@k before and after", unit=True, legend="lower right")
    return _svg(fig, "pass-at-k")


def by_level(runs: list[Run]) -> str | None:
    """Greedy held-out accuracy per difficulty level, one bar per evaluation."""
    bars = [(run, evaluation, result["by_level"]) for run in runs for evaluation, result in run.evals.items() if result.get("by_level")]
    if not bars:
        return None
    levels = sorted({lv for _, _, by in bars for lv in by}, key=lambda lv: (len(lv), lv))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.8 / len(bars)
    for i, ((run, evaluation, by), colour) in enumerate(zip(bars, COLOURS * 4)):
        xs = [j + (i - (len(bars) - 1) / 2) * width for j in range(len(levels))]
        ax.bar(xs, [by.get(lv) or 0.0 for lv in levels], width=width, color=colour, label=_label(runs, run, evaluation))
    ax.set_xticks(range(len(levels)), [f"level {lv}" for lv in levels])
    ax.set_ylabel("greedy accuracy")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    ax.set_title("Held-out accuracy by level")
    return _svg(fig, "by-level")


def _small_multiples(runs: list[Run], keys: dict[str, str], title: str, salt: str, smooth: bool = True) -> str | None:
    # A metric constant in every run (the ratio at 1 without num_iterations, no clipping) is left out: a flat line says nothing.
    present = [k for k in keys if any(len(set(series(r.records, k)[1])) > 1 for r in runs)]
    if not present:
        return None
    plt = _pyplot()
    cols = min(3, len(present))
    rows = (len(present) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.4 * rows), squeeze=False)
    for ax, key in zip(axes.flat, present):
        for run, colour in zip(runs, COLOURS):
            steps, values = series(run.records, key)
            if smooth and len(values) > 20:
                ax.plot(steps, values, color=colour, alpha=0.2, linewidth=0.7)
                values = moving_average(values, _window(len(values)))
            ax.plot(steps, values, color=colour, linewidth=1.2, label=_plain(run.name))
        ax.set_title(keys[key], fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(present):]:
        ax.set_visible(False)
    if len(runs) > 1:
        axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return _svg(fig, salt)


def behaviour(runs: list[Run]) -> str | None:
    """Length, entropy, KL, clipping, truncation, gradient norm, all-equal groups, ratio spikes."""
    return _small_multiples(runs, BEHAVIOUR, "What the policy does (moving averages over the raw values)", "behaviour")


def hack_monitor(runs: list[Run]) -> str | None:
    """The hack monitor's detectors (share of the batch flagged) and the proxy-minus-strict gap."""
    keys = {k: k.split("/", 1)[1].replace("_", " ") for k in metric_keys(runs, "hack/")}
    return _small_multiples(runs, keys, "Hack monitor: share of each batch flagged; the proxy-minus-strict gap, its growth, the flag", "hack")


def sft_loss(runs: list[Run]) -> str | None:
    """The cold-start SFT loss per optimizer step (moving average over the raw values)."""
    if not any(r.sft_records for r in runs):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3))
    for run, colour in zip(runs, COLOURS):
        steps, values = series(run.sft_records, "loss/sft")
        if values:
            ax.plot(steps, values, color=colour, alpha=0.2, linewidth=0.7)
            ax.plot(steps, moving_average(values, _window(len(values))), color=colour, label=_label(runs, run, "SFT loss"))
    ax.set_yscale("log")
    finish_axes(ax, "SFT step", "cross-entropy (nats/token)", "Cold-start SFT")
    return _svg(fig, "sft")


def recipe_stages(runs: list[Run]) -> str | None:
    """A recipe's held-out greedy accuracy (and pass@1 where sampled) after each stage."""
    rows = [(run, row) for run in runs for row in run.stages]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for run, colour in zip(runs, COLOURS):
        stages = [row for r, row in rows if r is run]
        names = [_plain(row["stage"]) for row in stages]
        ax.plot(names, [row["accuracy"] for row in stages], color=colour, marker="o", label=_label(runs, run, "greedy"))
        pass1 = [row.get("sampled", {}).get("pass@1") for row in stages]
        if any(v is not None for v in pass1):
            ax.plot(names, [float("nan") if v is None else v for v in pass1], color=colour, marker="s", linestyle="--",
                    label=_label(runs, run, "pass@1"))
    finish_axes(ax, "stage", "held-out accuracy", "Held-out accuracy after each stage", unit=True)
    return _svg(fig, "recipe")


def draw_all(runs: list[Run]) -> dict[str, str]:
    """Every figure the runs have, by name. A figure whose data are those it was last drawn from
    in this process is not drawn again: a run redraws its report at every phase end and every
    run.report_every steps, and most figures read data that has not moved since (after RL the
    final evaluation changes only the evaluation figures), while one draw costs 0.1-1 s."""
    out = {}
    for name, draw in FIGURES.items():
        key = _digest([READS[name](run) for run in runs])
        last = _DRAWN.get(name)
        svg = last[1] if last is not None and last[0] == key else draw(runs)
        _DRAWN[name] = (key, svg)
        if svg is not None:
            out[name] = svg
    return out


def _digest(data: Any) -> bytes:
    return hashlib.blake2b(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL), digest_size=16).digest()


FIGURES: dict[str, Callable[[list[Run]], str | None]] = {
    "reward": reward_curve, "held-out": held_out_curve, "pass-at-k": pass_at_k, "by-level": by_level,
    "behaviour": behaviour, "hack": hack_monitor, "sft": sft_loss, "recipe": recipe_stages,
}
# What each figure reads of a run (a new figure declares its own: the test of this module checks
# every figure has an entry); the run's name labels every one.
READS: dict[str, Callable[[Run], Any]] = {
    "reward": lambda r: (r.name, r.records),
    "held-out": lambda r: (r.name, r.records, r.evals, r.judge),
    "pass-at-k": lambda r: (r.name, r.evals),
    "by-level": lambda r: (r.name, r.evals),
    "behaviour": lambda r: (r.name, r.records),
    "hack": lambda r: (r.name, r.records),
    "sft": lambda r: (r.name, r.sft_records),
    "recipe": lambda r: (r.name, r.stages),
}
_DRAWN: dict[str, tuple[bytes, str | None]] = {}  # figure -> (digest of what it was drawn from, its SVG)
