"""Nothing lost: a run SIGKILLed at any point and resumed ends exactly where an uninterrupted run
ends (same metrics.jsonl values, same weights, bit for bit), and checkpoints are all-or-nothing.

The kills are real: each run is a child process that SIGKILLs itself at a named fault point
(`rlvr.checkpoint.fault_point`, armed by RLVR_KILL_AT=name@N), forked already warm (tests/warm_cli.py)."""

import errno
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr.checkpoint import CheckpointError, complete_step_checkpoints, latest_step_checkpoint, save_checkpoint, save_weights, step_name
from rlvr.metrics import read_jsonl_records, rewind_jsonl
from warm_cli import run_rlvr

TINY = [
    "model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.intermediate_size=64", "model.tiny.num_heads=2",
    "model.tiny.num_kv_heads=1", "eval.max_new_tokens=10", "rollout.max_new_tokens=10", "rollout.group_size=4",
    "rollout.prompts_per_step=4", "train.micro_batch_size=8", "run.threads=1", "sft.steps=4", "sft.batch_size=8",
    "train.steps=6", "train.lr=1e-3", "train.warmup_steps=1", "checkpoint.every=2", "checkpoint.keep_last=2",
    "algo.beta=0.05", "algo.num_iterations=2",  # a reference model and frozen old log-probs must survive a resume too
    "checkpoint.sft_every=2",  # SFT resumes from its step-2 checkpoint
    "eval.every=3", "eval.samples=2",  # held-out evaluation during RL (sampled, own generator) must not disturb a resume
]


@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    """Eight training problems: with 4 prompts per step an epoch ends exactly every 2 steps."""
    root = tmp_path_factory.mktemp("data")
    rows = [(f"{a}+{b}=", str(a + b)) for a, b in [(1, 2), (3, 4), (5, 1), (2, 2), (6, 3), (7, 1), (4, 4), (8, 1)]]
    (root / "train.jsonl").write_text("".join(json.dumps({"prompt": p, "answer": a, "solution": f"\\boxed{{{a}}}"}) + "\n" for p, a in rows))
    (root / "eval.jsonl").write_text("".join(json.dumps({"prompt": f"{a}*{a}=", "answer": str(a * a)}) + "\n" for a in range(4)))
    return [
        "data.source=jsonl", f"data.train_path={json.dumps(str(root / 'train.jsonl'))}",
        f"data.eval_path={json.dumps(str(root / 'eval.jsonl'))}",
    ]


def lab(run_dir: Path, args: list[str], kill_at: str | None = None, resume: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLVR_KILL_AT": kill_at} if kill_at else {k: v for k, v in os.environ.items() if k != "RLVR_KILL_AT"}
    return run_rlvr("lab", "--quiet", *(["--resume", str(run_dir)] if resume else [*args, f"run.output_dir={json.dumps(str(run_dir))}"]), env=env)


def comparable(run_dir: Path) -> list[dict]:
    """metrics.jsonl without wall-clock measurements (the only values allowed to differ)."""
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "rollout/tokens_per_s"} for r in read_jsonl_records(run_dir / "metrics.jsonl")]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "model" / "model.safetensors")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, data_files):
    run_dir = tmp_path_factory.mktemp("runs") / "whole"
    done = lab(run_dir, TINY + data_files)
    assert done.returncode == 0, done.stderr[-2000:]
    return run_dir


KILL_POINTS = [  # each costs two child runs: the ones covered elsewhere by a fast test run with -m slow
    pytest.param("sft_step@2", marks=pytest.mark.slow),  # mid-SFT before its first checkpoint: SFT is redone, deterministically
    "sft_step@3",  # mid-SFT after its step-2 checkpoint: SFT continues from it
    pytest.param("eval_after_sft@1", marks=pytest.mark.slow),  # SFT finished: its phase checkpoint's weights, the eval redone
    "generate@3",  # mid-step, after the step-2 checkpoint
    pytest.param("step_end@3", marks=pytest.mark.slow),  # between steps (also the torn-line test's kill point)
    "checkpoint_write@4",  # while writing the step-4 checkpoint (phase-sft, phase-eval_after_sft, step 2 come first)
    "step_saved@2",  # right after the second step checkpoint (step 4): exactly at an epoch boundary
    pytest.param("eval_after_rl@1", marks=pytest.mark.slow),  # after the last step, during the final evaluation
]


