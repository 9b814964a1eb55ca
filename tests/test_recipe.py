"""Recipes: stages in order, each stage's model the next one's input; bad recipes refused naming
the stage and key; a recipe SIGKILLed between or inside stages resumes to the uninterrupted result,
never redoing a finished stage."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr.commands.recipe import load_recipe
from rlvr.config import ConfigError, load_config
from rlvr.metrics import read_jsonl_records
from warm_cli import run_rlvr

ROOT = Path(__file__).resolve().parents[1]

DEFAULTS = """
[defaults]
model.tiny = { hidden_size = 32, num_layers = 2, intermediate_size = 64, num_heads = 2, num_kv_heads = 1 }
task = { num_train = 300, num_eval = 20, min_ops = 1, max_ops = 2, max_operand = 3, max_value = -1 }
eval = { max_new_tokens = 12, samples = 4 }
rollout = { max_new_tokens = 12, group_size = 4, prompts_per_step = 4 }
train = { micro_batch_size = 8, lr = 1e-3, warmup_steps = 1, steps = 4, save_model = false }  # a recipe saves every stage's model anyway
run.threads = 1
sft = { batch_size = 16, lr = 5e-3 }
checkpoint = { every = 2, sft_every = 2 }
"""

STAGES = """
[[stage]]
name = "cold_start"
kind = "sft"
sft = { steps = 150, worked_fraction = 0.5 }

[[stage]]
name = "reasoning"
kind = "rl"

[[stage]]
name = "rejection"
kind = "rft"
rft.samples = 4
sft.steps = 6

[[stage]]
name = "final"
kind = "rl"
reward = { functions = ["boxed_math", "think_format"], weights = [1.0, 0.1] }

[[stage]]
name = "check"
kind = "eval"
eval.samples = 8
"""


def write_recipe(tmp_path: Path, stages: str = STAGES, defaults: str = DEFAULTS) -> Path:
    path = tmp_path / "recipe.toml"
    path.write_text(defaults + stages)
    return path


def rlvr(*args: str, kill_at: str | None = None) -> subprocess.CompletedProcess:
    """`rlvr *args` in a process of its own (forked warm: tests/warm_cli.py), optionally armed to SIGKILL itself."""
    env = {k: v for k, v in os.environ.items() if k != "RLVR_KILL_AT"}
    env.update({"COLUMNS": "250", "NO_COLOR": "1", **({"RLVR_KILL_AT": kill_at} if kill_at else {})})
    return run_rlvr(*args, env=env, cwd=ROOT, timeout=600)


@pytest.mark.parametrize(
    "stages, message",
    [
        ('[[stage]]\nname = "a"\nkind = "grpo"\n', "stage 1 (a): kind 'grpo' is not one of"),
        ('[[stage]]\nkind = "sft"\n', "stage 1: needs a name"),
        ('[[stage]]\nname = "a"\nkind = "sft"\n[[stage]]\nname = "a"\nkind = "rl"\n', "stage 2 (a): the name 'a' is used by an earlier stage"),
        ('[[stage]]\nname = "a"\nkind = "rl"\ntrian.steps = 3\n', "stage 1 (a): unknown key 'trian'"),
        ('[[stage]]\nname = "a"\nkind = "rl"\ntrain.lr = -1.0\n', "stage a: train.lr: must be > 0"),
        ('[[stage]]\nname = "a"\nkind = "rl"\nalgo.baseline = "nope"\n', "stage a: algo.baseline: 'nope' is not one of"),
        ('[[stage]]\nname = "a"\nkind = "distill"\n', "stage 1 (a): a distill stage needs a student"),
        ('[[stage]]\nname = "a"\nkind = "rl"\nstudent = "tiny"\n', "'student' applies to stages of kind ['distill'], not 'rl'"),
        ('[[stage]]\nname = "train"\nkind = "rl"\n', "cannot be named like the config section 'train'"),
        ("", "no stages"),
        ('[[stage]]\nname = "a"\nkind = "sft"\nsft.steps = 0\n', "stage a: sft.steps = 0, so this sft stage would train nothing"),
        ('[[stage]]\nname = "a"\nkind = "distill"\nstudent = "tiny:num_layer=1"\n', "model.tiny.num_layer: unknown key"),
        ('[[stage]]\nname = "a"\nkind = "distill"\nstudent = "./no/such/model"\n', "student: ./no/such/model: neither a run directory"),
        ('[[stage]]\nname = "a"\nkind = "eval"\ndata = "no-such-file.jsonl"\n', "data: no-such-file.jsonl is not a file"),
    ],
)
def test_a_bad_recipe_is_refused_naming_the_stage_and_key(tmp_path, stages, message):
    with pytest.raises(ConfigError, match=f".*{__import__('re').escape(message)}"):
        load_recipe(write_recipe(tmp_path, stages))


def test_the_shipped_r1_recipe_loads_and_adds_a_second_reward_term_to_the_final_rl():
    recipe = load_recipe(ROOT / "recipes" / "r1.toml")
    assert [s.kind for s in recipe.stages] == ["sft", "rl", "rft", "rl"]
    from rlvr.commands.recipe import stage_config

    final = stage_config(recipe, recipe.stages[-1], [])
    assert len(final.reward.functions) == 2 and final.reward.correctness == "boxed_math"
    assert stage_config(recipe, recipe.stages[1], []).reward.functions == ["boxed_math"]


def comparable(path: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "rollout/tokens_per_s"} for r in read_jsonl_records(path)]


def outcome(out: Path) -> dict:
    """Everything a recipe's result is, without wall-clock times and paths."""
    summary = json.loads((out / "summary.json").read_text())
    rows = [{k: v for k, v in row.items() if k not in ("seconds", "dir", "model")} for row in summary["stages"]]
    files = {}
    for stage in sorted(p for p in out.iterdir() if p.is_dir() and p.name[:2].isdigit()):
        for name in ("metrics.jsonl", "sft_metrics.jsonl"):
            if (stage / name).is_file():
                files[f"{stage.name}/{name}"] = comparable(stage / name)
        for name in sorted(p.name for p in stage.glob("eval_*.jsonl")) + (["traces.jsonl"] if (stage / "traces.jsonl").is_file() else []):
            files[f"{stage.name}/{name}"] = (stage / name).read_text().replace(str(out), "<out>")  # traces name their source model
    return {"rows": rows, "files": files}


def weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(out / "04-final" / "model" / "model.safetensors")


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    root = tmp_path_factory.mktemp("recipe")
    out = root / "out"
    done = rlvr("recipe", str(write_recipe(root)), "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_each_stage_starts_from_the_previous_stages_model(whole):
    summary = json.loads((whole / "summary.json").read_text())
    assert [r["stage"] for r in summary["stages"]] == ["cold_start", "reasoning", "rejection", "final", "check"]
    configs = {p.name: load_config(p / "config.toml", for_training=False) for p in whole.iterdir() if (p / "config.toml").is_file()}
    assert configs["01-cold_start"].model.path == str(whole / "init")
    assert configs["02-reasoning"].model.path == str(whole / "01-cold_start" / "model") and configs["02-reasoning"].sft.steps == 0
    assert configs["03-rejection"].model.path == str(whole / "init")  # rft: a fresh copy of the recipe's starting model
    assert configs["04-final"].model.path == str(whole / "03-rejection" / "model")
    assert configs["04-final"].reward.functions == ["boxed_math", "think_format"]
    assert summary["stages"][-1]["model"] == str(whole / "04-final" / "model")  # eval leaves the model as it is
    rejection = json.loads((whole / "03-rejection" / "traces_report.json").read_text())
    assert rejection["source"] == str(whole / "02-reasoning" / "model")  # sampled from the RL policy
    final = summary["stages"][3]
    assert set(final["reward_terms"]) == {"mean", "boxed_math", "think_format"}
    # the eval stage's figures are its own: 8 samples where the others have 4
    assert "pass@8" in summary["stages"][-1]["sampled"] and "pass@8" not in final["sampled"]


KILLS = [  # each costs two toy recipes; the kinds of kill covered elsewhere run with -m slow
    "recipe_stage_done@2",  # between stages: after the RL stage's stage.json
    pytest.param("sft_step@3", marks=pytest.mark.slow),  # inside the first stage, after its step-2 SFT checkpoint (as tests/test_resume.py)
    "generate@3",  # inside the RL stage, after its step-2 checkpoint
    # inside the RFT stage's SFT (150 cold-start steps + 5), after its step-4 checkpoint: the recipe resumes a stage
    # the same way whatever its kind (generate@3 above); the RFT's own resume is tests/test_rft.py's killed RFT
    pytest.param("sft_step@155", marks=pytest.mark.slow),
    pytest.param("generate@7", marks=pytest.mark.slow),  # inside the final RL stage (4 generations in the first), after its step-2 checkpoint
]


@pytest.mark.parametrize("kill_at", KILLS)
def test_a_killed_recipe_resumes_to_the_uninterrupted_result(tmp_path, whole, kill_at):
    out = tmp_path / "out"
    killed = rlvr("recipe", str(write_recipe(tmp_path)), "--out", str(out), "--quiet", kill_at=kill_at)
    assert killed.returncode == -9, killed.stderr[-2000:]
    finished = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("*/stage.json")}
    evals_before = {p: p.stat().st_mtime_ns for name in finished for p in (out / name).glob("eval_*.jsonl")}
    resumed = rlvr("recipe", "--resume", os.path.relpath(out, ROOT), "--quiet")  # spelled otherwise than --out: the same run
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert outcome(out) == outcome(whole)
    a, b = weights(out), weights(whole)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # a finished stage is never redone
    assert {name: (out / name / "stage.json").stat().st_mtime_ns for name in finished} == finished
    assert all(p.stat().st_mtime_ns == t for p, t in evals_before.items())


