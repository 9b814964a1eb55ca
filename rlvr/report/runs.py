"""What a report shows, read from a run directory's own files (nothing from the training process).

A report can be drawn while the run is going (the loop refreshes it every run.report_every
steps), after it ended, or after it was killed: every file is read as it is on disk, a torn last
line of a JSONL file is skipped (the writer fsyncs line by line, so only the last can be torn),
and held-out figures come from summary.json at the end or, before that, from the newest phase
checkpoint's recorded evaluations. The discovery ledger is computed from the sampled completions
the evaluations before and after RL wrote (eval_<name>_samples.jsonl), by the same function
`rlvr eval --compare` uses. A run directory of an older rlvr's layout is refused
(checkpoint.refuse_older_layout); a recipe's report reads only its stage.json rows, which did not change.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rlvr.checkpoint import PHASE_PREFIX, is_complete, refuse_older_layout
from rlvr.config import Config, ConfigError, load_config
from rlvr.doctor import Verdict, diagnose
from rlvr.metrics import STOP_FILE
from rlvr.reward import correctness_name
from rlvr.stages.estimators import discovery_ledger, solved_counts

RUN_FILES = ("metrics.jsonl", "sft_metrics.jsonl", "summary.json", "config.toml")


@dataclass
class Run:
    """One run directory as a report reads it."""

    path: Path
    name: str
    config: Config | None = None  # config.toml as resolved at the start
    records: list[dict] = field(default_factory=list)  # metrics.jsonl: one per RL step
    sft_records: list[dict] = field(default_factory=list)  # sft_metrics.jsonl
    samples: list[dict] = field(default_factory=list)  # samples.jsonl: RL completions with rewards
    evals: dict[str, dict] = field(default_factory=dict)  # evaluation (after_sft, ...) -> EvalResult.summary()
    eval_rows: dict[str, list[dict]] = field(default_factory=dict)  # evaluation -> greedy completions
    summary: dict | None = None
    stopped: dict | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    stages: list[dict] = field(default_factory=list)  # a recipe's rows (stage.json of each stage)
    ledger: dict | None = None  # the discovery ledger from the evaluation RL started from to after_rl (run_ledger)
    no_ledger: str = ""  # why there is none, when the run has evaluations

    @property
    def finished(self) -> bool:
        return self.summary is not None

    @property
    def first_eval(self) -> dict | None:
        """The evaluation RL starts from (after SFT, or before RL), if the run made one."""
        return self.evals.get("after_sft") or self.evals.get("before_rl")

    @property
    def judge(self) -> str:
        """The reward term held-out accuracy is judged by (reward.correctness, else the first term)."""
        return correctness_name(self.config.reward) if self.config is not None else "correctness"

    @property
    def is_recipe(self) -> bool:
        return (self.path / "recipe.toml").is_file()


def read_jsonl_tolerant(path: Path) -> list[dict]:
    """The records of a JSONL file another process may be appending to: a torn last line is left
    out; an unparseable line before it is corruption and raises, naming the file and line."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            if number == len(lines):
                break  # being written right now
            raise ConfigError(f"{path}:{number}: not a JSON line ({err.msg})") from None
    return records


def _read_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None


def _recorded_evals(run_dir: Path) -> dict[str, dict]:
    """Mid-run, the evaluations so far: each phase checkpoint records every evaluation done by
    then, so the newest complete one has them all."""
    newest: tuple[float, dict] | None = None
    for state in (run_dir / "checkpoints").glob(f"{PHASE_PREFIX}*/state.json"):
        if not is_complete(state.parent):
            continue
        evals = (_read_json(state) or {}).get("evals")
        if evals and (newest is None or state.stat().st_mtime > newest[0]):
            newest = (state.stat().st_mtime, evals)
    return newest[1] if newest else {}


