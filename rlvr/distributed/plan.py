"""The learner's plan (issue 35): the bytes one training rank holds, worked out from the config and
the model's shape before anything is loaded, and a refusal of a run that cannot fit.

Per rank, with P parameters of which P_t train, W ranks, w = bytes of run.dtype:
- weights: P x w; under LoRA the frozen base in run.dtype and the adapters in fp32 (peft keeps
  them so). FSDP keeps 1/W of them, the frozen base included; DDP and the driver's learner all.
- gradients: P_t x the trainable dtype; optimizer state: AdamW's two moments, 2 x P_t x that dtype
  (torch keeps them in the parameter's dtype; rlvr allocates them before the first step). FSDP
  keeps 1/W of each; `learner_offload` keeps weights, gradients and moments in host memory.
- the KL reference (algo.beta > 0, full fine-tuning): the weights again, placed like the policy's.
  None at beta = 0, nor under LoRA, where the reference is the policy with its adapters off.
- activations: what autograd saves for backward in one micro-batch of train.micro_batch_size rows
  of the longest sequence (the longest prompt + rollout.max_new_tokens), `activation_bytes`;
- logits: the output layer's (positions, vocabulary) fp32 work, `logits_bytes`;
- FSDP's gathered units (learner_rank.shard: the unsharded parameters of the block being
  computed and of the next, prefetched, and of the root, which owns the embedding, final norm and
  head; in bf16 on a GPU under run.autocast, else run.dtype; plus one unit's unsharded fp32
  gradient before its reduce-scatter), and, where FSDP does not gather bf16 copies, the bf16 copy
  of every fp32 matrix that run.autocast makes and keeps for backward.

A rank's peak is their sum: from the second micro-batch of a step on, the gradients accumulated so
far are held while the next micro-batch's activations are (tests/test_plan.py measures the sum
against the profiler's peak). Weight traffic per update: the trainable parameters in their dtype,
which is the rollout workers' (the adapters only under LoRA), over distributed.sync_bandwidth_gbs.

Not counted: the CUDA context, NCCL's buffers and the allocator's fragmentation (leave headroom,
or set distributed.device_memory_gb below the device's size); DDP's rank-order gradient sum
(learner_rank.sum_gradients: W + 1 buckets of 64 MiB, after the backward has freed the
activations); on the local backend the sampler's KV cache (the driver's learner samples too);
AdamW's 4-byte step count per tensor.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from rich.table import Table
from transformers import AutoConfig

from rlvr.architecture import LLAMA_FAMILY
from rlvr.config import Config, ConfigError
from rlvr.data import format_prompt
from rlvr.logprobs import _COPIES, chunk_rows  # the scorer's own count of (positions, vocabulary) copies, and its chunks
from rlvr.models import build_char_tokenizer, load_tokenizer, resolve_device
from rlvr.tasks import task_for

GiB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelShape:
    """What decides a Llama-family decoder's memory: embedding, L blocks of (RMSNorm, attention
    with grouped-query heads, RMSNorm, SwiGLU MLP), a final RMSNorm and the output layer."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool = False
    qk_norm: bool = False  # Qwen3 normalises each head's query and key
    attention_bias: bool = False  # Qwen2 has biases on q, k and v
    model_type: str = "llama"
    name: str = ""

    @classmethod
    def from_hf(cls, config, name: str = "") -> ModelShape | None:
        """The shape of a transformers config; None outside the Llama family (the formulas below
        follow that family's layers, and are tested against them)."""
        if getattr(config, "model_type", None) not in LLAMA_FAMILY:
            return None
        heads = config.num_attention_heads
        return cls(
            hidden_size=config.hidden_size, num_layers=config.num_hidden_layers, num_heads=heads,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            intermediate_size=config.intermediate_size, vocab_size=config.vocab_size,
            tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)), qk_norm=config.model_type == "qwen3",
            attention_bias=bool(getattr(config, "attention_bias", config.model_type == "qwen2")),
            model_type=config.model_type, name=name or getattr(config, "name_or_path", "") or config.model_type,
        )

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each block's matrices."""
        h, q, kv, i = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim, self.intermediate_size
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, i),
                "up_proj": (h, i), "down_proj": (i, h)}

    def block_parameters(self) -> int:
        matrices = sum(a * b for a, b in self.linear_shapes().values())
        bias = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim if self.attention_bias else 0
        return matrices + bias + 2 * self.hidden_size + (2 * self.head_dim if self.qk_norm else 0)

    def root_parameters(self) -> int:
        """Outside the blocks: the embedding, the output layer (unless tied) and the final norm."""
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2) + self.hidden_size

    def parameters(self) -> int:
        return self.num_layers * self.block_parameters() + self.root_parameters()

    def lora_parameters(self, rank: int, targets: tuple[str, ...]) -> int:
        """Adapter parameters, r x (in + out) per adapted matrix. 'all-linear' is peft's: every
        Linear but the output layer."""
        return sum(rank * (a + b) for a, b in self.adapted(targets).values()) * self.num_layers + (
            rank * (self.hidden_size + self.vocab_size) if "lm_head" in targets else 0)

    def adapted(self, targets: tuple[str, ...]) -> dict[str, tuple[int, int]]:
        shapes = self.linear_shapes()
        if tuple(targets) == ("all-linear",):
            return shapes
        unknown = [t for t in targets if t not in shapes and t != "lm_head"]
        if unknown:
            raise ConfigError(f"model.lora_targets: the plan knows the Llama family's {list(LINEARS)} and lm_head, not {unknown}")
        return {t: shapes[t] for t in targets if t in shapes}


