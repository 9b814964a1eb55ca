"""The floor every run stands on: what a command that computes sets up before its own work.

`lab`/`train` (pipeline.py), `eval`, `rft`/`distill`, `recipe` (commands/) and the Ray workers
(distributed/workers.py) all start here, so that a setting means the same in each of them:

- process settings: `apply_run_settings` (threads, the logits budget, prompt sharing, weight
  packing, the allocator, denormals), `seed_everything`, `forward_precision` (run.autocast);
- run directories: `new_run_dir` (`--out` or runs/<kind>-<time>), and what a resumed run may change
  (`RESUMABLE_CHANGES`, `changes_breaking_resume`);
- data: `check_routes`, `data_fingerprint` (the splits themselves are `rlvr.tasks.load_splits`);
- models: `prepare_model` (the user's, or the tiny lab model: `tiny_lab_model`) (a distillation teacher: `rlvr.sources.load_teacher`);
- evaluation: `evaluation_options`, and `draw_report` (report.html, never fatal).

Nothing here knows the recipe (pipeline.py) or any command: they import this, never the reverse.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
from datetime import datetime
from pathlib import Path
from typing import Iterable

import torch
from rich.markup import escape as markup_escape

from rlvr.allocator import retain_freed_memory
from rlvr.config import Config, ConfigError, flatten
from rlvr.data import Example
from rlvr.logprobs import set_logits_budget, set_prompt_sharing
from rlvr.metrics import Reporter
from rlvr.models import build_char_tokenizer, build_tiny_model, load_model, load_tokenizer, resolve_device, save_pretrained
from rlvr.report import write_report
from rlvr.reward import route_of
from rlvr.rollout.engines import set_weight_packing
from rlvr.rollout.multiturn import ToolSettings
from rlvr.rollout.samplers import set_vllm_options
from rlvr.rollout.vllm_sampler import VLLMSettings, vllm_unavailable
from rlvr.rollout.vllm_server import ServerError, server_info
from rlvr.tasks import task_for

# ----------------------------------------------------------------------------- process settings


def apply_run_settings(cfg: Config, threads: int | None = None) -> None:
    """What every process that computes applies first: run.threads (or `threads`: a Ray rollout
    worker's share of its node), the logits budget, prompt sharing, weight packing, the allocator's
    policy for freed memory and denormal flushing."""
    threads = cfg.run.threads if threads is None else threads
    if threads:
        torch.set_num_threads(threads)
    set_logits_budget(cfg.run.logits_budget_mib)
    set_prompt_sharing(cfg.run.share_prompts)
    set_weight_packing(cfg.rollout.pack_weights)
    set_vllm_options(VLLMSettings.from_config(cfg.rollout), cfg.rollout.server_url, cfg.rollout.server_timeout_s)
    retain_freed_memory(cfg.run.retain_freed_memory)
    configure_cpu_math()


def check_engine(cfg: Config) -> None:
    """A vLLM engine that cannot work here is a ConfigError naming the setting, before any model
    loads: vLLM missing, failing to import or too old; no server answering at rollout.server_url.
    (Ray rollout workers check their own engine where they run.)"""
    if cfg.rollout.engine == "vllm":
        why = vllm_unavailable()
        if why is not None:
            raise ConfigError(f"rollout.engine = 'vllm': {why}")
    elif cfg.rollout.engine == "vllm_server":
        try:
            server_info(cfg.rollout.server_url, timeout_s=10.0)
        except ServerError as err:
            raise ConfigError(f"rollout.server_url = {cfg.rollout.server_url!r}: {err}") from None


def configure_cpu_math() -> None:
    """Flush denormal floats to zero. Training drives some activations and gradients into the
    denormal range (below ~1e-38), where x86 float math is ~100x slower: measured here, an SFT
    step of the lab model took 2.2 s with denormals and 0.11 s without. Values that small are
    numerically zero for training purposes."""
    torch.set_flush_denormal(True)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def forward_precision(cfg: Config, device: torch.device):
    """Mixed precision (`run.autocast`): forwards in bf16 under torch.autocast, weights and optimizer
    state in run.dtype. SFT, evaluation and GRPO all run inside it; their backward calls step out of
    it (`backward_outside_autocast`), as torch recommends."""
    if cfg.run.autocast == "none":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=getattr(torch, cfg.run.autocast))


# ----------------------------------------------------------------------------- run directories


def run_dir_name(kind: str) -> str:
    """Where a run of `kind` (train, lab, eval, rft, recipe-<name>, ...) goes when no directory is given."""
    return f"runs/{kind}-{datetime.now():%Y%m%d-%H%M%S}"


def new_run_dir(kind: str, out: str | os.PathLike | None, setting: str = "--out") -> Path:
    """`out`, or runs/<kind>-<time>, created with its parents; what stands in the way (a file, no
    permission, a read-only disk) is a ConfigError naming `setting`, the option that chose it."""
    run_dir = Path(out or run_dir_name(kind))
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{setting}: {run_dir} is a file, not a directory")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a parent that is a file, no permission, a read-only disk
        raise ConfigError(f"{setting}: cannot create {run_dir}: {err.strerror or err}") from None
    return run_dir


# What a resumed run may change without breaking "same result as an uninterrupted run".
RESUMABLE_CHANGES = ("run.output_dir", "run.threads", "run.device", "run.logits_budget_mib", "run.share_prompts", "run.retain_freed_memory", "run.trackers", "run.project", "run.report", "train.steps", "train.save_model", "train.log_samples_every",
                     "train.max_nonfinite_steps", "checkpoint.", "eval.", "monitor.", "rft.", "thinking.budget", "reward.workers", "reward.timeout_s", "reward.max_missing_frac")


def changes_breaking_resume(saved: Config, new: Config) -> list[str]:
    """'field: old -> new' for every changed setting a resume cannot honour exactly."""
    a, b = flatten(saved), flatten(new)
    changed = [f"{k}: {a[k]!r} -> {b[k]!r}" for k in a if a[k] != b[k] and not k.startswith(RESUMABLE_CHANGES)]
    if a["eval.before_sft"] != b["eval.before_sft"]:  # the one phase placed before SFT: adding it would redo every phase after it
        changed.append(f"eval.before_sft: {a['eval.before_sft']!r} -> {b['eval.before_sft']!r} (it runs before SFT, which is already done)")
    if a["distributed.learner_workers"] != b["distributed.learner_workers"] and min(a["distributed.learner_workers"], b["distributed.learner_workers"]) > 0:
        changed = [c for c in changed if not c.startswith("distributed.learner_workers:")]
        changed.append(f"distributed.learner_workers: {a['distributed.learner_workers']} -> {b['distributed.learner_workers']} (the sharded "
                       "checkpoint would load, resharded, but ranks of another number add gradients in another order: the run would "
                       "no longer be the uninterrupted one; to go on with another number, `rlvr export` the checkpoint and start a "
                       "new run from it with model.path)")
    if a["train.steps"] != b["train.steps"] and new.train.lr_schedule != "constant":  # the decay is laid out over train.steps
        changed.append(f"train.steps: {a['train.steps']} -> {b['train.steps']} (train.lr_schedule = {new.train.lr_schedule!r} decays over it)")
    return changed


# ----------------------------------------------------------------------------- data


def check_routes(examples: Iterable[Example], terms: list, route_field: str) -> None:
    """Every row that names its own reward term (reward.route_field) names one that exists: a row
    no term may score would have a missing reward every time."""
    names = {t.name for t in terms}
    unknown = {}
    for e in examples:
        route = route_of(e, route_field)
        if route is not None and route not in names:
            unknown.setdefault(route, e.info.get("source") or e.prompt[:40])
    if unknown:
        raise ConfigError(f"reward.functions: rows name reward terms in their {route_field!r} field that no term is: "
                          f"{sorted(unknown)} (e.g. from {list(unknown.values())[0]!r}); the terms are {sorted(names)}")


def data_fingerprint(examples: list[Example]) -> str:
    """A hash of the training problems in order: a resume must see the same ones."""
    digest = hashlib.sha256()
    for e in examples:
        digest.update(json.dumps([e.prompt, e.answer, e.solution]).encode())
    return digest.hexdigest()[:16]


# ----------------------------------------------------------------------------- models


def tiny_lab_model(cfg: Config):
    """The lab's tiny Qwen3 (model.tiny's shape, weights drawn from run.seed) and its character
    tokenizer (with the thinking tags when task.format asks for them, code's characters for code)."""
    tokenizer = build_char_tokenizer(**task_for(cfg).tiny_tokenizer(cfg))
    return build_tiny_model(tokenizer, cfg.model.tiny, cfg.run.seed), tokenizer


def prepare_model(cfg: Config, run_dir: Path):
    """The user's model, or the tiny lab model built, saved into run_dir/init and loaded back the standard way."""
    device = resolve_device(cfg.run.device)
    path = cfg.model.path
    if not path:
        path = str(save_pretrained(*tiny_lab_model(cfg), run_dir / "init"))
    tokenizer = load_tokenizer(path, cfg.model.trust_remote_code)
    if cfg.data.chat_template:  # the template the run trains with is saved with its tokenizer (model/, exports)
        tokenizer.chat_template = Path(cfg.data.chat_template).read_text(encoding="utf-8")
    model = load_model(path, cfg.run.dtype, str(device), cfg.model.trust_remote_code)
    return model, tokenizer


# ----------------------------------------------------------------------------- evaluation and reports


def evaluation_options(cfg: Config) -> dict:
    """What `evaluate` takes from the rest of the config: its Sampling (eval's, ending at rollout.stop,
    under thinking.budget), the engine, the seed of its sampling, the thinking tags and the tools."""
    return {"sampling": cfg.eval.sampling(cfg.rollout.stop, cfg.thinking), "engine": cfg.rollout.engine, "seed": cfg.run.seed,
            "thinking": cfg.thinking, "tools": ToolSettings.from_config(cfg.rollout)}


def draw_report(run_dir: Path, reporter: Reporter) -> None:
    """report.html of a run or recipe directory. A page that fails to draw is a warning on the
    console: it must never be what ends a training run."""
    try:
        write_report([run_dir])
    except Exception as err:  # noqa: BLE001 - any plotting or reading failure, reported and survived
        reporter.print(f"[yellow]report.html not redrawn[/] ({type(err).__name__}: {markup_escape(str(err))}); "
                       f"`rlvr report {markup_escape(str(run_dir))}` retries")
