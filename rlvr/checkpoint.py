"""Checkpoints that are either complete or absent, and everything needed to resume bit for bit.

Layout under run_dir/checkpoints/:

    phase-<name>/  written when a phase of the lab/train recipe finishes (phase-sft,
                   phase-eval_after_sft, ...): the results so far, the RNG state, and the weights
                   when the phase changed them (SFT's, so a resumed run neither redoes SFT nor
                   loses the KL anchor)
    sft-001000/    SFT in progress (checkpoint.sft_every): weights, optimizer and schedule; only the
                   newest is kept, and none once phase-sft exists
    step-000050/   policy weights (safetensors), optimizer + scheduler + every RNG state + the
                   prompt stream position (trainer.pt), step counters (state.json), config.toml;
                   written by learner ranks, the policy and optimizer are sharded/ instead
                   (rlvr.sharded_checkpoint, which reads both kinds)
    COMPLETE       inside each directory, written last: a directory without it is never loaded

A checkpoint is written into a temporary sibling directory, every file fsynced, the marker
written, then the directory renamed into place (atomic on POSIX) and the parent fsynced; only
then are checkpoints beyond `keep_last` deleted. A kill at any moment leaves either the new
checkpoint complete or the previous one untouched; leftover temporary directories are ignored
and cleaned up by the next write.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors.torch import load_model as load_safetensors_into
from safetensors.torch import save_model as save_safetensors

from rlvr.config import ConfigError
from rlvr.errors import LearnerLost, RunStopped
from rlvr.metrics import STOP_FILE

COMPLETE = "COMPLETE"
WEIGHTS_FILE = "model.safetensors"  # the policy's weights in a checkpoint directory
PHASE_PREFIX = "phase-"  # phase-sft/: a finished phase of the lab/train recipe (pipeline.Phase)
SFT_PREFIX = "sft-"  # sft-000500/: SFT in progress (weights, optimizer, schedule), removed once phase-sft is written


class CheckpointError(RunStopped):
    """A checkpoint could not be written or read; the message says which and why."""


def fault_point(name: str) -> None:
    """Fault injection for the resume tests: with RLVR_KILL_AT=name@N in the environment, the
    process SIGKILLs itself the Nth time it reaches `name` (N defaults to 1). A no-op otherwise.
    With RLVR_KILL_ONCE=dir as well, only the first process to get there dies (it leaves a marker
    in dir): a Ray worker restarted in a fresh process does not kill itself again."""
    spec = os.environ.get("RLVR_KILL_AT")
    if not spec:
        return
    target, _, nth = spec.partition("@")
    if target != name:
        return
    count = fault_point.counts.get(name, 0) + 1  # type: ignore[attr-defined]
    fault_point.counts[name] = count  # type: ignore[attr-defined]
    if count == int(nth or 1):
        once = os.environ.get("RLVR_KILL_ONCE")
        if once:
            try:
                os.close(os.open(os.path.join(once, f"killed-{name}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
        os.kill(os.getpid(), signal.SIGKILL)


fault_point.counts = {}  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- RNG state


def rng_state(sampling: torch.Generator | None) -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if sampling is not None:
        state["sampling"] = sampling.get_state()
        state["sampling_device"] = sampling.device.type  # a CPU and a CUDA generator's states differ in kind
    try:  # numpy is not a dependency, but a user's reward function may draw from it
        import numpy

        name, keys, pos, has_gauss, cached = numpy.random.get_state()
        state["numpy"] = (name, keys.tolist(), pos, has_gauss, cached)  # plain data: loadable with weights_only
    except ImportError:
        pass
    return state


def restore_rng_state(state: dict[str, Any], sampling: torch.Generator | None) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        for device, cuda_state in enumerate(state["cuda"][: torch.cuda.device_count()]):  # fewer GPUs now: restore those there are
            torch.cuda.set_rng_state(cuda_state, device)
    if sampling is not None:
        saved = state.get("sampling_device")  # absent in checkpoints written before it was recorded
        if saved is not None and saved != sampling.device.type:
            raise CheckpointError(
                f"the checkpoint's sampling RNG ran on {saved}, this run samples on {sampling.device.type}: "
                f"resume with run.device={saved} (a run continues exactly only on the kind of device it started on)"
            )
        try:
            sampling.set_state(state["sampling"])
        except RuntimeError as err:
            raise CheckpointError(
                f"the checkpoint's sampling RNG state does not fit this run's {sampling.device.type} generator ({err}); "
                "resume on the kind of device the run started on"
            ) from None
    if "numpy" in state:
        import numpy

        name, keys, pos, has_gauss, cached = state["numpy"]
        numpy.random.set_state((name, numpy.array(keys, dtype=numpy.uint32), pos, has_gauss, cached))


# ----------------------------------------------------------------------------- writing


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def step_name(step: int) -> str:
    return f"step-{step:06d}"


def save_checkpoint(
    root: Path,
    name: str,
    *,
    weights: Callable[[Path], None] | None,
    trainer: dict[str, Any] | None,
    state: dict[str, Any],
    config_text: str,
    keep_last: int = 0,
) -> Path:
    """Write checkpoint `name` under `root` atomically; keep the newest `keep_last` step-* ones
    (0 keeps all). `weights(directory)` writes the policy's weight files into the directory being
    built (save_weights, or a learner's save_policy: whoever holds the weights writes them).
    Raises CheckpointError (the previous checkpoints intact) when writing fails."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        if weights is not None:
            weights(tmp)
        fault_point("checkpoint_write")
        if trainer is not None:
            torch.save(trainer, tmp / "trainer.pt")
        (tmp / "state.json").write_text(json.dumps(state, indent=1) + "\n")
        (tmp / "config.toml").write_text(config_text)
        for f in tmp.iterdir():
            fsync_path(f)
        (tmp / COMPLETE).write_text("")
        fsync_path(tmp / COMPLETE)
        fsync_path(tmp)
        if final.exists():  # rewriting the same step (a resumed run reaching it again)
            _remove(final)
        os.replace(tmp, final)
        fsync_path(root)
    except LearnerLost:  # learner ranks died while writing their shards: not the disk's fault; rl_train re-forms them
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except Exception as err:  # safetensors and torch.save report a full disk as their own errors, not OSError
        shutil.rmtree(tmp, ignore_errors=True)
        why = "the disk is full" if _is_disk_full(err) else f"{type(err).__name__}: {err}"
        previous = latest_step_checkpoint(root)
        kept = f"; the previous checkpoint {previous} is intact" if previous else "; no earlier checkpoint exists"
        raise CheckpointError(f"could not write checkpoint {final}: {why}{kept}") from err
    for stale in root.glob(".tmp-*"):  # debris of a write killed earlier
        shutil.rmtree(stale, ignore_errors=True)
    if keep_last > 0:
        for old in complete_step_checkpoints(root)[:-keep_last]:
            _remove(old)
    return final


def _remove(path: Path) -> None:
    """Delete a checkpoint so that a kill midway never leaves a half-deleted one marked complete."""
    (path / COMPLETE).unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)


