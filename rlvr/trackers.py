"""Mirrors of a run's metrics in the trackers users already watch (run.trackers).

rlvr's own files (metrics.jsonl, samples.jsonl, eval_*.jsonl) stay the record; each tracker named
in `run.trackers` gets the same numbers as they are written: the resolved config as
hyper-parameters, every step's metrics, the held-out evaluations, and sampled completions (a
table where the tracker has tables). Each tracker is an optional dependency imported only when
named; one named but not installed is refused by the config check, naming its pip extra.

Where each writes, and how a resumed run continues it:
- tensorboard: run_dir/tensorboard (every log flushed); on resume the steps it already holds are
  not logged again.
- wandb: run_dir/wandb, under the run's own W&B id (kept in run_dir/trackers.json), resumed into
  the same run; WANDB_MODE=offline works as usual. On resume the steps before the checkpoint are
  logged again (a killed process loses what W&B had buffered).
- mlflow: MLFLOW_TRACKING_URI, or the run's own store (run_dir/mlflow.db, artifacts in
  run_dir/mlartifacts; `mlflow ui --backend-store-uri sqlite:///run_dir/mlflow.db`); the same MLflow run on resume.
- trackio: its own local store (TRACKIO_DIR, by default ~/.cache/huggingface/trackio), project
  run.project, a run named after the run directory, resumed by name; on resume only the steps it
  lacks are logged.
"""

from __future__ import annotations

import importlib.util
import json
import math
import uuid
from pathlib import Path
from typing import Any

from rlvr.files import atomic_write_text

TRACKERS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow"),
            "trackio": ("trackio", "trackio")}  # name -> (module to import, pip extra of rlvr)


def missing_trackers(names: list[str]) -> list[str]:
    """The pip command for each named tracker whose package is not installed."""
    return [f"{name}: pip install 'rlvr[{TRACKERS[name][1]}]'" for name in names
            if name in TRACKERS and importlib.util.find_spec(TRACKERS[name][0]) is None]


def numeric(record: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a record (None, strings, nested values and NaN are not metrics)."""
    return {k: float(v) for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def eval_figures(name: str, summary: dict[str, Any]) -> dict[str, float]:
    """An evaluation's figures, flattened: eval_<name>/accuracy, eval_<name>/by_level/3, eval_<name>/sampled/pass@4, ..."""
    out: dict[str, float] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}/{k}", v)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[prefix] = float(value)

    walk(f"eval_{name}", summary)
    return out


class Trackers:
    """Every tracker of the run behind one set of calls; with none named, every call is a no-op.

    A resumed run redoes the steps after its checkpoint with the same numbers (resume is exact), so
    a tracker that already holds a step keeps its copy: each sink says the last step it holds
    (`held_step`: TensorBoard, MLflow and trackio read what they wrote; W&B offline starts a new
    file, so it holds none), steps up to it are not logged again, and the
    steps before the checkpoint that it lacks (lost in a killed process's buffers: measured, a
    SIGKILL after step 2 left W&B a 7-byte run file and trackio without steps 1-2) are replayed
    from metrics.jsonl and samples.jsonl (`replay`)."""

    def __init__(self, names: list[str], run_dir: Path, config: dict[str, Any], project: str, resuming: bool) -> None:
        self.run_dir, self.resuming = run_dir, resuming
        ids_path = run_dir / "trackers.json"
        ids = json.loads(ids_path.read_text()) if resuming and ids_path.is_file() else {}
        self.sinks = [_OPEN[name](run_dir, config, project, ids, resuming) for name in names]
        self.held = [(sink.held_step() if resuming else None) or 0 for sink in self.sinks]
        # The last step whose metrics and whose table went out: a run that redoes steps after a
        # lost learner rank (loop.rl_train) logs them once, not twice at the same step.
        self.logged, self.tabled = 0, 0
        if names:
            atomic_write_text(ids_path, json.dumps(ids, indent=2) + "\n")

    def replay(self, records: list[dict[str, Any]], samples: list[dict[str, Any]]) -> None:
        """The steps before the checkpoint, and their sample tables, to the trackers that lack them."""
        tables: dict[int, list[dict]] = {}
        for row in samples:
            tables.setdefault(row["step"], []).append(row)
        for sink, held in zip(self.sinks, self.held):
            for record in records:
                if record["step"] > held:
                    sink.log(record["step"], numeric(record))
            for step, rows in sorted(tables.items()):
                if step > held:
                    sink.table(step, rows)

    def log(self, step: int, record: dict[str, Any]) -> None:
        if step <= self.logged:
            return
        self.logged = step
        metrics = numeric(record)
        for sink, held in zip(self.sinks, self.held):
            if step > held:
                sink.log(step, metrics)

    def log_eval(self, step: int, name: str, summary: dict[str, Any]) -> None:
        figures = eval_figures(name, summary)
        for sink in self.sinks:
            sink.log(step, figures)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        if rows and step > self.tabled:
            self.tabled = step
            for sink, held in zip(self.sinks, self.held):
                if step > held:
                    sink.table(step, rows)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