def run_ledger(run_dir: Path, evals: dict[str, dict]) -> tuple[dict | None, str]:
    """The discovery ledger of a run (`rlvr.stages.estimators.discovery_ledger`, without the per-problem classes,
    with "start" and "end" naming the two evaluations), from the sampled completions of the evaluation RL started
    from (after_sft or before_rl) and of after_rl, as their eval_<name>_samples.jsonl files hold them; or None and
    why there is none ("" when the run has no evaluation at all)."""
    if not evals:
        return None, ""
    unsampled = "its evaluations drew no samples (eval.samples = 0); the ledger classes each problem from N samples of each model"
    start = next((name for name in ("after_sft", "before_rl") if name in evals), None)
    if start is None or "after_rl" not in evals:
        if not any(e.get("samples_per_problem") for e in evals.values()):
            return None, unsampled
        return None, (f"it compares the evaluation RL started from (after_sft or before_rl) with after_rl, and this run has "
                      f"{' and '.join(evals)} only")
    n, n_end = (evals[name].get("samples_per_problem") or 0 for name in (start, "after_rl"))
    if n == n_end == 0:
        return None, unsampled
    problems = evals[start].get("num_problems") or 0
    if n != n_end or problems != evals["after_rl"].get("num_problems"):
        return None, (f"{start} and after_rl differ: {n} and {n_end} samples of {problems} and {evals['after_rl'].get('num_problems')} "
                      "problems (eval settings changed on resume); the ledger compares the same N samples of the same problems")
    sides = {}
    for name in (start, "after_rl"):
        rows = read_jsonl_tolerant(run_dir / f"eval_{name}_samples.jsonl")
        if Counter(r.get("problem") for r in rows) != dict.fromkeys(range(problems), n):
            return None, f"eval_{name}_samples.jsonl does not hold {n} sampled completions of each of the {problems} problems"
        sides[name] = rows
    prompts = [{r["problem"]: r.get("prompt") for r in rows} for rows in sides.values()]
    if prompts[0] != prompts[1]:
        return None, f"{start} and after_rl were evaluated on different problems"
    levels = {r["problem"]: str(r.get("level")) for r in sides[start]}
    ledger = discovery_ledger(solved_counts(sides[start], problems), solved_counts(sides["after_rl"], problems), n,
                              [levels[i] for i in range(problems)])
    del ledger["classes"]
    return {"start": start, "end": "after_rl", **ledger}, ""


def load_run(path: str | Path) -> Run:
    """Everything a report shows of one run directory (a `rlvr train`/`lab` run, or a recipe's
    output directory); a directory holding none of a run's files is refused, naming it."""
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run directory")
    run = Run(run_dir, run_dir.resolve().name)
    if run.is_recipe:
        summary = _read_json(run_dir / "summary.json")
        run.summary = summary
        run.stages = summary["stages"] if summary else [
            row for done in sorted(run_dir.glob("[0-9][0-9]-*/stage.json")) if (row := _read_json(done)) is not None
        ]
        return run
    if not any((run_dir / name).exists() for name in RUN_FILES):
        raise ConfigError(f"{run_dir}: not a run directory (none of {', '.join(RUN_FILES)} is there)")
    refuse_older_layout(run_dir, "report")  # its evaluations so far and where it stopped would be read as none
    if (run_dir / "config.toml").is_file():
        run.config = load_config(run_dir / "config.toml", for_training=False)
    run.records = read_jsonl_tolerant(run_dir / "metrics.jsonl")
    run.sft_records = read_jsonl_tolerant(run_dir / "sft_metrics.jsonl")
    run.samples = read_jsonl_tolerant(run_dir / "samples.jsonl")
    summary = _read_json(run_dir / "summary.json")
    run.summary = summary if summary is not None and "eval" in summary else None  # `rlvr eval` writes another kind of summary
    run.evals = run.summary["eval"] if run.summary else _recorded_evals(run_dir)
    for evaluation in run.evals:
        run.eval_rows[evaluation] = read_jsonl_tolerant(run_dir / f"eval_{evaluation}.jsonl")
    run.ledger, run.no_ledger = run_ledger(run_dir, run.evals)
    run.stopped = _read_json(run_dir / STOP_FILE)
    run.verdicts = diagnose(run.records, run.config)
    return run


def metric_keys(runs: list[Run], prefix: str) -> list[str]:
    """The metric names under `prefix` that any of the runs logged, in first-seen order."""
    keys: dict[str, None] = {}
    for run in runs:
        for record in run.records:
            keys.update((k, None) for k in record if k.startswith(prefix))
    return list(keys)


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric, skipping the steps where it is missing or not a number."""
    points = [(r["step"], float(v)) for r in records if isinstance(v := r.get(key), (int, float)) and not isinstance(v, bool)]
    return [s for s, _ in points], [v for _, v in points]
