"""The `rlvr` command, run as a user runs it: in a process of its own, from the repository root.

The processes are forked warm (tests/warm_cli.py); one test starts the installed console script in a
fresh interpreter, the boundary a user crosses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.config import Config, field_help, load_config
from warm_cli import run_rlvr

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "examples/qwen2.5-1.5b-gsm8k.toml"


def rlvr(*args: str, columns: int = 1000, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # A wide console so that rich does not fold long messages (paths) across lines.
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1", "TERM": "dumb", **(env or {})}
    return run_rlvr(*args, env=env, cwd=ROOT, timeout=timeout)


def test_config_lists_every_field_with_its_default():
    out = rlvr("config", columns=250)
    assert out.returncode == 0, out.stderr
    # table rows are "│ field │ default │ meaning │"
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.stdout.splitlines() if line.startswith("│")]
    listed = {row[0]: row[1] for row in rows if row[0]}
    assert listed == {name: default for name, default, _ in field_help()}


def test_config_field_names_stay_whole_at_80_columns():
    out = rlvr("config", columns=80)
    assert out.returncode == 0, out.stderr
    missing = [name for name, _, _ in field_help() if name not in out.stdout]
    assert missing == []


def test_help_config_and_doctor_start_without_what_they_do_not_need(tmp_path):
    """cli.py's promise, in a fresh interpreter: --help imports neither torch nor transformers;
    config and doctor import no transformers (they list and check the torch-backed algorithm registries)."""
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    probe = (
        "import sys\nfrom typer.testing import CliRunner\nfrom rlvr.cli import app\nseen = []\n"
        f"for args in (['--help'], ['config'], ['doctor', {str(tmp_path)!r}]):\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0, args\n"
        "    seen.append([args[0], 'torch' in sys.modules, 'transformers' in sys.modules])\n"
        "print(seen)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[['--help', False, False], ['config', True, False], ['doctor', True, False]]"


def test_unknown_override_exits_2_naming_the_field():
    script = Path(sys.executable).with_name("rlvr")  # the console script pip installed
    out = subprocess.run([str(script), "lab", "algo.betta=1"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "COLUMNS": "1000", "NO_COLOR": "1", "TERM": "dumb"})
    assert out.returncode == 2
    assert "algo.betta" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_bad_value_in_config_file_exits_2_naming_file_and_field(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[rollout]\ngroup_size = 1\n", encoding="utf-8")
    out = rlvr("train", str(path), "--dry-run")
    assert out.returncode == 2
    assert "rollout.group_size" in out.stderr
    assert "Traceback" not in out.stderr
    assert out.stdout == ""


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A model directory as save_pretrained writes it (the lab's tiny model, untrained)."""
    from rlvr.config import TinyModelConfig
    from rlvr.models import build_char_tokenizer, build_tiny_model, save_pretrained

    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32), 0)
    return save_pretrained(model, tokenizer, tmp_path_factory.mktemp("tiny-model"))


def test_dry_run_of_the_example_prints_the_resolved_config(tmp_path, tiny_model_dir):
    # A dry run now loads the model's config and tokenizer (issue 11), so the example's hub model
    # (not reachable offline) is swapped for a local one; everything else is the example's.
    override = f"model.path={tiny_model_dir}"
    out = rlvr("train", EXAMPLE, override, "--dry-run")
    assert out.returncode == 0, out.stderr
    # stdout is exactly the resolved config as TOML: save it and it loads back to the same tree
    printed = tmp_path / "resolved.toml"
    printed.write_text(out.stdout, encoding="utf-8")
    resolved = load_config(printed)
    assert resolved == load_config(ROOT / EXAMPLE, [override])
    assert resolved != Config()
    assert load_config(ROOT / EXAMPLE).model.path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert "11 train and 1 held-out" in out.stderr  # 12 sample lines, 5% held out (at least one)
    assert f"model {tiny_model_dir} (qwen3)" in out.stderr
    assert "'stream' seeding on the local backend" in out.stderr  # the default that differs from Ray's, said where it applies