def test_a_started_recipe_is_never_overwritten_and_resume_needs_one(tmp_path, whole):
    again = rlvr("recipe", str(write_recipe(tmp_path)), "--out", str(whole))
    assert again.returncode == 2 and "--resume" in again.stderr
    nothing = rlvr("recipe", "--resume", str(tmp_path / "nothing"))
    assert nothing.returncode == 2 and "holds no recipe" in nothing.stderr


def test_a_distill_stage_with_the_token_level_term_is_a_valid_recipe(tmp_path):
    # the teacher is the current model, named only when the stage runs
    recipe = load_recipe(write_recipe(tmp_path, '[[stage]]\nname = "d"\nkind = "distill"\nstudent = "tiny:num_layers=1"\ndistill.kl_coef = 0.5\n'))
    assert recipe.stages[0].options == {"student": "tiny:num_layers=1"}


def test_an_override_naming_a_stage_without_a_setting_is_refused(tmp_path):
    from rlvr.commands.recipe import check_stages

    with pytest.raises(ConfigError, match="'final' is a stage; give one of its settings"):
        check_stages(load_recipe(write_recipe(tmp_path)), ["final=3"])


def test_overrides_reach_every_stage_or_one(tmp_path):
    from rlvr.commands.recipe import stage_config

    recipe = load_recipe(write_recipe(tmp_path))
    cfgs = [stage_config(recipe, s, ["run.seed=3", "final.train.steps=7"]) for s in recipe.stages]
    assert [c.run.seed for c in cfgs] == [3] * 5
    assert [c.train.steps for c in cfgs] == [4, 4, 4, 7, 4]


def test_relative_paths_in_a_recipe_mean_paths_next_to_it_also_in_a_resumed_copy(tmp_path, monkeypatch):
    from rlvr.commands.recipe import stage_config

    home = tmp_path / "recipes"
    home.mkdir()
    for name in ("train.jsonl", "held.jsonl"):
        (home / name).write_text('{"prompt": "1+1=", "answer": "2", "solution": "\\\\boxed{2}"}\n' * 4)
    text = DEFAULTS + 'data = { source = "jsonl", train_path = "train.jsonl" }\n' + '[[stage]]\nname = "check"\nkind = "eval"\ndata = "held.jsonl"\n'
    (home / "recipe.toml").write_text(text)
    copy = tmp_path / "out" / "recipe.toml"  # what a started recipe keeps in its output directory
    copy.parent.mkdir()
    copy.write_text(text)
    monkeypatch.chdir(tmp_path)
    for recipe in (load_recipe(home / "recipe.toml"), load_recipe(copy, home)):
        assert stage_config(recipe, recipe.stages[0], []).data.train_path == str(home / "train.jsonl")
        assert recipe.stages[0].options["data"] == str(home / "held.jsonl")


def test_keywords_stay_keywords_whatever_sits_next_to_the_recipe(tmp_path):
    """base = "start", student = "tiny:..." and a named preset are keywords, not paths: directories
    of those names beside the recipe (or a config file) change nothing."""
    home = tmp_path / "recipes"
    for name in ("start", "tiny", "tiny:num_layers=1", "grpo"):
        (home / name).mkdir(parents=True)
    (home / "held.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
    stages = ('[[stage]]\nname = "r"\nkind = "rft"\nbase = "start"\nsft.steps = 2\n'
              '[[stage]]\nname = "d"\nkind = "distill"\nstudent = "tiny:num_layers=1"\n'
              '[[stage]]\nname = "e"\nkind = "distill"\nstudent = "tiny"\nalgo.preset = "grpo"\n'
              '[[stage]]\nname = "x"\nkind = "eval"\ndata = "held.jsonl"\n')  # a path, for contrast
    (home / "recipe.toml").write_text(DEFAULTS + stages)
    recipe = load_recipe(home / "recipe.toml")
    assert [s.options for s in recipe.stages] == [{"base": "start"}, {"student": "tiny:num_layers=1"}, {"student": "tiny"},
                                                  {"data": str(home / "held.jsonl")}]
    assert recipe.stages[2].settings["algo"]["preset"] == "grpo"
    (home / "run.toml").write_text('[algo]\npreset = "grpo"\n')
    assert load_config(home / "run.toml").algo.preset == "grpo"