# Llama-like shapes for projections (bench/plan_projection.py, docs/distributed.md).
SHAPES = {
    "7B": ModelShape(4096, 32, 32, 32, 128, 11008, 32000, name="7B (Llama-2-7B)"),
    "32B": ModelShape(5120, 64, 40, 8, 128, 27648, 152064, attention_bias=True, model_type="qwen2", name="32B (Qwen2.5-32B)"),
}


@dataclass(frozen=True)
class Setup:
    """The settings that decide a rank's bytes, read from a Config once (`from_config`) so that the
    refusal can try alternatives (`dataclasses.replace`) and name the key each one changes."""

    on_ray: bool  # distributed.backend = "ray": learner ranks can be asked for
    on_gpu: bool  # the learner trains on cuda (FSDP then gathers bf16 copies under run.autocast)
    learner_workers: int
    strategy: str  # "fsdp" | "ddp"; with learner_workers = 0 the learner is the driver's own
    offload: bool
    lora_rank: int
    lora_targets: tuple[str, ...]
    lora_dropout: float
    dtype: str
    autocast: bool
    checkpointing: bool
    micro_batch_size: int
    prompt_tokens: int
    completion_tokens: int
    reference: bool  # algo.beta > 0
    logits_budget_mib: float
    rollout_workers: int  # who receives the weights after each update (0 on the local backend)
    sync_bandwidth_gbs: float

    @classmethod
    def from_config(cls, cfg: Config, prompt_tokens: int) -> Setup:
        d = cfg.distributed
        ranks = d.backend == "ray" and d.learner_workers > 0
        return cls(
            on_ray=d.backend == "ray", on_gpu=d.gpus_per_learner > 0 if ranks else resolve_device(cfg.run.device).type == "cuda",
            learner_workers=d.learner_workers if d.backend == "ray" else 0,
            strategy=d.learner_strategy, offload=d.learner_offload,
            lora_rank=cfg.model.lora_rank, lora_targets=tuple(cfg.model.lora_targets), lora_dropout=cfg.model.lora_dropout,
            dtype=cfg.run.dtype, autocast=cfg.run.autocast == "bfloat16", checkpointing=cfg.model.gradient_checkpointing,
            micro_batch_size=cfg.train.micro_batch_size, prompt_tokens=prompt_tokens, completion_tokens=cfg.rollout.max_new_tokens,
            reference=cfg.algo.beta > 0, logits_budget_mib=cfg.run.logits_budget_mib,
            rollout_workers=d.rollout_workers if d.backend == "ray" else 0, sync_bandwidth_gbs=d.sync_bandwidth_gbs,
        )

    @property
    def ranks(self) -> int:
        return max(1, self.learner_workers)

    @property
    def fsdp(self) -> bool:
        return self.learner_workers > 0 and self.strategy == "fsdp"

    def describe(self) -> str:
        where = f"{self.ranks} {self.strategy} rank{'s' if self.ranks > 1 else ''}" if self.learner_workers else "the driver's learner"
        what = f"LoRA r={self.lora_rank}" if self.lora_rank else "full fine-tuning"
        extras = [x for x, on in (("offload", self.offload and self.fsdp), ("autocast bf16", self.autocast),
                                  ("gradient checkpointing", self.checkpointing)) if on]
        return f"{what}, {where}, run.dtype={self.dtype}{''.join(', ' + x for x in extras)}"