class _TensorBoard:
    def held_step(self) -> int | None:
        """The last step in the event files already written (each log is flushed, so a killed run's are there)."""
        if not self.dir.is_dir():
            return None
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(self.dir), size_guidance={"scalars": 0})
        events.Reload()
        return max((e.step for tag in events.Tags()["scalars"] if not tag.startswith("eval_") for e in events.Scalars(tag)), default=None)

    def __init__(self, run_dir: Path, config: dict, project: str, ids: dict, resuming: bool) -> None:
        self.dir, self.resuming, self.writer, self.config = run_dir / "tensorboard", resuming, None, config

    def _open(self, step: int):
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(self.dir))
            if not self.resuming:
                self.writer.add_text("config", "\n".join(f"    {k} = {v!r}" for k, v in self.config.items()), 0)
        return self.writer

    def log(self, step: int, metrics: dict[str, float]) -> None:
        writer = self._open(step)
        for k, v in metrics.items():
            writer.add_scalar(k, v, step)
        writer.flush()

    def table(self, step: int, rows: list[dict]) -> None:  # no tables in TensorBoard: a markdown one
        columns = list(rows[0])
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(str(r[c]).replace("|", "\\|").replace("\n", " ") for c in columns) + " |" for r in rows]
        self._open(step).add_text("samples", "\n".join(lines), step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class _WandB:
    def held_step(self) -> None:
        return None  # offline, a resumed session is a new file (an online W&B run also ignores steps it has)

    def __init__(self, run_dir: Path, config: dict, project: str, ids: dict, resuming: bool) -> None:
        import wandb

        ids.setdefault("wandb", uuid.uuid4().hex[:12])
        self.wandb = wandb
        self.run = wandb.init(project=project, name=run_dir.name, id=ids["wandb"], resume="allow", dir=str(run_dir), config=config)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def table(self, step: int, rows: list[dict]) -> None:
        columns = list(rows[0])
        self.run.log({"samples": self.wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in rows])}, step=step)

    def close(self) -> None:
        self.run.finish()


class _MLflow:
    def __init__(self, run_dir: Path, config: dict, project: str, ids: dict, resuming: bool) -> None:
        import os

        import mlflow

        self.mlflow = mlflow
        if os.environ.get("MLFLOW_TRACKING_URI"):  # the user's server or store
            mlflow.set_experiment(project)
        else:  # the run's own store: a SQLite file and an artifact folder in the run directory
            mlflow.set_tracking_uri(f"sqlite:///{(run_dir / 'mlflow.db').resolve()}")
            found = mlflow.get_experiment_by_name(project)
            experiment = found.experiment_id if found else mlflow.create_experiment(
                project, artifact_location=(run_dir / "mlartifacts").resolve().as_uri())
            mlflow.set_experiment(experiment_id=experiment)
        self.run = mlflow.start_run(run_id=ids.get("mlflow"), run_name=None if ids.get("mlflow") else run_dir.name)
        if "mlflow" not in ids:
            ids["mlflow"] = self.run.info.run_id
            # MLflow keeps parameters as short strings; a long one (a list of paths) is cut, not refused.
            mlflow.log_params({k: str(v)[:500] for k, v in config.items()})

    def held_step(self) -> int | None:
        client = self.mlflow.tracking.MlflowClient()
        run_id = self.run.info.run_id
        steps = [m.step for key in client.get_run(run_id).data.metrics for m in client.get_metric_history(run_id, key)]
        return max(steps, default=None)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.mlflow.log_metrics({k.replace("@", "_at_"): v for k, v in metrics.items()}, step=step)  # MLflow names allow no '@'

    def table(self, step: int, rows: list[dict]) -> None:
        columns = list(rows[0])
        self.mlflow.log_table({c: [r[c] for r in rows] for c in columns}, artifact_file=f"samples/step_{step:06d}.json")

    def close(self) -> None:
        self.mlflow.end_run()


class _Trackio:
    def __init__(self, run_dir: Path, config: dict, project: str, ids: dict, resuming: bool) -> None:
        import trackio

        ids.setdefault("trackio", run_dir.name)
        self.trackio, self.project, self.name = trackio, project, ids["trackio"]
        self.run = trackio.init(project=project, name=ids["trackio"], config=config, resume="allow")

    def held_step(self) -> int | None:
        from trackio.sqlite_storage import SQLiteStorage

        return SQLiteStorage.get_max_step_for_run(self.project, self.name)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.trackio.log(metrics, step=step)

    def table(self, step: int, rows: list[dict]) -> None:
        import pandas as pd

        self.trackio.log({"samples": self.trackio.Table(dataframe=pd.DataFrame(rows))}, step=step)

    def close(self) -> None:
        self.trackio.finish()


_OPEN = {"tensorboard": _TensorBoard, "wandb": _WandB, "mlflow": _MLflow, "trackio": _Trackio}
