"""Which model a command means: a model directory, a hub id, or a run directory and a point in it.

`rlvr eval`, `rft`, `distill` and recipes take a model the same way:

    path/to/model          a Hugging Face model directory (config.json, weights, tokenizer)
    org/name               a hub id (left to transformers and its cache)
    runs/a                 a run's final policy: runs/a/model, else its newest complete step checkpoint
    runs/a@start           the model that run started from (its model.path, or the tiny model it built: init/)
    runs/a@sft             its weights after cold-start SFT (checkpoints/phase-sft)
    runs/a@50              its step-50 checkpoint

A run directory is one with a config.toml; its config comes along (held-out split, reward terms,
eval settings). A checkpoint's weights are loaded into the run's starting model (wrapped in the
run's LoRA adapters when it trained some, then merged), exactly as `rlvr export` writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlvr.checkpoint import PHASE_PREFIX, complete_step_checkpoints, is_complete, latest_step_checkpoint, refuse_older_layout, step_name
from rlvr.config import Config, ConfigError, load_config
from rlvr.models import add_lora, check_model_path, load_model, load_tokenizer, merged
from rlvr.sharded_checkpoint import load_policy_weights

POINTS = ("final", "start", "sft")


@dataclass
class ModelSource:
    spec: str  # as the user gave it
    description: str  # for reports: "runs/a (final policy: runs/a/model)"
    skeleton: str  # a model directory or hub id: config, tokenizer, and the weights unless `checkpoint` is set
    checkpoint: Path | None = None  # a complete checkpoint whose weights (model.safetensors or sharded/) replace the skeleton's
    lora: bool = False  # the checkpoint holds a LoRA-wrapped policy (an RL step of a LoRA run)
    run_dir: Path | None = None
    run_config: Config | None = None

    @property
    def identity(self) -> str:
        """Where the weights are, however the spec was spelled (for "made from the same model" checks)."""
        where = self.checkpoint if self.checkpoint is not None else self.skeleton
        return str(Path(where).resolve()) if Path(where).exists() else str(where)

    def load(self, dtype: str = "float32", device: str = "cpu"):
        """(model, tokenizer); a LoRA checkpoint comes back merged into a plain model."""
        cfg = self.run_config
        trust = cfg.model.trust_remote_code if cfg is not None else False
        tokenizer = load_tokenizer(self.skeleton, trust)
        model = load_model(self.skeleton, dtype, "cpu", trust)
        if self.checkpoint is not None:
            if self.lora:
                assert cfg is not None
                model = add_lora(model, cfg.model)
            load_policy_weights(self.checkpoint, model)
            model = merged(model)
        return model.to(device), tokenizer


def is_run_dir(path: Path) -> bool:
    return (path / "config.toml").is_file()


def resolve_model(spec: str, what: str = "model") -> ModelSource:
    """The ModelSource `spec` names; ConfigError (naming `what` and what is missing) if none."""
    whole = Path(spec).expanduser()
    path_part, at, point = spec.rpartition("@") if "@" in spec and not whole.exists() else (spec, "", "")  # a directory may have an @ in its name
    path = Path(path_part).expanduser()
    if at and not is_run_dir(path):
        raise ConfigError(f"{what}: {spec!r}: '@{point}' picks a point of a run, but {path_part} is not a run directory (no config.toml)")
    if is_run_dir(path):
        return _from_run(spec, path, point or "final", what)
    try:
        check_model_path(spec)
    except ConfigError as err:
        raise ConfigError(f"{what}: {spec}: neither a run directory (no config.toml) nor a model directory: {str(err).split(': ', 2)[-1]}") from None
    return ModelSource(spec, spec, spec)


def run_start(run_dir: Path, cfg: Config) -> str:
    """The model a run started from: its model.path, or the tiny model it built and saved (init/)."""
    return cfg.model.path or str(run_dir / "init")


def _from_run(spec: str, run_dir: Path, point: str, what: str) -> ModelSource:
    refuse_older_layout(run_dir, what)  # an older rlvr's checkpoints/stage-sft would read as "no SFT"
    cfg = load_config(run_dir / "config.toml", for_training=False)
    start = run_start(run_dir, cfg)
    checkpoints = run_dir / "checkpoints"

    def source(description: str, checkpoint: Path | None = None, lora: bool = False, skeleton: str = start) -> ModelSource:
        return ModelSource(spec, f"{spec} ({description})", skeleton, checkpoint, lora, run_dir, cfg)

    if not cfg.model.path and not (run_dir / "init" / "config.json").is_file():
        raise ConfigError(f"{what}: {run_dir} has no init/ (the tiny model the run built before training): it never started")
    if point == "start":
        return source(f"start: {start}")
    if point == "sft":
        stage = checkpoints / f"{PHASE_PREFIX}sft"
        if not (is_complete(stage) and (stage / "model.safetensors").is_file()):
            raise ConfigError(f"{what}: {spec}: {run_dir} has no finished cold-start SFT ({stage} is missing or incomplete)")
        return source(f"after SFT: {stage}", stage)
    if point.isdigit():
        step = checkpoints / step_name(int(point))
        if not is_complete(step):
            found = ", ".join(p.name[5:].lstrip("0") or "0" for p in complete_step_checkpoints(checkpoints)) or "none"
            raise ConfigError(f"{what}: {spec}: no complete checkpoint for step {int(point)} in {checkpoints} (complete steps: {found})")
        return source(f"step {int(point)}: {step}", step, lora=cfg.model.lora_rank > 0)
    if point != "final":
        raise ConfigError(f"{what}: {spec}: unknown point '@{point}' (use @final, @start, @sft or @<step>)")
    final = run_dir / "model"
    if (final / "config.json").is_file() and any(final.glob("*.safetensors")):
        return source(f"final policy: {final}", skeleton=str(final))
    latest = latest_step_checkpoint(checkpoints)
    if latest is not None:
        return source(f"newest checkpoint: {latest}", latest, lora=cfg.model.lora_rank > 0)
    sft = checkpoints / f"{PHASE_PREFIX}sft"
    if is_complete(sft) and (sft / "model.safetensors").is_file():
        return source(f"after SFT (no RL step yet): {sft}", sft)
    raise ConfigError(
        f"{what}: {run_dir} holds no trained model: no model/ (written when the run finishes), no complete step checkpoint in "
        f"{checkpoints}, no finished SFT stage; give {run_dir}@start for the model it started from"
    )


def load_teacher(cfg: Config, tokenizer, student, setting: str = "distill.kl_coef"):
    """The frozen teacher of distillation's token-level terms (`setting`: the knob that asked for it, named in
    errors): it must share the student's tokenizer and output width (the terms compare the same tokens, position
    by position)."""
    teacher, teacher_tokenizer = resolve_model(cfg.distill.teacher, "distill.teacher").load(cfg.run.dtype, str(next(student.parameters()).device))
    fix = (f"; set {setting} = 0 to distill by SFT on the teacher's verified traces alone" if setting == "distill.kl_coef" else
           "; distill by SFT on the teacher's verified traces instead (`rlvr distill` without --on-policy), which needs no shared tokenizer")
    if teacher_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ConfigError(
            f"{setting}: the token-level term needs teacher and student to share a tokenizer, but {cfg.distill.teacher}'s "
            f"vocabulary ({len(teacher_tokenizer)} tokens) differs from the student's ({len(tokenizer)}){fix}"
        )
    widths = [m.get_output_embeddings().weight.shape[0] for m in (teacher, student)]
    if widths[0] != widths[1]:
        raise ConfigError(f"{setting}: teacher and student share a tokenizer but their output layers have {widths[0]} and {widths[1]} rows{fix}")
    teacher.eval().requires_grad_(False)
    return teacher