def activation_bytes(shape: ModelShape, s: Setup) -> int:
    """Bytes autograd saves in one micro-batch's forward (B rows of S = prompt + completion tokens),
    counted from the autograd graph of transformers' Llama/Qwen layers under SDPA (torch 2.13) and
    measured in tests/test_plan.py. Per layer and token, h hidden, A = heads x head_dim, a heads,
    i the MLP width, w / c the bytes of the weights' / the compute dtype (2 under run.autocast):
      2 RMSNorms:   (4h + 4 + w h) each: the input upcast to fp32, 1/rms, the normalised input
                    (that last one only for a norm weight that trains)
      attention:    4 c A + 4 a: query, key and value (repeated to every head, repeat_kv), the
                    output; the log-sum-exp. SDPA keeps no (S x S) scores, unlike the 5 a S^2 per
                    layer and row of Korthikanti et al. 2022 (eq. 2, for GPT; its 34 S h also
                    counts dropout masks and a 4h GeLU MLP, which Llama has not)
      SwiGLU MLP:   3 c i: gate (silu's input), silu(gate), up
      matrix inputs: the norms' outputs (2 c h; 5 c h under autocast, which casts one copy per
                    projection) and the MLP's product (c i): the attention output is kept above.
                    LoRA on 16-bit weights instead keeps an fp32 copy (peft casts for its fp32
                    adapters) of each adapted matrix's input, the frozen base keeping none.
      LoRA:         r per adapted matrix (its adapter's inner activation); with lora_dropout the
                    dropped input and its mask
      Qwen3's q/k norms: as the block's norms, over A + kv features, a + kv_heads of 1/rms.
    Once per micro-batch: the final norm and the head's input (w h each), the token ids, the rotary
    cos/sin, and the (B, 1, S, S) attention mask in the compute dtype (transformers builds it
    when rows are padded, as RL batches are). Under LoRA nothing before the first adapter has a
    gradient: layer 0's first norm, the ids and the head's input are not kept.
    Gradient checkpointing keeps each layer's input (w h per token) and recomputes one layer at a
    time in backward (counted here as one layer's worth more). The rows go through one joint
    forward: run.share_prompts computes each prompt once and can only save more."""
    h, a, d, i = shape.hidden_size, shape.num_heads, shape.head_dim, shape.intermediate_size
    A, kv = a * d, shape.num_kv_heads * d
    w = DTYPE_BYTES[s.dtype]
    c = 2 if s.autocast else w
    normalised = 0 if s.lora_rank else w  # the normalised input is kept for the norm weight's gradient only
    adapted = shape.adapted(s.lora_targets) if s.lora_rank else {}
    layer = 2 * (4 * h + 4 + normalised * h) + 4 * c * A + 4 * a + 3 * c * i
    if s.lora_rank and w != 4 and not s.autocast:
        layer += sum(4 * fan_in for fan_in, _ in adapted.values())
    else:
        layer += (5 if s.autocast else 2) * c * h + c * i
    for fan_in, _ in adapted.values():
        layer += s.lora_rank * (c if s.autocast else 4) + (fan_in * (4 + 1) if s.lora_dropout > 0 else 0)
    if shape.qk_norm:
        layer += (4 + normalised) * (A + kv) + 4 * (a + shape.num_kv_heads)
    once = (4 * h + 4 + w * h) + w * h + 8 + 2 * d * w  # final norm; the head's input; token ids; cos and sin
    if s.lora_rank:
        once -= w * h + w * h + 8 + (4 * h + 4)  # frozen: the final norm's weight and the head; layer 0's first norm
    B, S = s.micro_batch_size, s.prompt_tokens + s.completion_tokens
    mask = B * S * S * c
    if s.checkpointing:
        return B * S * (shape.num_layers * w * h + layer + once) + mask
    return B * S * (shape.num_layers * layer + once) + mask


