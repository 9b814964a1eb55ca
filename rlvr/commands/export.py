"""`rlvr export RUN_DIR OUT_DIR [--step N]`: a run's checkpoint as a plain Hugging Face model directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rlvr.checkpoint import CheckpointError, complete_step_checkpoints, is_complete, latest_step_checkpoint, read_state, step_name
from rlvr.config import ConfigError, load_config
from rlvr.models import save_pretrained
from rlvr.sources import ModelSource, run_start


def export_checkpoint(run_dir: Path, out_dir: Path, step: int | None = None) -> Path:
    """Write the policy of a run's checkpoint (the newest complete one, or `step`) as a Hugging
    Face model + tokenizer directory that `AutoModelForCausalLM.from_pretrained` loads. A
    checkpoint that learner ranks wrote as shards is gathered here, in this process, with no
    process group (rlvr.sharded_checkpoint.load_policy_weights)."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if not (run_dir / "config.toml").is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no config.toml)")
    cfg = load_config(run_dir / "config.toml", for_training=False)  # exporting trains nothing
    checkpoints = run_dir / "checkpoints"
    if step is None:
        source = latest_step_checkpoint(checkpoints)
        if source is None:
            raise CheckpointError(f"{checkpoints}: no complete step checkpoint to export")
    else:
        source = checkpoints / step_name(step)
        if not is_complete(source):
            found = ", ".join(str(read_state(p)["step"]) for p in complete_step_checkpoints(checkpoints)) or "none"
            raise CheckpointError(f"{source}: no complete checkpoint for step {step} (complete steps: {found})")
    out, run = out_dir.resolve(), run_dir.resolve()
    if out == run or run in out.parents or out in run.parents:
        raise ConfigError(f"{out_dir}: the export must go outside the run directory and must not contain it")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        earlier_export = out.is_dir() and (out / "config.json").is_file() and not (out / "config.toml").exists() and not (out / "checkpoints").exists()
        if not earlier_export:
            raise ConfigError(f"{out_dir} exists and is not an earlier export; give a new or empty directory")
    # a LoRA run exports its adapters folded into the weights
    checkpoint = ModelSource(str(source), str(source), run_start(run_dir, cfg), source, cfg.model.lora_rank > 0, run_dir, cfg)
    model, tokenizer = checkpoint.load(cfg.run.dtype)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_pretrained(model, tokenizer, tmp)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return source