@pytest.mark.parametrize("path, why", [
    ("/no/such/model", "does not exist"),
    ("{tmp}", "has no config.json"),
    ("no-such-org/no-such-model-xyz", "cannot load a model config"),  # a hub id: not cached, and offline
])
def test_dry_run_loads_the_model_config_and_tokenizer(tmp_path, path, why):
    path = path.format(tmp=tmp_path)
    out = rlvr("train", EXAMPLE, f"model.path={path}", "--dry-run", env={"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 2, out.stderr
    assert "model.path: " in out.stderr and why in out.stderr and path in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_an_output_dir_that_is_a_file_exits_2_naming_the_field(tmp_path):
    existing = tmp_path / "notes.txt"
    existing.write_text("not a run\n")
    for target in (existing, existing / "run"):  # the directory itself, or a parent, is a file
        out = rlvr("lab", f"run.output_dir={target}", "train.steps=0", "sft.steps=0", "task.num_eval=1")
        assert out.returncode == 2, out.stderr[-2000:]
        assert "run.output_dir" in out.stderr and str(existing) in out.stderr
        assert "Traceback" not in out.stderr
    assert existing.read_text() == "not a run\n"


def test_dry_run_with_a_bad_data_line_exits_2_naming_file_and_line(tmp_path):
    data = tmp_path / "problems.jsonl"
    data.write_text(
        '{"question": "What is 1+1?", "answer": 2}\n\n{"question": "What is 2+2?"}\n{"question": "x", "answer": 1}\n',
        encoding="utf-8",
    )
    config = tmp_path / "run.toml"
    config.write_text(
        f'[data]\nsource = "jsonl"\ntrain_path = {json.dumps(str(data))}\nprompt_field = "question"\n[sft]\nsteps = 0\n',
        encoding="utf-8",
    )
    out = rlvr("train", str(config), "--dry-run")
    assert out.returncode == 2
    assert f"{data}:3" in out.stderr
    assert "answer" in out.stderr
    assert "Traceback" not in out.stderr
    assert out.stdout == ""  # no config printed for an invalid run


@pytest.mark.slow
def test_lab_runs_end_to_end_at_toy_size(tmp_path):
    run_dir = tmp_path / "lab"
    overrides = [
        f"run.output_dir={run_dir}",
        "run.threads=1",
        "model.tiny.hidden_size=32",
        "model.tiny.num_layers=1",
        "model.tiny.num_heads=2",
        "model.tiny.num_kv_heads=1",
        "model.tiny.intermediate_size=32",
        "model.tiny.max_positions=64",
        "task.num_train=64",
        "task.num_eval=6",
        "sft.steps=2",
        "sft.batch_size=8",
        "sft.warmup_steps=1",
        "rollout.group_size=2",
        "rollout.prompts_per_step=2",
        "rollout.max_new_tokens=8",
        "train.steps=2",
        "train.warmup_steps=1",
        "train.micro_batch_size=2",
        "train.log_samples_every=1",
        "eval.batch_size=6",
        "eval.max_new_tokens=8",
    ]
    out = rlvr("lab", "--quiet", *overrides, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rl_steps"] == 2
    assert set(summary["eval"]) == {"after_sft", "after_rl"}
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2
    assert (run_dir / "model" / "config.json").is_file()
    # the saved config reproduces the run's settings
    assert load_config(run_dir / "config.toml") == load_config(overrides=overrides)


def _error_classes():
    from rlvr.checkpoint import CheckpointError
    from rlvr.config import ConfigError
    from rlvr.data import DataError
    from rlvr.loop import TrainingError
    from rlvr.models import ModelError
    from rlvr.reward import RewardError
    from rlvr.rollout import DecodingError
    from rlvr.verifiers.code.sandbox import SandboxUnavailable

    return [(ConfigError, 2), (DataError, 2), (ModelError, 2), (RewardError, 1), (TrainingError, 1), (CheckpointError, 1),
            (DecodingError, 1), (SandboxUnavailable, 1)]


@pytest.mark.parametrize("index", range(8))
def test_each_error_class_belongs_to_a_family_the_cli_maps_to_its_exit_status(monkeypatch, index):
    from typer.testing import CliRunner

    import rlvr.pipeline
    from rlvr.cli import app
    from rlvr.errors import RunStopped, UsageError

    cls, status = _error_classes()[index]
    assert issubclass(cls, UsageError if status == 2 else RunStopped)

    def fails(*args, **kwargs):
        raise cls(f"{cls.__name__} says why")

    monkeypatch.setattr(rlvr.pipeline, "run", fails)
    out = CliRunner().invoke(app, ["lab", "--quiet"])
    assert out.exit_code == status, out.output
    assert f"{cls.__name__} says why" in out.output
    assert out.exception is None or isinstance(out.exception, SystemExit)  # caught and reported, not a traceback


def _code_run(tmp_path, tests) -> Path:
    """A python_code run on a data file whose gold tests are JSON objects (issue 11)."""
    data = tmp_path / "code.jsonl"
    rows = [{"prompt": f"Write add (variant {i}).", "answer": tests} for i in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    config = tmp_path / "code.toml"
    config.write_text(
        f'[run]\noutput_dir = {json.dumps(str(tmp_path / "run"))}\n'
        f'[data]\nsource = "jsonl"\ntrain_path = {json.dumps(str(data))}\neval_fraction = 0.34\n'
        '[sft]\nsteps = 0\n[reward]\nfunctions = ["python_code"]\n',
        encoding="utf-8",
    )
    return config


ADD_TESTS = {"asserts": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]}


def test_python_code_without_bubblewrap_stops_before_the_model_loads(tmp_path):
    config = _code_run(tmp_path, ADD_TESTS)
    no_bwrap = {"PATH": str(tmp_path), "RLVR_CODE_SANDBOX": ""}  # no bwrap on PATH; the sandbox setting left at its default
    for args in (["train", str(config)], ["train", str(config), "--dry-run"]):
        out = rlvr(*args, env=no_bwrap, timeout=120)
        assert out.returncode == 2, out.stderr[-2000:]
        assert "reward.functions[0] = 'python_code' cannot run here" in out.stderr and "bubblewrap" in out.stderr
        assert "Traceback" not in out.stderr and out.stdout == ""
        assert not (tmp_path / "run").exists()  # nothing was written, no model was built


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the python_code preflight needs bubblewrap")
def test_dry_run_accepts_python_code_gold_tests_written_as_json_objects(tmp_path):
    out = rlvr("train", str(_code_run(tmp_path, ADD_TESTS)), "--dry-run")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "2 train and 1 held-out" in out.stderr
    bad = rlvr("train", str(_code_run(tmp_path, {"asserts": "assert add(2, 3) == 5"})), "--dry-run")
    assert bad.returncode == 2 and "code.jsonl:1: field 'answer'" in bad.stderr and "is not a python_code tests spec" in bad.stderr