def logits_bytes(shape: ModelShape, s: Setup) -> int:
    """The output layer's fp32 (positions, vocabulary) work at its peak: logits, log-softmax and
    their gradients, `_COPIES` of them (rlvr.logprobs; measured, about three are alive at once).
    For the Llama family with a plain Linear head rlvr scores at most `chunk_rows` positions at a
    time (run.logits_budget_mib); the T + 1 scored positions of B rows otherwise go through at
    once (as they do when LoRA adapts lm_head)."""
    positions = s.micro_batch_size * (s.completion_tokens + 1)
    if shape.model_type in LLAMA_FAMILY and not (s.lora_rank and "lm_head" in s.lora_targets):
        positions = min(positions, chunk_rows(shape.vocab_size, s.logits_budget_mib))
    return _COPIES * positions * shape.vocab_size * 4


@dataclass(frozen=True)
class LearnerPlan:
    """One rank's bytes, on its device and in host memory, and the weight traffic of an update."""

    shape: ModelShape
    setup: Setup
    parameters: int
    trainable: int
    device: dict[str, int]  # component -> bytes on the rank's device
    host: dict[str, int]  # component -> bytes in host memory (learner_offload)
    sync_bytes: int
    device_memory: int | None = None  # bytes of one learner device; None: not checked

    @property
    def device_total(self) -> int:
        return sum(self.device.values())

    @property
    def host_total(self) -> int:
        return sum(self.host.values())

    @property
    def sync_seconds(self) -> float:
        return self.sync_bytes / (self.setup.sync_bandwidth_gbs * 1e9)

    @property
    def fits(self) -> bool:
        return self.device_memory is None or self.device_total <= self.device_memory

    def table(self) -> Table:
        s = self.setup
        t = Table(title=f"learner plan: {self.shape.name or self.shape.model_type}, {_count(self.parameters)} parameters "
                        f"({_count(self.trainable)} trained); {s.describe()}; micro-batch {s.micro_batch_size} x "
                        f"{s.prompt_tokens + s.completion_tokens} tokens", title_justify="left")
        t.add_column("per rank")
        t.add_column("device", justify="right")
        t.add_column("host memory", justify="right")
        for name in dict.fromkeys([*self.device, *self.host]):
            t.add_row(name, *(_size(part[name]) if part.get(name) else "-" for part in (self.device, self.host)))
        t.add_row("[bold]total", f"[bold]{_size(self.device_total)}", f"[bold]{_size(self.host_total)}" if self.host else "-",
                  end_section=True)
        limit = "not checked" if self.device_memory is None else (
            f"{_size(self.device_memory)}: {'fits' if self.fits else '[red]does not fit'}")
        t.add_row("device memory", limit, "")
        if self.device_memory is None:
            t.caption = "set distributed.device_memory_gb (GiB) to check a device this process does not see"
        if s.rollout_workers:
            t.add_row("weights sent per update", f"{self.sync_bytes / 1e9:.3g} GB",
                      f"~{self.sync_seconds:.2g} s at {s.sync_bandwidth_gbs:g} GB/s")
        return t


def _size(n: float) -> str:
    """Bytes as a person reads them."""
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}K"


