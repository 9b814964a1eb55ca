"""Output to a file or a pipe (CI logs, `> run.log`): wide tables, no carriage-return progress spam."""

import json
import subprocess
import sys


def test_a_run_logged_to_a_pipe_has_whole_tables_and_no_carriage_returns(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "rlvr.cli", "lab", "model.tiny.hidden_size=32", "model.tiny.intermediate_size=64", "task.num_train=50",
           "task.num_eval=5", "sft.steps=3", "train.steps=1", "rollout.group_size=2", "rollout.prompts_per_step=2", "run.threads=1",
           f"run.output_dir={json.dumps(str(out))}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={"COLUMNS": "", "TERM": "dumb", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    log = done.stdout + done.stderr
    assert "\r" not in log
    assert "accuracy" in log and "after_rl" in log and "…" not in log  # the final table is not cut to 80 columns
    assert "first prompt as the model sees it:" in log
