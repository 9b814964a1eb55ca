"""report.html: drawn from a real run's files at every phase's end and every run.report_every RL
steps, self-contained, escaped, and working in a real headless browser (Debian's chromium driven by
Playwright: no console errors, every plot rendered, the samples' search and filter work)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.metrics import Reporter
from rlvr.report import REPORT, write_report
from rlvr.report.browser import CHROMIUM_ARGS, find_chromium
from rlvr.report.runs import load_run, read_jsonl_tolerant

from conftest import SOLVABLE
from warm_cli import run_rlvr

CHROMIUM = find_chromium()
# In CI the set-up installs chromium (`make test` runs the Makefile's `browser` target), so the browser test must run there, not skip.
NEEDS_BROWSER = os.environ.get("CI") == "true"

LENIENT_MIX = [*SOLVABLE, "train.steps=8", "eval.every=4", "run.report_every=3",
               'reward.functions=["rlvr.tasks.hackable:substring_answer", "boxed_math"]', "reward.weights=[1.0, 0.0]"]


@pytest.fixture(scope="module")
def reported_run(tmp_path_factory):
    """A lab run (SFT, 8 RL steps) trained on a lenient reward with the strict one beside it at
    weight 0; the report's draws are counted, with how many RL steps were on disk at each."""
    import rlvr.runtime  # draw_report calls the write_report it imported
    from rlvr.pipeline import run

    run_dir = tmp_path_factory.mktemp("report") / "run"
    draws: list[int] = []
    real = rlvr.runtime.write_report

    def counting(run_dirs, out=None):
        metrics = Path(run_dirs[0]) / "metrics.jsonl"
        draws.append(len(read_jsonl_tolerant(metrics)) if metrics.exists() else 0)
        return real(run_dirs, out)

    rlvr.runtime.write_report = counting
    try:
        run(load_config(overrides=LENIENT_MIX + [f"run.output_dir={json.dumps(str(run_dir))}"]), Reporter(enabled=False), "lab")
    finally:
        rlvr.runtime.write_report = real
    return run_dir, draws


def test_the_report_is_drawn_at_every_phase_end_and_every_report_every_steps(reported_run):
    run_dir, draws = reported_run
    # sft, eval_after_sft | RL steps 3 and 6 (not 8: the phase's end draws it) | eval_after_rl, then the final summary
    assert draws == [0, 0, 3, 6, 8, 8]
    page = (run_dir / REPORT).read_text()
    assert "finished</b> (8 RL steps)" in page
    for figure in ("reward", "held-out", "by-level", "behaviour", "hack", "sft", "pass-at-k"):
        assert f"id='fig-{figure}'" in page, figure
    assert "substring_answer" in page and "hack/proxy_minus_strict" in page
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page) and "<link" not in page  # nothing to fetch (the browser test watches requests)


def test_run_report_false_writes_none(tmp_path):
    from rlvr.pipeline import run

    out = tmp_path / "run"
    run(load_config(overrides=[*SOLVABLE, "sft.steps=5", "train.steps=1", "eval.samples=0", "run.report=false",
                               f"run.output_dir={json.dumps(str(out))}"]), Reporter(enabled=False), "lab")
    assert (out / "summary.json").is_file() and not (out / REPORT).exists()


def test_run_values_are_escaped_and_a_torn_last_line_is_skipped(reported_run, tmp_path):
    run_dir, _ = reported_run
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("checkpoints", "model", "sft", "init"))
    with (copy / "samples.jsonl").open("a") as fh:
        fh.write(json.dumps({"step": 8, "prompt": "1+1=", "completion": "<script>alert('x')</script>\\boxed{2}", "answer": "2",
                             "reward": 1.0, "advantage": 0.5}) + "\n")
        fh.write('{"step": 8, "prompt": "torn')  # a line being written right now
    page = write_report([copy]).read_text()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page and "<script>alert" not in page
    (copy / "samples.jsonl").write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ConfigError, match=r"samples.jsonl:2: not a JSON line"):
        load_run(copy)
    with pytest.raises(ConfigError, match="no such run directory"):
        load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not a run directory"):
        load_run(tmp_path / "empty")