def plan(shape: ModelShape, s: Setup, device_memory: int | None = None) -> LearnerPlan:
    """Per-rank bytes of the learner `s` describes training a model of `shape`."""
    W = s.ranks
    shard = W if s.fsdp else 1
    w = DTYPE_BYTES[s.dtype]
    P = shape.parameters()
    adapters = shape.lora_parameters(s.lora_rank, s.lora_targets) if s.lora_rank else 0
    trainable, t_bytes = (adapters, 4) if s.lora_rank else (P, w)
    kept = {  # what FSDP shards and learner_offload moves to host memory
        "weights": math.ceil((P * w + adapters * 4) / shard),
        "gradients": math.ceil(trainable * t_bytes / shard),
        "optimizer state": math.ceil(2 * trainable * t_bytes / shard),
        "KL reference": math.ceil(P * w / shard) if s.reference and not s.lora_rank else 0,
    }
    offloaded = s.offload and s.fsdp
    device = {} if offloaded else dict(kept)
    host = dict(kept) if offloaded else {}
    mixed = s.fsdp and s.on_gpu and s.autocast  # FSDP's MixedPrecisionPolicy (learner_rank.shard): it gathers bf16 copies
    if s.fsdp:  # unsharded units: the root (kept gathered from forward to backward), the block computed, the next prefetched
        # + the unsharded fp32 gradient of one unit before its reduce-scatter, at the peak (early in
        # backward, the activations all alive): a block's, or the output layer's, which the root holds
        # from the first backward step to the last (an untied embedding's comes last, the activations gone)
        unit = max(shape.block_parameters(), shape.vocab_size * shape.hidden_size + shape.hidden_size)
        device["gathered units"] = (shape.root_parameters() + 2 * shape.block_parameters()) * (2 if mixed else w) + (
            unit * 4 if not s.lora_rank else 0)
    if s.autocast and w == 4 and not mixed:  # autocast's bf16 copy of every fp32 matrix, kept for backward (frozen ones too)
        device["autocast weight copies"] = 2 * shape.num_layers * sum(a * b for a, b in shape.linear_shapes().values())
    device["activations"] = activation_bytes(shape, s)
    device["logits"] = logits_bytes(shape, s)
    return LearnerPlan(shape, s, P, trainable, {k: v for k, v in device.items() if v}, {k: v for k, v in host.items() if v},
                       sync_bytes=trainable * t_bytes, device_memory=device_memory)


def device_memory_bytes(cfg: Config) -> int | None:
    """One learner device's memory: distributed.device_memory_gb (GiB) when set, else the GPU's own
    when the learner trains on one that this process sees, else None (no check: a CPU's memory
    is the machine's, and a remote rank's GPU is not visible here)."""
    d = cfg.distributed
    if d.device_memory_gb > 0:
        return int(d.device_memory_gb * GiB)
    if Setup.from_config(cfg, 0).on_gpu and torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory
    return None


def alternatives(shape: ModelShape, s: Setup, memory: int) -> list[str]:
    """Changes that would fit, each with the device bytes per rank it would need: the fewest FSDP
    ranks, LoRA, offload, gradient checkpointing, a smaller micro-batch."""
    found = []
    ray = "" if s.on_ray else "distributed.backend=ray "

    def fits(**changes) -> LearnerPlan | None:
        p = plan(shape, dataclasses.replace(s, **changes), memory)
        return p if p.fits else None

    for W in range(max(2, s.ranks + 1), 4097):  # per-rank bytes fall as W grows: the first that fits is the fewest
        if (p := fits(learner_workers=W, strategy="fsdp")) is not None:
            strategy = "" if s.strategy == "fsdp" else " distributed.learner_strategy=fsdp"
            found.append(f"{ray}distributed.learner_workers={W}{strategy} ({_size(p.device_total)} per rank)")
            break
    if not s.lora_rank:
        for dtype in dict.fromkeys([s.dtype, "bfloat16"]):
            if (p := fits(lora_rank=16, dtype=dtype)) is not None:
                found.append(f"model.lora_rank=16{' run.dtype=' + dtype if dtype != s.dtype else ''} ({_size(p.device_total)})")
                break
    if not (s.offload and s.fsdp) and (p := fits(offload=True, strategy="fsdp", learner_workers=s.ranks)) is not None:
        changes = ray + ("distributed.learner_workers=1 " if not s.learner_workers else "") + (
            "distributed.learner_strategy=fsdp " if s.strategy != "fsdp" else "")
        found.append(f"{changes}distributed.learner_offload=true ({_size(p.device_total)} on the device, "
                     f"{_size(p.host_total)} of host memory per rank)")
    if not s.checkpointing and (p := fits(checkpointing=True)) is not None:
        found.append(f"model.gradient_checkpointing=true ({_size(p.device_total)})")
    smaller = next((b for b in range(s.micro_batch_size - 1, 0, -1) if fits(micro_batch_size=b)), None)
    if smaller:
        found.append(f"train.micro_batch_size={smaller}")
    return found