@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_killed_and_resumed_run_equals_the_uninterrupted_run(tmp_path, data_files, uninterrupted, kill_at):
    run_dir = tmp_path / "run"
    killed = lab(run_dir, TINY + data_files, kill_at=kill_at)
    assert killed.returncode == -9, f"expected a SIGKILL at {kill_at}: {killed.stderr[-2000:]}"
    assert not (run_dir / "summary.json").exists()
    resumed = lab(run_dir, [], resume=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    assert comparable(run_dir) == comparable(uninterrupted)  # every step exactly once, same values
    whole, again = final_weights(uninterrupted), final_weights(run_dir)
    assert whole.keys() == again.keys() and all(torch.equal(whole[k], again[k]) for k in whole)
    assert (run_dir / "eval_after_rl.jsonl").read_text() == (uninterrupted / "eval_after_rl.jsonl").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["eval"] == json.loads((uninterrupted / "summary.json").read_text())["eval"]
    assert [p.name for p in complete_step_checkpoints(run_dir / "checkpoints")] == ["step-000004", "step-000006"]
    assert not list((run_dir / "checkpoints").glob(".tmp-*"))


def test_a_resumed_run_skips_the_stages_it_finished(tmp_path, data_files, uninterrupted):
    run_dir = tmp_path / "run"
    assert lab(run_dir, TINY + data_files, kill_at="generate@1").returncode == -9  # SFT and the first eval are done
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["phase-eval_after_sft", "phase-sft"]
    first_eval = (run_dir / "eval_after_sft.jsonl").stat().st_mtime_ns
    resumed = lab(run_dir, [], resume=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (run_dir / "eval_after_sft.jsonl").stat().st_mtime_ns == first_eval  # neither SFT nor the eval ran again
    assert comparable(run_dir) == comparable(uninterrupted)
    after, whole = final_weights(run_dir), final_weights(uninterrupted)
    assert all(torch.equal(after[k], whole[k]) for k in whole)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["eval"] == json.loads((uninterrupted / "summary.json").read_text())["eval"]


def test_a_killed_sft_continues_from_its_checkpoint_and_leaves_none_behind(tmp_path, data_files, uninterrupted):
    run_dir = tmp_path / "run"
    assert lab(run_dir, TINY + data_files, kill_at="sft_step@3").returncode == -9
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["sft-000002"]
    resumed = run_rlvr("lab", "--resume", str(run_dir), env={**os.environ, "COLUMNS": "300"})
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming SFT from" in resumed.stderr and "(step 2 of 4)" in resumed.stderr
    assert not list((run_dir / "checkpoints").glob("sft-*"))  # superseded by phase-sft
    assert read_jsonl_records(run_dir / "sft_metrics.jsonl") == read_jsonl_records(uninterrupted / "sft_metrics.jsonl")
    assert [r["step"] for r in read_jsonl_records(run_dir / "sft_metrics.jsonl")] == [1, 2, 3, 4]
    whole, again = final_weights(uninterrupted), final_weights(run_dir)
    assert all(torch.equal(whole[k], again[k]) for k in whole)


def test_a_torn_last_metrics_line_is_repaired_on_resume(tmp_path, data_files, uninterrupted):
    run_dir = tmp_path / "run"
    assert lab(run_dir, TINY + data_files, kill_at="step_end@3").returncode == -9
    with open(run_dir / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 4, "reward/mean": 0.2')  # what a kill in the middle of a write leaves
    assert lab(run_dir, [], resume=True).returncode == 0
    assert comparable(run_dir) == comparable(uninterrupted)


@pytest.mark.slow
def test_resuming_a_finished_run_with_more_steps_trains_exactly_the_new_ones(tmp_path, data_files, uninterrupted):
    run_dir = tmp_path / "run"
    assert lab(run_dir, TINY + data_files).returncode == 0
    more = run_rlvr("lab", "--quiet", "--resume", str(run_dir), "train.steps=8")
    assert more.returncode == 0, more.stderr[-2000:]
    assert [r["step"] for r in read_jsonl_records(run_dir / "metrics.jsonl")] == list(range(1, 9))
    assert comparable(run_dir)[:6] == comparable(uninterrupted)
    fewer = run_rlvr("lab", "--quiet", "--resume", str(run_dir), "train.steps=3")
    assert fewer.returncode == 2 and "below the checkpoint's step 8" in fewer.stderr


def test_a_started_run_is_never_overwritten(tmp_path, data_files):
    run_dir = tmp_path / "run"
    assert lab(run_dir, TINY + data_files, kill_at="step_end@1").returncode == -9
    again = lab(run_dir, TINY + data_files)
    assert again.returncode == 2 and "--resume" in again.stderr
    assert lab(tmp_path / "nothing", [], resume=True).returncode == 2


def test_export_writes_a_model_directory_transformers_loads(tmp_path, uninterrupted):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "exported"
    done = run_rlvr("export", str(uninterrupted), str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    model = AutoModelForCausalLM.from_pretrained(out)
    weights = final_weights(uninterrupted)
    state = model.state_dict()
    assert all(torch.equal(state[k], weights[k]) for k in weights)
    assert AutoTokenizer.from_pretrained(out).decode(AutoTokenizer.from_pretrained(out).encode("3 + 4 = 7")) == "3 + 4 = 7"
    missing = run_rlvr("export", str(uninterrupted), str(out), "--step", "3")
    assert missing.returncode == 2 and "complete steps: 4, 6" in missing.stderr


# ----------------------------------------------------------------------------- in-process units


def test_disk_full_during_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch):
    import rlvr.checkpoint as ckpt

    model = torch.nn.Linear(3, 2)
    save_checkpoint(tmp_path, step_name(1), weights=functools.partial(save_weights, policy=model), trainer={"x": 1}, state={"step": 1}, config_text="")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt, "save_safetensors", full)
    with pytest.raises(CheckpointError, match=r"step-000002: the disk is full; the previous checkpoint .*step-000001 is intact"):
        save_checkpoint(tmp_path, step_name(2), weights=functools.partial(save_weights, policy=model), trainer={"x": 2}, state={"step": 2}, config_text="")
    assert latest_step_checkpoint(tmp_path).name == "step-000001"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000001"]  # no half-written debris


def test_a_checkpoint_without_its_marker_is_never_loaded(tmp_path):
    model = torch.nn.Linear(3, 2)
    for step in (1, 2):
        save_checkpoint(tmp_path, step_name(step), weights=functools.partial(save_weights, policy=model), trainer=None, state={"step": step}, config_text="")
    (tmp_path / "step-000002" / "COMPLETE").unlink()
    assert latest_step_checkpoint(tmp_path).name == "step-000001"


def test_rewind_keeps_earlier_steps_repairs_a_torn_tail_and_rejects_corruption(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4, "x"')
    assert rewind_jsonl(path, 2) == [{"step": 1}, {"step": 2}]
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'
    path.write_text('{"step": 1}\n{"st\n{"step": 2}\n')
    with pytest.raises(ValueError, match="m.jsonl:2: corrupt line"):
        rewind_jsonl(path, 5)


def test_auto_resume_continues_the_same_command(tmp_path, data_files, uninterrupted):
    run_dir = tmp_path / "run"
    args = TINY + data_files + ["checkpoint.auto_resume=true"]
    assert lab(run_dir, args, kill_at="generate@4").returncode == -9
    again = lab(run_dir, args)  # the scheduler simply reruns the job
    assert again.returncode == 0, again.stderr[-2000:]
    assert comparable(run_dir) == comparable(uninterrupted)


def test_a_run_that_trains_fewer_steps_than_asked_fails(tmp_path, monkeypatch):
    """Never exit 0 having trained too little (a resume that trained 0 of the remaining steps
    and exited 0 was a real bug elsewhere)."""
    import rlvr.pipeline as pipeline
    from rlvr.config import load_config
    from rlvr.loop import TrainingError
    from rlvr.metrics import Reporter

    real = pipeline.rl_train
    monkeypatch.setattr(pipeline, "rl_train", lambda *a, **k: real(*a, **k)[:-1])
    cfg = load_config(overrides=[o for o in TINY if not o.startswith("algo.")] + ["task.num_train=100", "task.num_eval=10", "train.steps=2",
                                  f"run.output_dir={json.dumps(str(tmp_path / 'run'))}"])
    with pytest.raises(TrainingError, match="RL ended after 1 of 2 steps"):
        pipeline.run(cfg, Reporter(enabled=False), "lab")


def test_a_real_write_limit_during_a_checkpoint_gives_the_clear_error(tmp_path):
    """Not a patched writer: the kernel refuses the write (RLIMIT_FSIZE, as a full disk would),
    through safetensors' and torch.save's own error types."""
    script = f"""
import functools, resource, signal, torch
from pathlib import Path
from rlvr.checkpoint import CheckpointError, latest_step_checkpoint, save_checkpoint, save_weights, step_name
root = Path({str(tmp_path)!r})
small, big = torch.nn.Linear(4, 4), torch.nn.Linear(512, 512)
save_checkpoint(root, step_name(1), weights=functools.partial(save_weights, policy=small), trainer={{"x": 1}}, state={{"step": 1}}, config_text="")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG from write() instead of a signal
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
for policy, trainer in ((big, None), (small, {{"blob": torch.zeros(100_000)}})):
    try:
        save_checkpoint(root, step_name(2), weights=functools.partial(save_weights, policy=policy), trainer=trainer, state={{"step": 2}}, config_text="")
    except CheckpointError as err:
        assert "the disk is full" in str(err) and "step-000001 is intact" in str(err), err
    else:
        raise SystemExit("no error")
assert latest_step_checkpoint(root).name == "step-000001"
assert sorted(p.name for p in root.iterdir()) == ["step-000001"]
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_resume_refuses_settings_it_could_not_honour(tmp_path, data_files):
    run_dir = tmp_path / "run"
    assert lab(run_dir, TINY + data_files, kill_at="step_end@1").returncode == -9
    changed = run_rlvr("lab", "--quiet", "--resume", str(run_dir), "train.lr=1e-5", "algo.beta=0.0")
    said = " ".join(changed.stderr.split())  # rich wraps long lines
    assert changed.returncode == 2
    assert "train.lr: 0.001 -> 1e-05" in said and "algo.beta: 0.05 -> 0.0" in said
    dry = run_rlvr("train", "--resume", str(run_dir), "--dry-run")
    assert dry.returncode == 2 and "cannot be combined with --resume" in " ".join(dry.stderr.split())


def test_export_never_overwrites_what_is_not_an_export(tmp_path, uninterrupted):
    from rlvr.config import ConfigError
    from rlvr.commands.export import export_checkpoint

    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("precious")
    for out in (uninterrupted, uninterrupted.parent, uninterrupted / "sub", keep):
        with pytest.raises(ConfigError):
            export_checkpoint(uninterrupted, out)
    assert (keep / "notes.txt").read_text() == "precious" and (uninterrupted / "config.toml").exists()
    export_checkpoint(uninterrupted, tmp_path / "out")
    export_checkpoint(uninterrupted, tmp_path / "out")  # replacing an earlier export is fine


def test_a_lora_run_resumes_exactly_and_exports_merged(tmp_path, data_files):
    from transformers import AutoModelForCausalLM

    args = TINY + data_files + ["model.lora_rank=4"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert lab(whole, args).returncode == 0
    assert lab(killed, args, kill_at="generate@3").returncode == -9
    assert lab(killed, [], resume=True).returncode == 0
    assert comparable(killed) == comparable(whole)
    a, b = final_weights(whole), final_weights(killed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not any("lora" in k for k in a)  # the saved model has its adapters merged in
    done = run_rlvr("export", str(whole), str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "out").state_dict()
    assert all(torch.allclose(exported[k], a[k], atol=1e-6) for k in a)


def test_a_checkpoint_sampled_on_another_kind_of_device_is_refused_clearly():
    from rlvr.checkpoint import CheckpointError, restore_rng_state, rng_state

    generator = torch.Generator().manual_seed(0)
    state = rng_state(generator)
    assert state["sampling_device"] == "cpu"
    restore_rng_state(state, generator)  # same kind of device: fine
    state["sampling_device"] = "cuda"
    with pytest.raises(CheckpointError, match="resume with run.device=cuda"):
        restore_rng_state(state, generator)


def test_a_checkpoint_without_the_sampler_device_still_restores():
    """Checkpoints written before the device was recorded resume as before."""
    from rlvr.checkpoint import restore_rng_state, rng_state

    generator = torch.Generator().manual_seed(3)
    state = rng_state(generator)
    del state["sampling_device"]
    expected = torch.rand(4, generator=generator)
    restore_rng_state(state, generator)
    assert torch.equal(torch.rand(4, generator=generator), expected)
    state["sampling"] = torch.zeros(16, dtype=torch.uint8)  # a CUDA-sized state into a CPU generator
    with pytest.raises(CheckpointError, match="does not fit this run's cpu generator"):
        restore_rng_state(state, generator)