def test_a_stopped_run_says_where_and_why(reported_run, tmp_path):
    run_dir, _ = reported_run
    copy = tmp_path / "stopped"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("step-*", "model", "sft", "init", "*.safetensors"))
    (copy / "summary.json").unlink()
    (copy / "stopped.json").write_text(json.dumps({"step": 6, "by": "hack_monitor", "reason": "step 6: the hack monitor stopped the run"}))
    page = write_report([copy]).read_text()
    assert "stopped at step 6.</b> step 6: the hack monitor stopped the run" in page
    # without summary.json the held-out figures come from the phase checkpoints, and the ledger from the sample files
    assert "after_sft" in page and "after_rl" in page
    assert "<h2 id='ledger'>Discovery ledger</h2>" in page and "no ledger" not in page


def test_rlvr_report_overlays_two_runs(reported_run, tmp_path):
    run_dir, _ = reported_run
    other = tmp_path / "other"
    shutil.copytree(run_dir, other, ignore=shutil.ignore_patterns("checkpoints", "model", "sft", "init"))
    done = run_rlvr("report", str(run_dir), str(other), timeout=120)
    assert done.returncode == 0, done.stderr
    page = (run_dir / "compare-other.html").read_text()
    assert "rlvr report: run vs other" in page and page.count("finished</b>") == 2
    assert "<th>run</th><th>level</th><th>discovered</th>" in page and "<td>other</td><td>all</td>" in page  # each run's ledger
    bad = run_rlvr("report", str(tmp_path / "nope"), timeout=120)
    assert bad.returncode == 2 and "no such run directory" in bad.stderr


def test_a_recipe_report_lists_its_stages_and_links_their_reports(tmp_path):
    from rlvr.commands.recipe import run_recipe

    recipe = tmp_path / "r.toml"
    recipe.write_text('[[stage]]\nname = "cold"\nkind = "sft"\n\n[[stage]]\nname = "rl"\nkind = "rl"\n')
    out = tmp_path / "out"
    run_recipe(str(recipe), [*SOLVABLE, "sft.steps=5", "train.steps=1", "eval.samples=0"], Reporter(enabled=False), out=str(out))
    page = (out / REPORT).read_text()
    assert "<a href='01-cold/report.html'>cold</a>" in page and "<a href='02-rl/report.html'>rl</a>" in page
    assert "id='ledger'" not in page  # a recipe's page lists stages; each stage's own page has its ledger
    stage = (out / "02-rl" / REPORT).read_text()  # before_rl and after_rl, eval.samples = 0: no ledger, and the page says why
    assert "no ledger: its evaluations drew no samples (eval.samples = 0)" in stage and "<nav>" in stage
    assert json.loads((out / "02-rl" / "summary.json").read_text())["ledger"] is None
    assert (out / "01-cold" / REPORT).is_file() and "id='fig-recipe'" in page


def _browser():
    if CHROMIUM is None:
        if NEEDS_BROWSER:
            pytest.fail("CI must have chromium (`make test` runs `apt-get install chromium` as root)")
        pytest.skip("no chromium on this machine (Debian: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if NEEDS_BROWSER:
            pytest.fail("CI must have playwright (the test extra)")
        pytest.skip("playwright is not installed (pip install rlvr[test])")
    return sync_playwright, CHROMIUM


def test_the_report_works_in_a_real_browser(reported_run, tmp_path):
    sync_playwright, chromium = _browser()
    run_dir, _ = reported_run
    copy = tmp_path / "browse"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("checkpoints", "model", "sft", "init"))
    with (copy / "samples.jsonl").open("a") as fh:  # markup in a completion must show as text, never run
        fh.write(json.dumps({"step": 8, "prompt": "9+9=", "completion": "<img src=x onerror=alert(1)>\\boxed{18}", "answer": "18",
                             "reward": 1.0, "advantage": 0.1}) + "\n")
    page_path = write_report([copy])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            problems: list[str] = []
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
            page.on("request", lambda r: problems.append(f"request: {r.url}") if not r.url.startswith(("file:", "data:")) else None)
            page.goto(page_path.as_uri())
            page.wait_for_load_state("load")
            assert problems == []
            figures = page.query_selector_all("figure.plot")
            assert len(figures) >= 6
            for figure in figures:  # each plot rendered: an SVG with a real size and drawn paths
                box = figure.query_selector("svg").bounding_box()
                assert box and box["width"] > 300 and box["height"] > 150, figure.get_attribute("id")
                assert len(figure.query_selector_all("svg path")) > 10, figure.get_attribute("id")
            rows = page.locator("#samples tbody tr")
            total = rows.count()
            assert total > 20 and page.locator("#sample-count").inner_text() == f"{total} of {total} shown"
            page.fill("#sample-search", "onerror")  # the planted row, found by its text
            visible = page.locator("#samples tbody tr:not([hidden])")
            assert visible.count() == 1 and "<img src=x onerror=alert(1)>" in visible.inner_text()
            assert page.locator("#sample-count").inner_text() == f"1 of {total} shown"
            page.fill("#sample-search", "")
            page.select_option("#sample-verdict", "full")
            full = page.locator("#samples tbody tr:not([hidden])").count()
            assert 0 < full < total and all(v == "full" for v in page.locator("#samples tbody tr:not([hidden])").evaluate_all(
                "rows => rows.map(r => r.dataset.verdict)"))
            page.screenshot(path=str(tmp_path / "report.png"), full_page=False)
            assert problems == []
        finally:
            browser.close()


