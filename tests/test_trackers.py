"""Trackers mirror the run: each one's output is read back with its own reader and compared with
metrics.jsonl (TensorBoard event files, the MLflow local store, the W&B offline run file, trackio's
local store); W&B and TensorBoard continue the same run on --resume."""

import glob
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.metrics import read_jsonl_records
from warm_cli import run_rlvr

for module in ("tensorboard", "wandb", "mlflow", "trackio"):
    pytest.importorskip(module)

LAB = ["model.tiny.hidden_size=32", "model.tiny.intermediate_size=64", "task.num_train=60", "task.num_eval=6", "sft.steps=3",
       "train.steps=4", "rollout.group_size=2", "rollout.prompts_per_step=2", "run.threads=1", "train.log_samples_every=2",
       "checkpoint.every=2", 'run.trackers=["tensorboard", "wandb", "mlflow", "trackio"]', "run.project=rlvr-test"]


def lab(tmp_path: Path, run_dir: Path, kill_at: str | None = None, resume: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLVR_KILL", "WANDB", "MLFLOW", "TRACKIO"))}
    env.update({"WANDB_MODE": "offline", "WANDB_SILENT": "true", "TRACKIO_DIR": str(tmp_path / "trackio")})
    if kill_at:
        env["RLVR_KILL_AT"] = kill_at
    return run_rlvr("lab", "--quiet", *(["--resume", str(run_dir)] if resume else [*LAB, f"run.output_dir={json.dumps(str(run_dir))}"]), env=env)


def expected(run_dir: Path, name: str) -> list[tuple[int, float]]:
    return [(r["step"], r[name]) for r in read_jsonl_records(run_dir / "metrics.jsonl") if r.get(name) is not None]


def tensorboard_scalars(run_dir: Path, name: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(name)]


def wandb_history(run_dir: Path) -> tuple[set[str], list[dict]]:
    """The history records of every offline run file under run_dir/wandb (W&B's own protobuf
    records, in the LevelDB log framing W&B writes them in), and the run ids they belong to."""
    from wandb.proto import wandb_internal_pb2 as pb

    ids, rows = set(), []
    for path in sorted(glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))):
        data, pos, pending = Path(path).read_bytes(), 7, b""
        while pos + 7 <= len(data):
            left = 32768 - pos % 32768
            if left < 7:
                pos += left
                continue
            _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
            if length == 0 and kind == 0:
                pos += left
                continue
            chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
            if kind in (2, 3):
                pending += chunk
                continue
            record = pb.Record()
            record.ParseFromString(pending + chunk)
            pending = b""
            if record.WhichOneof("record_type") == "run":
                ids.add(record.run.run_id)
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item})
    return ids, rows


