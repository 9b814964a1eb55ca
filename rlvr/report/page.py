"""report.html: one self-contained page per run (or several runs overlaid), from its files alone.

Nothing is fetched when the page opens: the plots are inline SVG from matplotlib, the styles and
the few lines of script (the samples' search and filter) are in the page. Every value taken from
a run (prompts, completions, config, verdicts) is HTML-escaped, so a completion that holds markup
or a script shows as text.
"""

from __future__ import annotations

import html
import json
from datetime import datetime
from pathlib import Path
from typing import Iterable

from rlvr.config import flatten
from rlvr.doctor import MIN_STEPS
from rlvr.files import atomic_write_text
import rlvr.report.figures as figures  # the submodule itself: this package's __init__ imports this module
from rlvr.report.runs import Run, load_run, metric_keys, series
from rlvr.stages.estimators import LEDGER_CLASSES

REPORT = "report.html"
MAX_RL_SAMPLES = 2000  # the newest, per run
MAX_EVAL_ROWS = 600  # per held-out evaluation
SETTINGS = ("model.path", "data.source", "data.train_path", "algo.preset", "algo.baseline", "algo.std_scale", "algo.aggregation",
            "algo.ratio_level", "algo.clip_low", "algo.clip_high", "algo.beta", "reward.functions", "reward.weights", "rollout.group_size",
            "rollout.prompts_per_step", "rollout.max_new_tokens", "rollout.temperature", "train.steps", "train.lr", "sft.steps", "run.seed")

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1100px;padding:1rem 1.5rem;color:#1d1d1f;background:#fff}
h1{font-size:1.5rem;margin-bottom:.2rem} h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
.meta{color:#666;font-size:.85rem} .status{padding:.4rem .7rem;border-radius:4px;margin:.3rem 0;font-size:.9rem}
.ok{background:#eaf6ec} .running{background:#eef3fb} .stopped{background:#fdecea}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0} th,td{border-bottom:1px solid #e5e5e5;padding:.25rem .6rem;text-align:left;vertical-align:top}
th{background:#f6f6f6} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap} small{color:#666}
figure.plot{margin:1rem 0} figure.plot svg{max-width:100%;height:auto} figcaption{font-size:.8rem;color:#555}
.verdict{border-left:4px solid #d93025;padding:.3rem .8rem;margin:.6rem 0;background:#fff8f7} .verdict b{display:block}
.quiet{border-left:4px solid #188038;padding:.3rem .8rem;background:#f4fbf5}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font-size:.8rem} #samples td{max-width:420px} .tool{border-left:3px solid #999;padding-left:6px;margin:2px 0;color:#444} .call{font-size:.8rem;color:#245}
.scroll{max-height:640px;overflow:auto;border:1px solid #e5e5e5} .scroll th{position:sticky;top:0}
.controls{display:flex;gap:.8rem;align-items:center;margin:.5rem 0} .controls input{flex:1;padding:.3rem;font-size:.9rem}
nav a{margin-right:.8rem;font-size:.85rem}
"""

SCRIPT = """
(function () {
  const search = document.getElementById('sample-search');
  const verdict = document.getElementById('sample-verdict');
  const count = document.getElementById('sample-count');
  const rows = Array.from(document.querySelectorAll('#samples tbody tr'));
  function apply() {
    const text = search.value.toLowerCase();
    let shown = 0;
    for (const row of rows) {
      const keep = (!text || row.textContent.toLowerCase().includes(text)) && (verdict.value === 'all' || row.dataset.verdict === verdict.value);
      row.hidden = !keep;
      if (keep) shown += 1;
    }
    count.textContent = shown + ' of ' + rows.length + ' shown';
  }
  search.addEventListener('input', apply);
  verdict.addEventListener('change', apply);
  apply();
})();
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: object, digits: int = 3) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a" if value is None else _e(value)
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _pct(value: object) -> str:
    return f"{value:.1%}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "n/a"


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], numeric_from: int = 1) -> str:
    """A table from already-escaped cells; columns from `numeric_from` on are right-aligned. A
    "run" column left empty in every row (a report of one run) is dropped."""
    head, rows = list(head), [list(r) for r in rows]
    if head and head[0] == "run" and not any(r[0] for r in rows):
        head, rows, numeric_from = head[1:], [r[1:] for r in rows], numeric_from - 1
    # a figure no row has (pass@k without eval.samples) is left out rather than shown as a column of n/a
    keep = [i for i in range(len(head)) if i < numeric_from or any(r[i] not in ("n/a", "") for r in rows)]
    numeric_from = sum(1 for i in keep if i < numeric_from)
    head, rows = [head[i] for i in keep], [[r[i] for i in keep] for r in rows]
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>" + "".join(f'<td class="num">{c}</td>' if i >= numeric_from else f"<td>{c}</td>" for i, c in enumerate(row)) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _status(run: Run) -> str:
    name = _e(run.name)
    if run.is_recipe:
        state = "finished" if run.finished else "in progress"
        return f'<div class="status {"ok" if run.finished else "running"}"><b>{name}: recipe {state}</b> ({len(run.stages)} stages done).</div>'
    done = run.records[-1]["step"] if run.records else 0
    if run.stopped:
        at = f"at step {_e(run.stopped['step'])}" if run.stopped.get("step") else f"in phase {_e(run.stopped.get('phase', '?'))}"
        return f'<div class="status stopped"><b>{name}: stopped {at}.</b> {_e(run.stopped.get("reason", ""))}</div>'
    trained = f"{_e(done)} RL steps" if done else ("SFT only" if run.sft_records else "no training")
    if run.finished:
        gain = run.summary.get("gain_points")
        total = run.summary.get("seconds", {}).get("total")
        extra = (f" Held-out gain {gain:+.1f} points (judged by {run.judge})." if isinstance(gain, (int, float)) else "") + \
            (f" {total:.0f} s in all." if total else "")
        return f'<div class="status ok"><b>{name}: finished</b> ({trained}).{_e(extra)}</div>'
    steps = f" of {run.config.train.steps}" if run.config else ""
    where = f"RL step {done}{steps}" if done else ("SFT step " + str(run.sft_records[-1]["step"]) if run.sft_records else "starting")
    return f'<div class="status running"><b>{name}: in progress</b> ({_e(where)}; this page is refreshed as the run goes).</div>'


def _settings(runs: list[Run]) -> str:
    configs = [r for r in runs if r.config is not None]
    if not configs:
        return ""
    flat = [flatten(r.config) for r in configs]
    keys = [k for k in SETTINGS if any(f.get(k) not in (None, "", []) for f in flat)]
    rows = [[f"<code>{_e(k)}</code>", *(_e(f.get(k, "")) for f in flat)] for k in keys]
    return "<h2 id='settings'>Settings</h2>" + _table(["setting", *(r.name for r in configs)], rows, numeric_from=99) + \
        "<p class='meta'>Every setting is in each run's config.toml.</p>"


def _held_out(runs: list[Run]) -> str:
    rows = []
    others = list(dict.fromkeys(t for run in runs for result in run.evals.values() for t in (result.get("terms") or {})))
    for run in runs:
        for evaluation, result in run.evals.items():
            sampled = result.get("sampled") or {}
            ks = sorted(int(n.split("@")[1]) for n in sampled if n.startswith("pass@"))
            top = ks[-1] if ks else None
            low, high = (result.get("intervals") or {}).get("accuracy", (None, None))
            interval = f" <small>[{_pct(low)}, {_pct(high)}]</small>" if low is not None else ""
            terms = result.get("terms") or {}
            rows.append([_e(run.name) if len(runs) > 1 else "", _e(evaluation), _e(run.judge), _pct(result.get("accuracy")) + interval,
                         *(_num((terms.get(t) or {}).get("greedy")) for t in others),
                         _pct(sampled.get("pass@1")), _pct(sampled.get(f"pass@{top}")) + (f" (k={top})" if top else ""),
                         _pct(sampled.get(f"maj@{top}")), _pct(result.get("shows_work")), _num(result.get("mean_length"), 1),
                         _e(result.get("num_problems", ""))])
    if not rows:
        return ""
    return ("<h2 id='held-out'>Held-out evaluation</h2><p class='meta'>Greedy accuracy is judged by each run's correctness term "
            "(reward.correctness, else the first of reward.functions); every other term's greedy mean has its own column.</p>" +
            _table(["run", "evaluation", "judged by", "greedy accuracy [95% CI]", *others, "pass@1", "pass@k", "maj@k", "shows work",
                    "mean length", "problems"], rows, 3))


def _ledger(runs: list[Run]) -> str:
    """Each run's discovery ledger (runs.run_ledger): held-out problems per class, per level and overall, with
    what it cost; a run with evaluations but no ledger says why. Omitted when no run has an evaluation."""
    rows, notes, costs = [], [], []
    for run in runs:
        who = _e(run.name) if len(runs) > 1 else ""
        if run.ledger is None and not run.no_ledger:  # no evaluation (a recipe's page, a run just started): nothing to say
            continue
        if run.ledger is None:
            notes.append(f"<div class='quiet'>{who + ': ' if who else ''}no ledger: {_e(run.no_ledger)}.</div>")
            continue
        ledger = run.ledger
        levels = [(level, counts) for level, counts in ledger["by_level"].items() if level != "None"]  # a task without levels: "all" only
        for level, counts in [*levels, ("all", ledger["counts"])]:
            rows.append([who, _e(level), *(str(counts[c]) for c in LEDGER_CLASSES), str(sum(counts.values()))])
        costs.append(f"{who + ': ' if who else ''}{_e(ledger['start'])} &rarr; {_e(ledger['end'])}, judged by {_e(run.judge)}: "
                     f"N = {ledger['samples_per_problem']} samples per problem from each model on {ledger['problems']} held-out "
                     f"problems, {ledger['samples_per_model']} samples of the start and {ledger['samples_per_model']} of the end.")
    if not rows and not notes:
        return ""
    meaning = ("<p class='meta'>Each held-out problem is classed from N samples of the model RL started from and N of the model "
               "after RL (a sample counts when it has full marks): <b>discovered</b>, the start never solved it in N samples and the "
               "end does; <b>sharpened</b> / <b>unchanged</b> / <b>blunted</b>, both solve it and the end's pass@1 is above, equal "
               "to or below the start's; <b>lost</b>, the start solved it and the end never does; <b>unsolved</b>, neither. Discovered "
               "against sharpened asks whether RL found new solutions or made the start's likelier.</p>")
    table = _table(["run", "level", *LEDGER_CLASSES, "problems"], rows, 2) if rows else ""
    return ("<h2 id='ledger'>Discovery ledger</h2>" + meaning + "".join(f"<p class='meta'>{c}</p>" for c in costs) + table +
            "".join(notes))


def _doctor(runs: list[Run]) -> str:
    if all(run.is_recipe for run in runs):
        return ""
    parts = ["<h2 id='doctor'>Doctor</h2><p class='meta'>Known failure modes read off the metrics (the rules of <code>rlvr doctor</code>, "
             "each citing the metric and steps that show it).</p>"]
    for run in runs:
        if run.is_recipe:
            continue
        who = f"{run.name}: " if len(runs) > 1 else ""
        if len(run.records) < MIN_STEPS:
            parts.append(f"<div class='quiet'>{_e(who)}fewer than {MIN_STEPS} RL steps: too short to judge a trend.</div>")
        elif not run.verdicts:
            parts.append(f"<div class='quiet'>{_e(who)}no known failure mode found in {len(run.records)} steps.</div>")
        for v in run.verdicts:
            parts.append(f"<div class='verdict'><b>{_e(who + v.symptom)}</b>{_e(v.evidence)}<br><i>Patch:</i> {_e(v.patch)}</div>")
    return "".join(parts)


def _monitor(runs: list[Run]) -> str:
    rows = []
    for run in runs:
        for key in metric_keys([run], "hack/"):
            steps, values = series(run.records, key)
            if not values:
                continue
            peak = max(range(len(values)), key=values.__getitem__)
            flagged = sum(v > 0 for v in values)
            rows.append([_e(run.name) if len(runs) > 1 else "", f"<code>{_e(key)}</code>", _num(sum(values) / len(values)),
                         f"{_num(values[peak])} (step {_e(steps[peak])})", _num(values[-1]), f"{flagged} of {len(values)}"])
    if not rows:
        return ""
    stops = "".join(_status(r) for r in runs if r.stopped)
    for run in runs:
        flagged = [r["step"] for r in run.records if r.get("hack/flagged") == 1.0]
        if flagged and not run.stopped:
            stops += (f"<div class='status stopped'><b>{_e(run.name)}: flagged by the monitor from step {_e(flagged[0])}</b> "
                      f"({len(flagged)} steps in all): the proxy's lead over the strict verifier grew past monitor.min_gap; "
                      "with monitor.stop_on_hack = true the run would have stopped there.</div>")
    return ("<h2 id='monitor'>Hack monitor</h2><p class='meta'>Share of each training batch a detector flags; "
            "<code>hack/proxy_minus_strict</code> is the trained reward's mean minus the strict verifier's on the same completions "
            "(logged when the trained reward is not boxed_math).</p>" + stops +
            _table(["run", "metric", "mean", "peak", "last", "steps above 0"], rows, 2))


def _recipe(runs: list[Run]) -> str:
    rows = []
    for run in runs:
        for row in run.stages:
            stage_dir = Path(row["dir"])
            link = f"{stage_dir.name}/{REPORT}"
            name = f"<a href='{_e(link)}'>{_e(row['stage'])}</a>" if (run.path / link).is_file() else _e(row["stage"])
            sampled = row.get("sampled") or {}
            rows.append([_e(run.name) if len(runs) > 1 else "", name, _e(row["kind"]), _pct(row.get("accuracy")), _pct(sampled.get("pass@1")),
                         _num(row.get("mean_length"), 1), _num(row.get("seconds"), 0)])
    if not rows:
        return ""
    return "<h2 id='stages'>Stages</h2>" + _table(["run", "stage", "kind", "greedy accuracy", "pass@1", "mean length", "seconds"], rows, 3)


def _figures(runs: list[Run]) -> str:
    captions = {
        "reward": "The reward the policy was trained on, per step (faint) and as a moving average; each term of a reward mix dashed.",
        "held-out": "Held-out greedy accuracy from the evaluation before RL through eval.every to the one after; other reward terms dashed.",
        "pass-at-k": "From eval.samples samples per held-out problem: unbiased pass@k (solid) and exact maj@k (dashed).",
        "by-level": "Held-out greedy accuracy per difficulty level, for each evaluation.",
        "behaviour": "Signals of the failure modes the doctor looks for: drifting length, collapsing entropy, KL, clipping, truncation.",
        "hack": "The hack monitor's detectors on the completions trained on.",
        "sft": "Cold-start SFT loss.",
        "recipe": "Held-out accuracy after each stage of the recipe.",
    }
    parts = [f"<figure class='plot' id='fig-{name}'>{svg}<figcaption>{_e(captions[name])}</figcaption></figure>"
             for name, svg in figures.draw_all(runs).items()]
    return "<h2 id='plots'>Plots</h2>" + "".join(parts) if parts else ""


def _completion(s: dict) -> str:
    """A completion's cell: its text, or a tool run's conversation, turn by turn: what the model wrote (its tool calls
    marked), each tool's result (marked as the tool's, not the model's words)."""
    conversation = s.get("conversation")
    if not isinstance(conversation, list):
        return f"<pre>{_e(s.get('completion', ''))}</pre>"
    parts = []
    for message in conversation:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool":
            parts.append(f"<div class='tool'><b>tool {_e(message.get('name', ''))}</b><pre>{_e(str(message.get('content', '')))}</pre></div>")
            continue
        calls = "".join(f"<div class='call'>calls <code>{_e(str((c.get('function') or {}).get('name')))}"
                        f"({_e(json.dumps((c.get('function') or {}).get('arguments')))})</code></div>"
                        for c in message.get("tool_calls") or [] if isinstance(c, dict))
        parts.append(f"<pre>{_e(str(message.get('content', '')))}</pre>{calls}")
    return "".join(parts)


def _sample_rows(runs: list[Run]) -> list[list[str]]:
    rows = []
    for run in runs:
        who = _e(run.name) if len(runs) > 1 else ""
        for s in run.samples[-MAX_RL_SAMPLES:]:
            rows.append((s.get("reward"), [who, f"RL step {_e(s.get('step'))}", f"<pre>{_e(s.get('prompt', ''))}</pre>",
                                           _completion(s), _e(s.get("answer", "")), _num(s.get("reward")),
                                           _num(s.get("advantage"))]))
        for evaluation, evaluated in run.eval_rows.items():
            for s in evaluated[:MAX_EVAL_ROWS]:
                rows.append((s.get("reward"), [who, f"held-out {_e(evaluation)}", f"<pre>{_e(s.get('prompt', ''))}</pre>",
                                               _completion(s), _e(s.get("answer", "")), _num(s.get("reward")), ""]))
    return [[("full" if reward == 1.0 else "partial" if isinstance(reward, (int, float)) and reward > 0 else "none"), *cells]
            for reward, cells in rows]


def _samples(runs: list[Run]) -> str:
    rows = _sample_rows(runs)
    if not rows:
        return ""
    head = ["run", "where", "prompt", "completion", "answer", "reward", "advantage"]
    skip = 0 if len(runs) > 1 else 1  # one run: no run column
    body = "".join(f"<tr data-verdict='{v}'>" + "".join(f"<td class='num'>{c}</td>" if i >= 5 else f"<td>{c}</td>"
                                                        for i, c in enumerate(cells) if i >= skip) + "</tr>"
                   for v, *cells in rows)
    head = head[skip:]
    return (f"<h2 id='samples-section'>Sampled completions</h2><p class='meta'>RL completions as logged (train.log_samples_every; the newest "
            f"{MAX_RL_SAMPLES} per run) and held-out greedy completions (the first {MAX_EVAL_ROWS} per evaluation).</p>"
            "<div class='controls'><input id='sample-search' type='search' placeholder='search prompts, completions, answers...'>"
            "<select id='sample-verdict'><option value='all'>all rewards</option><option value='full'>full marks</option>"
            "<option value='partial'>partial</option><option value='none'>zero / missing</option></select>"
            "<span id='sample-count'></span></div>"
            f"<div class='scroll'><table id='samples'><thead><tr>{''.join(f'<th>{h}</th>' for h in head)}</tr></thead>"
            f"<tbody>{body}</tbody></table></div>")


def render(runs: list[Run]) -> str:
    """The whole page for one run, or several overlaid."""
    title = " vs ".join(r.name for r in runs)
    sections = {"stages": _recipe(runs), "held-out": _held_out(runs), "ledger": _ledger(runs), "plots": _figures(runs),
                "doctor": _doctor(runs), "monitor": _monitor(runs), "samples-section": _samples(runs), "settings": _settings(runs)}
    titles = {"stages": "stages", "held-out": "held-out", "ledger": "ledger", "plots": "plots", "doctor": "doctor",
              "monitor": "hack monitor", "samples-section": "samples", "settings": "settings"}
    nav = "".join(f"<a href='#{anchor}'>{titles[anchor]}</a>" for anchor, html_ in sections.items() if html_)
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>rlvr report: {_e(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>rlvr report: {_e(title)}</h1><p class='meta'>Drawn {datetime.now():%Y-%m-%d %H:%M:%S} from "
            f"{_e(', '.join(str(r.path) for r in runs))} (regenerate with <code>rlvr report {_e(' '.join(str(r.path) for r in runs))}</code>).</p>"
            f"<nav>{nav}</nav>{''.join(_status(r) for r in runs)}{''.join(sections.values())}"
            f"<script>{SCRIPT if sections['samples-section'] else ''}</script></body></html>")


def default_path(run_dirs: list[Path]) -> Path:
    """report.html in the run directory; for an overlay, compare-<others>.html in the first one."""
    if len(run_dirs) == 1:
        return run_dirs[0] / REPORT
    return run_dirs[0] / ("compare-" + "-".join(p.resolve().name for p in run_dirs[1:]) + ".html")


def write_report(run_dirs: list[str | Path], out: str | Path | None = None) -> Path:
    """Read the runs, render the page and write it atomically (a browser never opens half a page)."""
    paths = [Path(p) for p in run_dirs]
    runs = [load_run(p) for p in paths]
    target = Path(out) if out else default_path(paths)
    atomic_write_text(target, render(runs))
    return target

