"""Golden values: the lab's first RL steps at toy size on seed 0, recorded in tests/golden/lab_seed0.json.

`rlvr lab` with the overrides below (SFT cold start, then GRPO with the lab's algorithm settings,
boxed_math rewards, fp32, one thread) must reproduce the recorded reward mean, policy loss and
gradient norm of each step. A change that moves them changed what users get from the lab; if that
was the intent, regenerate the file and say why in the commit:

    PYTHONPATH=. .venv/bin/python tests/test_golden.py --regenerate

Nothing else writes the file; the test only reads it.

Tolerances, measured (2026, torch 2.13, a 2-core Xeon with AVX-512) by running this config under
three instruction sets: native, AVX2 (`ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
ONEDNN_MAX_CPU_ISA=AVX2`) and scalar (`ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2
ONEDNN_MAX_CPU_ISA=SSE41`), twice each:
- every sampled token, hence every reward, was the same: the reward mean is compared exactly;
- the policy loss was the same to the last bit (with one pass the ratio is exactly 1, so the loss is
  a function of advantages and lengths only): compared to 1e-6 relative;
- the gradient norm differed by up to 9.3e-4 relative (the SFT'd weights differ in the last bits
  and the gradient is a difference of large terms): compared to 1e-2 relative, 10x that.
Regenerated 2 December 2026 when sampling changed from torch.multinomial to inverse-CDF draws
(rlvr.rollout.generate.draw_categorical: another random stream, the same distribution); the new
file then passed native, AVX2 and scalar on a 2-core AMD EPYC (AVX2, no AVX-512).
The config is chosen for that: 40 SFT steps (longer cold starts amplify the instruction-set
differences until sampled tokens flip: 200 steps did at step 2) still give rewards in every step,
and the RL learning rate (1e-3, no warmup) is high enough that the steps tell settings apart:
train.lr=1.1e-3 moves step 2's gradient norm by 13%.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden" / "lab_seed0.json"
OVERRIDES = [
    "run.seed=0", "run.device=cpu", "run.threads=1", "run.dtype=float32",
    "model.tiny.hidden_size=64", "model.tiny.intermediate_size=128",
    "task.min_ops=1", "task.max_ops=1", "task.max_operand=4", "task.max_value=-1", "task.num_train=500", "task.num_eval=12",
    "sft.steps=40", "sft.batch_size=16", "sft.lr=1e-2", "sft.warmup_steps=5",
    "rollout.group_size=4", "rollout.prompts_per_step=16", "rollout.max_new_tokens=16", "eval.max_new_tokens=16",
    "train.steps=4", "train.lr=1e-3", "train.warmup_steps=1", "train.micro_batch_size=16", "train.save_model=false",
    "checkpoint.every=0",
]
TOLERANCE = {"reward/mean": 0.0, "loss/policy": 1e-6, "loss/grad_norm": 1e-2}  # relative


def lab_first_steps(out_dir: Path) -> list[dict]:
    """Run the lab at the golden config into out_dir; each RL step's golden metrics."""
    from rlvr.config import load_config
    from rlvr.metrics import Reporter, read_jsonl_records
    from rlvr.pipeline import run

    cfg = load_config(overrides=OVERRIDES + [f"run.output_dir={json.dumps(str(out_dir / 'run'))}"])
    run(cfg, Reporter(enabled=False), "lab")
    return [{"step": r["step"], **{k: r[k] for k in TOLERANCE}} for r in read_jsonl_records(out_dir / "run" / "metrics.jsonl")]


def test_the_lab_reproduces_its_golden_first_steps(tmp_path):
    golden = json.loads(GOLDEN.read_text())
    assert golden["overrides"] == OVERRIDES, "the golden file was made from another config: regenerate it (see the docstring)"
    assert all(s["reward/mean"] > 0 and s["loss/grad_norm"] > 0 for s in golden["steps"])  # every step learns something
    steps = lab_first_steps(tmp_path)
    assert [s["step"] for s in steps] == [s["step"] for s in golden["steps"]]
    for got, want in zip(steps, golden["steps"]):
        for key, rel in TOLERANCE.items():
            assert got[key] == pytest.approx(want[key], rel=rel, abs=1e-12), f"step {want['step']} {key}"


def regenerate() -> None:
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        steps = lab_first_steps(Path(tmp))
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps({"overrides": OVERRIDES, "torch": torch.__version__, "steps": steps}, indent=1) + "\n")
    print(f"wrote {GOLDEN}:")
    for s in steps:
        print(" ", s)


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(__doc__)
    regenerate()