def test_status_lines_of_runs_that_did_not_train_rl_or_did_not_finish(reported_run, tmp_path):
    run_dir, _ = reported_run
    copy = tmp_path / "c"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("step-*", "model", "sft", "init", "*.safetensors"))
    (copy / "metrics.jsonl").unlink()
    (copy / "samples.jsonl").unlink()
    assert "finished</b> (SFT only)" in write_report([copy]).read_text()
    (copy / "summary.json").write_text(json.dumps({"source": "x", "problems": 3}))  # what `rlvr eval` writes: not a run's summary
    assert "in progress</b> (SFT step 150" in write_report([copy]).read_text()
    (copy / "stopped.json").write_text(json.dumps({"step": None, "phase": "eval_after_rl", "by": "error", "reason": "OSError: disk full"}))
    assert "stopped in phase eval_after_rl.</b> OSError: disk full" in write_report([copy]).read_text()


def test_a_run_that_fails_says_so_on_its_page(tmp_path):
    from rlvr.pipeline import run
    from rlvr.reward import RewardError

    out = tmp_path / "run"
    (tmp_path / "never.py").write_text("def never(completion, answer):\n    return None\n")  # every reward missing: the run must stop
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(RewardError):
            run(load_config(overrides=[*SOLVABLE, "sft.steps=5", "train.steps=3", "eval.samples=0", 'reward.functions=["never:never"]',
                                       f"run.output_dir={json.dumps(str(out))}"]), Reporter(enabled=False), "lab")
    finally:
        sys.path.remove(str(tmp_path))
    stopped = json.loads((out / "stopped.json").read_text())
    assert stopped["by"] == "error" and stopped["phase"] == "rl" and "100% of rewards are missing" in stopped["reason"]
    assert "stopped in phase rl.</b> RewardError: step 1: 100% of rewards are missing" in (out / REPORT).read_text()


def test_the_held_out_curve_starts_from_the_evaluation_before_rl_only(reported_run, tmp_path):
    from rlvr.report.figures import held_out_curve

    run_dir, _ = reported_run
    run = load_run(run_dir)
    run.evals = {"after_rl": run.evals["after_rl"]}  # eval.before_rl = false: nothing to start the curve from
    svg = held_out_curve([run])
    assert svg is not None and "greedy accuracy" in svg
    assert run.first_eval is None


def test_names_with_dollar_signs_are_drawn_as_written(reported_run, tmp_path):
    run_dir, _ = reported_run
    odd = tmp_path / "a$b"
    shutil.copytree(run_dir, odd, ignore=shutil.ignore_patterns("checkpoints", "model", "sft", "init"))
    page = write_report([odd, run_dir]).read_text()  # an unbalanced '$' in a run name would make mathtext raise
    assert "a$b: reward" in page
    shown = re.sub(r"<!--.*?-->", "", page, flags=re.DOTALL)  # matplotlib keeps each label's source in a comment
    assert "mathdefault" not in shown  # log-scale tick labels (the SFT loss) are still rendered as math, not shown raw


def test_a_figure_is_drawn_again_only_when_what_it_reads_has_changed(reported_run, monkeypatch):
    from rlvr.report import figures

    assert set(figures.READS) == set(figures.FIGURES)  # a new figure declares what it reads
    run = load_run(reported_run[0])
    drawn: list[str] = []
    for name, draw in list(figures.FIGURES.items()):
        monkeypatch.setitem(figures.FIGURES, name, lambda runs, name=name, draw=draw: drawn.append(name) or draw(runs))
    monkeypatch.setattr(figures, "_DRAWN", {})
    first = figures.draw_all([run])
    assert sorted(drawn) == sorted(figures.FIGURES) and {"reward", "behaviour", "held-out"} <= first.keys()
    drawn.clear()
    assert figures.draw_all([run]) == first and drawn == []  # nothing changed: nothing drawn
    run.evals = {k: v for k, v in run.evals.items() if k != "after_rl"}  # the evaluations changed: the figures reading them
    again = figures.draw_all([run])
    assert set(drawn) == {"held-out", "pass-at-k", "by-level"} and again["by-level"] != first["by-level"]
    drawn.clear()
    run.records = run.records[:-1]  # the metrics changed: the figures reading them
    figures.draw_all([run])
    assert set(drawn) == {"reward", "held-out", "behaviour", "hack"}