def _is_disk_full(err: BaseException) -> bool:
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return True
    text = str(err)
    return any(sign in text for sign in ("No space left", "os error 28", "os error 27", "File too large", "unexpected pos"))


# ----------------------------------------------------------------------------- reading


def refuse_older_layout(directory: Path, setting: str, needs: tuple[str, ...] = ()) -> None:
    """ConfigError naming `setting` if `directory` was written by an rlvr older than this layout
    (issue 34): a finished phase's checkpoint named checkpoints/stage-<name> (now phase-<name>),
    stopped.json saying its "stage" (now "phase"), or a file this rlvr always writes there missing
    (`needs`: a recipe's recipe_dir.txt). Read as this layout, such a directory is misread without
    an error (its finished phases redone, its SFT checkpoint not found, the wrong model taken as
    where RL started), so every reader of a run or recipe directory calls this first. Its weights
    stay usable: a model/ directory is a plain model, and `rlvr export` reads a step checkpoint."""
    signs = [f"checkpoints/{p.name}, now phase-<name>" for p in sorted((directory / "checkpoints").glob("stage-*"))]
    try:
        stopped = json.loads((directory / STOP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # absent, or torn: nothing to tell from
        stopped = None
    if isinstance(stopped, dict) and "stage" in stopped and "phase" not in stopped:
        signs.append(f"{STOP_FILE} with 'stage', now 'phase'")
    signs += [f"no {name}" for name in needs if not (directory / name).exists()]
    if signs:
        raise ConfigError(
            f"{setting}: {directory} was written by an older rlvr ({'; '.join(signs)}), whose layout this one cannot read "
            "correctly; start anew from its weights: a model/ directory in it is a plain model, and `rlvr export` writes out "
            "a step checkpoint's"
        )


def is_complete(path: Path) -> bool:
    return (path / COMPLETE).is_file()


def complete_step_checkpoints(root: Path, prefix: str = "step-") -> list[Path]:
    """Complete <prefix>NNNNNN checkpoints (RL's step-*, or SFT's sft-*), oldest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.glob(f"{prefix}*") if p.is_dir() and is_complete(p) and p.name[len(prefix):].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len(prefix):]))


def remove_checkpoints(root: Path, prefix: str, keep: Path | None = None) -> None:
    """Delete every <prefix>NNNNNN checkpoint under root except `keep` (complete or not)."""
    for path in root.glob(f"{prefix}*") if root.is_dir() else []:
        if path.is_dir() and path.name[len(prefix):].isdigit() and path != keep:
            _remove(path)


def latest_step_checkpoint(root: Path) -> Path | None:
    found = complete_step_checkpoints(root)
    return found[-1] if found else None


def read_state(path: Path) -> dict[str, Any]:
    if not is_complete(path):
        raise CheckpointError(f"{path}: incomplete checkpoint (no {COMPLETE} marker); refusing to load it")
    return json.loads((path / "state.json").read_text())


def save_weights(directory: Path, policy: torch.nn.Module) -> None:
    save_safetensors(policy, str(directory / WEIGHTS_FILE))  # handles tied embeddings


def load_weights(path: Path, policy: torch.nn.Module) -> None:
    """The checkpoint's model.safetensors into `policy`. A checkpoint that learner ranks wrote holds
    sharded/ instead: rlvr.sharded_checkpoint.load_policy_weights reads both kinds."""
    if not is_complete(path):
        raise CheckpointError(f"{path}: incomplete checkpoint (no {COMPLETE} marker); refusing to load it")
    if not (path / WEIGHTS_FILE).is_file():
        raise CheckpointError(f"{path}: no {WEIGHTS_FILE} (a checkpoint of learner ranks holds sharded/: rlvr.sharded_checkpoint reads it)")
    missing, unexpected = load_safetensors_into(policy, str(path / WEIGHTS_FILE), strict=False)
    if missing or unexpected:
        raise CheckpointError(f"{path}: weights do not fit the model (missing {missing[:3]}, unexpected {unexpected[:3]})")


def load_trainer(path: Path) -> dict[str, Any]:
    # weights_only: a checkpoint is data, never code to run. map_location: a run saved on a GPU
    # still loads without one (the optimizer moves its state to the parameters' device).
    return torch.load(path / "trainer.pt", weights_only=True, map_location="cpu")


# ----------------------------------------------------------------------------- RL steps


def save_step(
    root: Path, step: int, *, weights: Callable[[Path], None], trainer: dict[str, Any], loop: dict[str, Any], config_text: str,
    keep_last: int = 0,
) -> Path:
    """The RL loop's checkpoint after `step`: the policy's weights (`weights(directory)` writes
    them: the learner's save_policy), the learner's and the prompt stream's state (`trainer`:
    optimizer, scheduler, RNGs, stream) and the loop's counters."""
    return save_checkpoint(root, step_name(step), weights=weights, trainer=trainer, state={"step": step, **loop},
                           config_text=config_text, keep_last=keep_last)


def load_step(path: Path, load_policy: Callable[[Path], None]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load a step checkpoint's weights through `load_policy(directory)` (the learner's);
    returns (trainer state, loop state)."""
    state = read_state(path)  # refuses an incomplete checkpoint before anything is loaded
    load_policy(path)
    return load_trainer(path), state
