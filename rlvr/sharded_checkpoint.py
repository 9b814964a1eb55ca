"""The policy and optimizer of learner ranks as a sharded checkpoint: each rank writes its own shards.

A step checkpoint (rlvr.checkpoint) holds the policy either as one `model.safetensors` (a learner
in one process) or, written by W learner ranks, as

    sharded/
        .metadata, __<r>_0.distcp   torch.distributed.checkpoint (DCP): the model's state dict and the
                                    optimizer's ("model", "optim"), every rank writing the shards it holds
        manifest.json               written by rank 0: world size, strategy, the full model's tensor names,
                                    shapes and dtypes, whether only LoRA adapters train

DCP is torch's own format for this (what torchtitan and verl's FSDP2 path write): a checkpoint
records each tensor's global shape and which slice every file holds, so it loads into any
world size (`load_sharded` reshards W=2 -> W=1 or 1 -> 2), and without any process group into a
plain model (`load_full_weights`: `rlvr export`, `rlvr eval runs/a@50`). The manifest lets a
reader check that a model fits before DCP's less legible errors, and say what it found.

Replicated ranks (strategy ddp: every rank holds the whole model) all call `save_sharded` too:
DCP's save planner deduplicates tensors that several ranks hold (`dedup_save_plans`), so each is
written once, spread over the ranks by size (tests/test_sharded_checkpoint.py measures it).
Ranks must share the filesystem that holds the checkpoint directory (one machine, or NFS & co.):
each writes its own files into the directory the driver's atomic `save_checkpoint` is building.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict, set_model_state_dict, set_state_dict
from torch.distributed.tensor import DTensor

from rlvr.checkpoint import COMPLETE, CheckpointError, fsync_path, is_complete, load_weights
from rlvr.models import merged, save_pretrained

SHARDED_DIR = "sharded"  # inside a checkpoint directory, beside (instead of) model.safetensors
MANIFEST = "manifest.json"
FORMAT = 1  # bump when the layout changes; readers refuse a format they do not know


def is_sharded(checkpoint_dir: Path) -> bool:
    """Whether a checkpoint holds its policy as DCP shards (else as model.safetensors)."""
    return (Path(checkpoint_dir) / SHARDED_DIR).is_dir()


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")  # a peft PeftModel; fully_shard keeps the attribute (it swaps the class for a subclass)


# ----------------------------------------------------------------------------- writing (every rank)


def save_sharded(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> Path:
    """Collective: every rank of the default process group calls it with its (sharded or
    replicated) model and optimizer; writes `directory/sharded/`. Returns that path.

    `directory` is the temporary checkpoint directory `save_checkpoint` is building: nothing is
    written outside it, and DCP fsyncs every file (sync_files) so the driver's rename publishes
    complete files. A failure on any rank raises on every rank (DCP gathers the errors)."""
    path = Path(directory) / SHARDED_DIR
    model_sd, optim_sd = _state_dicts(model, optimizer)
    state: dict[str, Any] = {"model": model_sd}
    if optim_sd is not None:
        state["optim"] = optim_sd
    with _quiet_without_group():
        dcp.save(state, storage_writer=dcp.FileSystemWriter(path, sync_files=True), no_dist=not dist.is_initialized())
    # Rank 0 writes the manifest once DCP's own metadata is written (dcp.save returned): the
    # driver only renames the directory after every rank has returned, so it is never missing there.
    if _rank() == 0:
        manifest = _manifest(model, model_sd, optimizer is not None)
        (path / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        fsync_path(path / MANIFEST)
        fsync_path(path)
    return path


def _state_dicts(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None):
    """The model's (and optimizer's) state keyed by parameter name: DTensor shards under FSDP2, whole
    tensors for a replicated model; names without any wrapper prefix, so any world size reads them."""
    if optimizer is None:
        return get_model_state_dict(model), None
    return get_state_dict(model, optimizer)


def _manifest(model: torch.nn.Module, model_sd: dict[str, Any], with_optimizer: bool) -> dict[str, Any]:
    sharded = any(isinstance(v, DTensor) for v in model_sd.values())
    world = dist.get_world_size() if dist.is_initialized() else 1
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    return {
        "format": FORMAT,
        "world_size": world,
        "strategy": "fsdp" if sharded else ("ddp" if dist.is_initialized() else "local"),
        "lora": is_lora(model),  # then only the adapters train; the frozen base weights are saved too, so the checkpoint stands alone
        "optimizer": with_optimizer,
        "tensors": {k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}  # a DTensor's shape is the global one
                    for k, v in model_sd.items() if isinstance(v, torch.Tensor)},
        "trainable": trainable,
    }


# ----------------------------------------------------------------------------- reading


def read_manifest(checkpoint_dir: Path) -> dict[str, Any]:
    """The manifest of a sharded checkpoint; CheckpointError naming the file when it is missing,
    unreadable, incomplete or of an unknown format."""
    path = Path(checkpoint_dir) / SHARDED_DIR / MANIFEST
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: {path.parent} is not a complete sharded checkpoint (rank 0 writes the manifest last)")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: unreadable manifest ({err})") from None
    missing = [k for k in ("format", "world_size", "strategy", "lora", "optimizer", "tensors") if k not in manifest]
    if missing:
        raise CheckpointError(f"{path}: incomplete manifest (no {', '.join(missing)})")
    if manifest["format"] != FORMAT:
        raise CheckpointError(f"{path}: sharded checkpoint format {manifest['format']}, this rlvr reads format {FORMAT}")
    if not (path.parent / ".metadata").is_file():
        raise CheckpointError(f"{path.parent / '.metadata'} is missing: the DCP write of {path.parent} did not finish")
    return manifest


def load_sharded(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
    """Collective: every rank loads its shards of `directory/sharded/` into its (wrapped) model and
    optimizer, whatever world size wrote it (DCP reads the slices each rank now holds). Returns
    the manifest (its world_size says whether this was a reshard)."""
    manifest = read_manifest(directory)
    if optimizer is not None and not manifest["optimizer"]:
        raise CheckpointError(f"{Path(directory) / SHARDED_DIR / MANIFEST}: written without optimizer state; cannot resume the optimizer from it")
    model_sd, optim_sd = _state_dicts(model, optimizer)  # an empty optimizer gets its state allocated (a zero step at lr 0)
    _check_fits(directory, manifest, model, model_sd)
    state: dict[str, Any] = {"model": model_sd}
    if optim_sd is not None:
        state["optim"] = optim_sd
    with _quiet_without_group():
        dcp.load(state, storage_reader=dcp.FileSystemReader(Path(directory) / SHARDED_DIR), no_dist=not dist.is_initialized())
    if optim_sd is None:
        set_model_state_dict(model, state["model"])
    else:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return manifest


def load_full_weights(checkpoint_dir: Path, model: torch.nn.Module) -> dict[str, Any]:
    """No process group: the whole policy of a sharded checkpoint into a plain (unsharded) model,
    LoRA-wrapped when the checkpoint's was. Returns the manifest. Memory: the model and one saved
    slice at a time (DCP reads a slice, copies it into the model's tensor, drops it)."""
    manifest = read_manifest(checkpoint_dir)
    model_sd = model.state_dict()  # aliases of the parameters: DCP's in-place load is the load
    _check_fits(checkpoint_dir, manifest, model, model_sd)
    with _quiet_without_group():
        dcp.load({"model": model_sd}, storage_reader=dcp.FileSystemReader(Path(checkpoint_dir) / SHARDED_DIR), no_dist=True)
    return manifest


def load_policy_weights(checkpoint_dir: Path, model: torch.nn.Module) -> None:
    """A complete checkpoint's policy into a model in this process, whichever kind it holds:
    model.safetensors (a learner in one process) or sharded/ (learner ranks), gathered."""
    if not is_sharded(checkpoint_dir):
        load_weights(checkpoint_dir, model)
    elif not is_complete(checkpoint_dir):
        raise CheckpointError(f"{checkpoint_dir}: incomplete checkpoint (no {COMPLETE} marker); refusing to load it")
    else:
        load_full_weights(checkpoint_dir, model)


def gather_to_hf(checkpoint_dir: Path, out_dir: Path, skeleton: torch.nn.Module, tokenizer) -> Path:
    """No process group: a sharded checkpoint as a Hugging Face model directory (config.json,
    model.safetensors, tokenizer) that `AutoModelForCausalLM.from_pretrained` loads. `skeleton` is
    the run's model (any weights: all are overwritten), LoRA-wrapped if the run trained adapters;
    adapters are merged into the weights, as `rlvr export` writes a LoRA run."""
    load_full_weights(checkpoint_dir, skeleton)
    return save_pretrained(merged(skeleton), tokenizer, out_dir)


def _check_fits(checkpoint_dir: Path, manifest: dict[str, Any], model: torch.nn.Module, model_sd: dict[str, Any]) -> None:
    where = Path(checkpoint_dir) / SHARDED_DIR / MANIFEST
    if manifest["lora"] != is_lora(model):
        saved, here = ("LoRA adapters", "a plain model") if manifest["lora"] else ("a plain model", "LoRA adapters")
        raise CheckpointError(f"{where}: the checkpoint holds {saved}, the model to load it into has {here} (model.lora_rank differs)")
    saved = {k: tuple(v["shape"]) for k, v in manifest["tensors"].items()}
    here = {k: tuple(v.shape) for k, v in model_sd.items() if isinstance(v, torch.Tensor)}
    only_saved, only_here = sorted(saved.keys() - here.keys()), sorted(here.keys() - saved.keys())
    reshaped = [f"{k} {saved[k]} vs {here[k]}" for k in sorted(saved.keys() & here.keys()) if saved[k] != here[k]]
    if only_saved or only_here or reshaped:
        raise CheckpointError(
            f"{where}: the checkpoint's weights do not fit the model (only in the checkpoint: {only_saved[:3]}, "
            f"only in the model: {only_here[:3]}, other shapes: {reshaped[:3]})"
        )


@contextlib.contextmanager
def _quiet_without_group():
    """DCP warns each time it runs without a process group; here that is meant (export, a learner in one process)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0