def _ledger_table(page: str) -> dict[str, dict[str, int]]:
    """The ledger section's table as {level: {class or "problems": count}} (a one-run page: no run column)."""
    section = page.split("<h2 id='ledger'>")[1].split("<h2")[0]
    head = re.findall(r"<th>(.*?)</th>", section)
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", section.split("<tbody>")[1])]
    return {cells[0]: {h: int(c) for h, c in zip(head[1:], cells[1:])} for cells in rows}


def test_the_discovery_ledger_is_what_the_two_sample_files_say(reported_run):
    from rlvr.stages.estimators import LEDGER_CLASSES, discovery_ledger

    run_dir, _ = reported_run
    page = (run_dir / REPORT).read_text()
    assert "<a href='#ledger'>ledger</a>" in page and "<b>discovered</b>, the start never solved it in N samples" in page
    # the start (after SFT) and the end (after RL): 4 samples of each of the 20 held-out problems, counted here from the files
    problems, n = len(read_jsonl_tolerant(run_dir / "eval_after_rl.jsonl")), 4
    solved, levels = {}, {}
    for name in ("after_sft", "after_rl"):
        rows = read_jsonl_tolerant(run_dir / f"eval_{name}_samples.jsonl")
        assert len(rows) == problems * n
        solved[name] = [sum(r["reward"] == 1.0 for r in rows if r["problem"] == i) for i in range(problems)]
        levels.update({r["problem"]: str(r["level"]) for r in rows})
    expected = discovery_ledger(solved["after_sft"], solved["after_rl"], n, [levels[i] for i in range(problems)])
    table = _ledger_table(page)
    assert table == {level: {**counts, "problems": sum(counts.values())} for level, counts in [*expected["by_level"].items(),
                                                                                                ("all", expected["counts"])]}
    assert table["all"]["problems"] == problems == 20 and sum(table[level]["problems"] for level in expected["by_level"]) == problems
    assert list(table["all"])[:-1] == list(LEDGER_CLASSES)
    assert ("after_sft &rarr; after_rl, judged by substring_answer: N = 4 samples per problem from each model on 20 held-out problems, "
            "80 samples of the start and 80 of the end.") in page
    ledger = json.loads((run_dir / "summary.json").read_text())["ledger"]  # the counts are in the run's results too
    assert {k: v for k, v in ledger.items() if k not in ("start", "end")} == {k: v for k, v in expected.items() if k != "classes"}
    assert (ledger["start"], ledger["end"], ledger["samples_per_model"]) == ("after_sft", "after_rl", 80)


def test_a_run_without_the_two_sampled_evaluations_says_why_it_has_no_ledger(reported_run, tmp_path):
    run_dir, _ = reported_run
    copy = tmp_path / "one"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("checkpoints", "model", "sft", "init"))
    summary = json.loads((copy / "summary.json").read_text())
    (copy / "eval_after_rl_samples.jsonl").unlink()  # the evaluation is recorded, its samples are gone
    assert load_run(copy).no_ledger == "eval_after_rl_samples.jsonl does not hold 4 sampled completions of each of the 20 problems"
    del summary["eval"]["after_rl"]  # one evaluation only
    (copy / "summary.json").write_text(json.dumps(summary))
    page = write_report([copy]).read_text()
    section = page.split("<h2 id='ledger'>Discovery ledger</h2>")[1].split("<h2")[0]
    assert "no ledger: it compares the evaluation RL started from (after_sft or before_rl) with after_rl, and this run has after_sft only" in section
    assert "<a href='#ledger'>ledger</a>" in page and "<table>" not in section
    for result in summary["eval"].values():  # no evaluation drew samples
        result["samples_per_problem"] = 0
    (copy / "summary.json").write_text(json.dumps(summary))
    assert load_run(copy).no_ledger.startswith("its evaluations drew no samples (eval.samples = 0)")
    summary["eval"] = {}  # no evaluation at all: no section
    (copy / "summary.json").write_text(json.dumps(summary))
    assert (load_run(copy).ledger, load_run(copy).no_ledger) == (None, "")
