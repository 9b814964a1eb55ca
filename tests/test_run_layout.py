"""Run and recipe directories of an older rlvr's layout are refused by every reader, with one message.

Before issue 34 a finished phase's checkpoint was checkpoints/stage-<name> (now phase-<name>),
stopped.json named the "stage" it stopped in (now "phase"), and a recipe's directory had no
recipe_dir.txt. Read as today's layout, such a directory is misread without an error: a resume
redoes finished phases, `runs/old@sft` says the run has no SFT, `rlvr rft` compares against the
pre-SFT model, a report shows no evaluations, and a recipe's relative paths resolve against the
wrong directory. So each reader calls `checkpoint.refuse_older_layout` first; the same directories
in today's layout are read as before (the test's second half), so the check can fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.checkpoint import COMPLETE
from rlvr.config import Config, ConfigError, save_config
from rlvr.metrics import Reporter

OLDER = "was written by an older rlvr"


def run_dir(root: Path, phase_prefix: str, stopped_key: str | None = None) -> Path:
    """A finished SFT and one RL step, by hand: the tiny model's init/, the SFT phase's and step 3's checkpoints."""
    run = root / "run"
    cfg = Config()
    cfg.run.output_dir = str(run)
    for name in ("init", f"checkpoints/{phase_prefix}sft", "checkpoints/step-000003"):
        (run / name).mkdir(parents=True)
    (run / "init" / "config.json").write_text("{}")
    for checkpoint in (f"{phase_prefix}sft", "step-000003"):
        (run / "checkpoints" / checkpoint / "model.safetensors").write_bytes(b"")
        (run / "checkpoints" / checkpoint / COMPLETE).write_text("")
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    if stopped_key is not None:
        (run / "stopped.json").write_text(json.dumps({"step": None, stopped_key: "rl", "by": "error", "reason": "boom"}))
    save_config(cfg, run / "config.toml")
    return run


def resume(run: Path):
    from rlvr.pipeline import prepare_run_dir

    cfg = Config()
    cfg.run.output_dir = str(run)
    return prepare_run_dir(cfg, "train", resume=True)


def rl_start(run: Path):
    from rlvr.commands.rft import _rl_start
    from rlvr.sources import ModelSource

    return _rl_start(ModelSource(str(run), str(run), str(run / "init"), run_dir=run, run_config=Config()))


def model_spec(point: str):
    from rlvr.sources import resolve_model

    return lambda run: resolve_model(f"{run}{point}")


def report(run: Path):
    from rlvr.report.runs import load_run

    return load_run(run)


READERS = {  # every reader of a run directory: what it would misread in the older layout
    "lab/train --resume": resume,  # redoes the finished phases
    "eval/rft/distill runs/x@sft": model_spec("@sft"),  # "has no finished cold-start SFT"
    "runs/x@3": model_spec("@3"),
    "runs/x (final)": model_spec(""),
    "rft's RL start": rl_start,  # takes @start: the pre-SFT model, silently
    "report": report,  # no evaluations so far, "stopped in phase ?"
}
OLD_LAYOUTS = {"stage-<name> checkpoints": ("stage-", None), "stopped.json's 'stage'": ("phase-", "stage")}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("layout", OLD_LAYOUTS)
def test_every_reader_refuses_a_run_dir_of_the_older_layout_and_reads_todays(tmp_path, reader, layout):
    old = run_dir(tmp_path / "old", *OLD_LAYOUTS[layout])
    with pytest.raises(ConfigError, match=f"{OLDER} \\((checkpoints/stage-sft, now phase-<name>|stopped.json with 'stage', now 'phase')\\), "
                       "whose layout this one cannot read correctly; start anew from its weights"):
        READERS[reader](old)
    READERS[reader](run_dir(tmp_path / "today", "phase-", "phase"))  # the same directory as this rlvr writes it


def test_recipe_resume_refuses_a_recipe_dir_without_recipe_dir_txt(tmp_path):
    from rlvr.commands.recipe import run_recipe

    out = tmp_path / "rec"
    out.mkdir()
    (out / "recipe.toml").write_text('[[stage]]\nname = "a"\nkind = "sft"\nsft.steps = 1\n')
    (out / "overrides.json").write_text("[]\n")
    with pytest.raises(ConfigError, match=rf"--resume: {out} {OLDER} \(no recipe_dir.txt\), whose layout"):
        run_recipe(None, [], Reporter(enabled=False), resume=str(out))