def test_all_four_trackers_hold_the_runs_metrics_and_continue_it_on_resume(tmp_path):
    whole = tmp_path / "whole"
    done = lab(tmp_path, whole)
    assert done.returncode == 0, done.stderr[-3000:]
    want = expected(whole, "reward/mean")
    assert len(want) == 4

    # TensorBoard
    got = tensorboard_scalars(whole, "reward/mean")
    assert [s for s, _ in got] == [s for s, _ in want] and all(abs(a - b) < 1e-6 for (_, a), (_, b) in zip(got, want))
    assert any(t.startswith("eval_after_rl/accuracy") for t in __import__("tensorboard.backend.event_processing.event_accumulator",
               fromlist=["EventAccumulator"]).EventAccumulator(str(whole / "tensorboard")).Reload().Tags()["scalars"])

    # MLflow: metrics per step, the config as parameters, the samples table
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{(whole / 'mlflow.db').resolve()}")
    run_id = json.loads((whole / "trackers.json").read_text())["mlflow"]
    history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "reward/mean"))
    assert history == [(s, pytest.approx(v)) for s, v in want]
    params = client.get_run(run_id).data.params
    assert params["train.steps"] == "4" and params["run.project"] == "rlvr-test"
    assert client.get_metric_history(run_id, "eval_after_sft/accuracy")
    assert [a.path for a in client.list_artifacts(run_id, "samples")]

    # W&B offline
    ids, rows = wandb_history(whole)
    assert ids == {json.loads((whole / "trackers.json").read_text())["wandb"]}
    logged = {r["_step"]: r["reward/mean"] for r in rows if "reward/mean" in r}
    assert sorted(logged.items()) == [(s, pytest.approx(v)) for s, v in want]
    assert any("samples" in key for r in rows for key in r)

    # trackio's local store, read by trackio (in a process that points it at this test's store)
    script = ("import json, sys; from trackio.sqlite_storage import SQLiteStorage as S; "
              "logs = S.get_logs('rlvr-test', run=sys.argv[1]); "
              "print(json.dumps([[l.get('step'), l.get('reward/mean')] for l in logs if l.get('reward/mean') is not None]))")
    read = subprocess.run([sys.executable, "-c", script, "whole"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio")})
    assert read.returncode == 0, read.stderr[-2000:]
    assert [(s, pytest.approx(v)) for s, v in want] == [tuple(x) for x in json.loads(read.stdout.strip().splitlines()[-1])]

    # a run killed after step 3 (its checkpoint is step 2) and resumed: step 3 is redone; every tracker
    # ends with steps 1-4 once each, in the same W&B run
    broken = tmp_path / "broken"
    assert lab(tmp_path, broken, kill_at="step_end@3").returncode == -9
    resumed = lab(tmp_path, broken, resume=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ids, rows = wandb_history(broken)
    assert len(ids) == 1 and len(glob.glob(str(broken / "wandb" / "offline-run-*"))) == 2  # two sessions, one run
    assert sorted({r["_step"] for r in rows if "reward/mean" in r}) == [1, 2, 3, 4]
    assert [s for s, _ in tensorboard_scalars(broken, "reward/mean")] == [1, 2, 3, 4]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(broken / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Tensors("samples/text_summary")] == [2, 4]  # the step-2 table replayed after the purge
    client = MlflowClient(tracking_uri=f"sqlite:///{(broken / 'mlflow.db').resolve()}")
    broken_id = json.loads((broken / "trackers.json").read_text())["mlflow"]
    assert sorted(m.step for m in client.get_metric_history(broken_id, "reward/mean")) == [1, 2, 3, 4]  # step 3 not twice
    assert len(client.list_artifacts(broken_id, "samples")) == 2
    read = subprocess.run([sys.executable, "-c", script, "broken"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio")})
    assert [s for s, _ in json.loads(read.stdout.strip().splitlines()[-1])] == [1, 2, 3, 4]


def test_a_tracker_that_is_not_installed_is_refused_naming_its_extra(monkeypatch):
    import rlvr.trackers

    monkeypatch.setitem(rlvr.trackers.TRACKERS, "wandb", ("no_such_module_for_wandb", "wandb"))
    with pytest.raises(ConfigError, match=r"run.trackers.*pip install 'rlvr\[wandb\]'"):
        load_config(overrides=['run.trackers=["wandb"]'])
    with pytest.raises(ConfigError, match="not trackers rlvr knows"):
        load_config(overrides=['run.trackers=["neptune"]'])


def test_steps_redone_after_a_lost_learner_rank_reach_each_tracker_once(tmp_path):
    """rl_train redoes the steps after the last checkpoint when a learner rank is lost; a tracker
    already has them and gets each step's metrics and table once."""
    from rlvr.trackers import Trackers

    got = []

    class Sink:
        def log(self, step, metrics):
            got.append(("log", step))

        def table(self, step, rows):
            got.append(("table", step))

    trackers = Trackers([], tmp_path, {}, "project", False)
    trackers.sinks, trackers.held = [Sink()], [0]
    for step in [1, 2, 3, 2, 3, 4]:  # steps 2-3 redone from step 1's checkpoint
        trackers.log(step, {"reward/mean": 1.0})
        trackers.log_samples(step, [{"step": step}])
    assert got == [(kind, step) for step in [1, 2, 3, 4] for kind in ("log", "table")]