def refuse_if_unfit(p: LearnerPlan) -> LearnerPlan:
    """ConfigError naming the numbers when a rank's device bytes exceed its device, and what would fit."""
    if p.fits:
        return p
    parts = ", ".join(f"{name} {_size(n)}" for name, n in p.device.items())
    fixes = alternatives(p.shape, p.setup, p.device_memory)
    raise ConfigError(
        f"distributed.device_memory_gb: the learner needs {_size(p.device_total)} per rank on its device ({parts}) but a "
        f"device has {_size(p.device_memory)} ({p.setup.describe()}); "
        + ("what would fit: " + "; or ".join(fixes) if fixes else "nothing tried fits (more ranks, LoRA, offload, checkpointing, "
           "a smaller micro-batch): shorten rollout.max_new_tokens or use larger devices")
    )


def model_shape(cfg: Config, vocab_size: int | None = None) -> ModelShape | None:
    """The run's model: model.path's config (by hub id or directory), or the tiny lab model's
    shape (its vocabulary from `vocab_size`, else the task's own tokenizer). None outside the
    Llama family."""
    if cfg.model.path:
        return ModelShape.from_hf(AutoConfig.from_pretrained(cfg.model.path, trust_remote_code=cfg.model.trust_remote_code),
                                  name=cfg.model.path)
    if vocab_size is None:
        vocab_size = len(build_char_tokenizer(**task_for(cfg).tiny_tokenizer(cfg)))
    t = cfg.model.tiny
    return ModelShape(t.hidden_size, t.num_layers, t.num_heads, t.num_kv_heads, t.hidden_size // t.num_heads,
                      t.intermediate_size, vocab_size, tied_embeddings=True, qk_norm=True, model_type="qwen3", name="tiny lab model")


def longest_prompt_tokens(tokenizer, examples, cfg: Config, sample: int = 256) -> int:
    """Tokens of the longest prompt as the sampler encodes it, among the `sample` longest by
    characters (rendering every prompt through a chat template would cost seconds at 20k rows)."""
    longest = sorted(examples, key=lambda e: len(str(e.prompt)), reverse=True)[:sample]
    return max((len(tokenizer.encode(format_prompt(tokenizer, e, cfg.data), add_special_tokens=False)) for e in longest), default=0)


def run_plan(cfg: Config, examples=(), tokenizer=None, *, prompt_tokens: int | None = None,
             shape: ModelShape | None = None) -> LearnerPlan | None:
    """The plan of the run `cfg` describes, not yet checked. The model's shape is model.path's (or
    the tiny model's) unless `shape` is given; the prompt length is `prompt_tokens`, else the
    longest of `examples`' prompts by `tokenizer` (else the run's own). None outside the Llama
    family (no formula to plan it with)."""
    if prompt_tokens is None or (shape is None and not cfg.model.path):
        tokenizer = tokenizer or (load_tokenizer(cfg.model.path, cfg.model.trust_remote_code) if cfg.model.path
                                  else build_char_tokenizer(**task_for(cfg).tiny_tokenizer(cfg)))
    shape = shape or model_shape(cfg, None if cfg.model.path else len(tokenizer))
    if shape is None:
        return None
    if prompt_tokens is None:
        prompt_tokens = longest_prompt_tokens(tokenizer, examples, cfg)
    return plan(shape, Setup.from_config(cfg, prompt_tokens), device_memory_bytes(cfg))


def check_learner_fits(cfg: Config, examples=(), tokenizer=None, *, prompt_tokens: int | None = None,
                       shape: ModelShape | None = None) -> LearnerPlan | None:
    """The run's plan (`run_plan`), refused with a ConfigError when a rank cannot hold it: the call
    a run makes before anything starts (`rlvr train --dry-run` makes it too, printing the plan first)."""
    p = run_plan(cfg, examples, tokenizer, prompt_tokens=prompt_tokens, shape=shape)
    return refuse_if_unfit(p) if p is not None else None
