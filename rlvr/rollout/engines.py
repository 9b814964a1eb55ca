"""Decoding engines: the forward passes behind `generate`'s sampling loop.

An engine prefills the prompts, then runs one forward per new token, and can drop finished rows.
Both engines compute the same function (the model's own modules, weights and rotary embedding);
they differ only in the work around it:

- `TransformersEngine` calls the model as a whole, with its `DynamicCache`. It works for any
  causal LM, including remote-code models. Each call rebuilds the attention mask, grows the cache
  by concatenation and wraps outputs: on a small model that per-call framework work costs more
  than the arithmetic.
- `StaticCacheEngine` drives the model's own layers directly, for the Llama family (Llama,
  Mistral, Qwen2, Qwen3): keys and values go into buffers allocated once for the whole
  completion, the mask is one boolean row per sequence, and attention is one
  `scaled_dot_product_attention` call per layer. Projections, norms, MLPs and rotary embeddings
  are the model's own modules, so LoRA adapters (peft wraps those modules) and any rotary scaling
  the model was configured with apply unchanged. Its decoding step takes 0.70x the transformers
  engine's on the lab model, 0.80-0.84x at 10M-30M parameters (bench/engines.py).

Both are exact to float rounding against a full forward of the same model (tests/test_engines.py).
"""

from __future__ import annotations

import sys

import torch
from torch.nn import functional as F
from transformers import PreTrainedModel

from rlvr.architecture import LLAMA_FAMILY, base_model, cache_argument, fp32_output_head, logits_in_fp32

STATIC_MODEL_TYPES = LLAMA_FAMILY


class TransformersEngine:
    """Any causal LM through its own forward and KV cache."""

    def __init__(self, model: PreTrainedModel):
        self.model = model
        self.cache_arg = cache_argument(type(base_model(model)))
        self.cache: object = None
        self.attn_AL: torch.Tensor | None = None

    def prefill(self, prompt_ids_NP: torch.Tensor, prompt_mask_NP: torch.Tensor, group_size: int) -> torch.Tensor:
        """Logits of each row's next token, (N*G, V) float; rows g*G .. g*G+G-1 copy prompt g."""
        G = group_size
        out = self._forward(prompt_ids_NP, prompt_mask_NP, None, logits_to_keep=1)
        self.cache, logits_BV = getattr(out, self.cache_arg), out.logits[:, -1].float().repeat_interleave(G, 0)
        if G > 1 and hasattr(self.cache, "batch_repeat_interleave"):
            self.cache.batch_repeat_interleave(G)  # the prompt's KV, computed once, shared by its G samples
        elif G > 1:  # a legacy tuple cache (some remote-code models): prefill the copies instead
            ids_BP, mask_BP = prompt_ids_NP.repeat_interleave(G, 0), prompt_mask_NP.repeat_interleave(G, 0)
            out = self._forward(ids_BP, mask_BP, None, logits_to_keep=1)
            self.cache, logits_BV = getattr(out, self.cache_arg), out.logits[:, -1].float()
        self.attn_AL = prompt_mask_NP.repeat_interleave(G, 0)
        return logits_BV

    def step(self, tokens_A: torch.Tensor, positions_A: torch.Tensor) -> torch.Tensor:
        """Append one token per active row; the logits of the next, (A, V) float."""
        self.attn_AL = torch.cat([self.attn_AL, self.attn_AL.new_ones((len(tokens_A), 1))], dim=1)
        out = self._forward(tokens_A.unsqueeze(1), self.attn_AL, positions_A.unsqueeze(1))
        self.cache = getattr(out, self.cache_arg)
        return out.logits[:, -1].float()

    def keep_rows(self, keep_A: torch.Tensor) -> bool:
        """Drop the other rows from the cache; False (nothing dropped) if the cache cannot."""
        if not hasattr(self.cache, "batch_select_indices"):
            return False
        self.cache.batch_select_indices(keep_A)
        self.attn_AL = self.attn_AL[keep_A]
        return True

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor | None, **kwargs):
        if positions is None:
            positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        cache = {self.cache_arg: self.cache} if self.cache is not None else {}
        return self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **cache, **kwargs)


def static_engine_unsupported(model: PreTrainedModel, total_length: int) -> str | None:
    """Why `StaticCacheEngine` cannot run this model for sequences of `total_length` tokens, or
    None when it can. Only layouts it was tested against are accepted."""
    base = base_model(model)
    cfg = base.config
    if cfg.model_type not in STATIC_MODEL_TYPES:
        return f"model type {cfg.model_type!r} is not one of {', '.join(STATIC_MODEL_TYPES)}"
    inner = getattr(base, "model", None)
    if inner is None or not all(hasattr(inner, n) for n in ("embed_tokens", "layers", "norm", "rotary_emb")) or not hasattr(base, "lm_head"):
        return f"{type(base).__name__} does not have the usual embed_tokens/layers/norm/rotary_emb/lm_head layout"
    for layer in inner.layers:
        attn = getattr(layer, "self_attn", None)
        if attn is None or not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling")):
            return f"{type(layer).__name__} does not have the usual attention layout"
        if not all(hasattr(layer, n) for n in ("input_layernorm", "post_attention_layernorm", "mlp")):
            return f"{type(layer).__name__} does not have the usual norm/MLP layout"
    modelling = sys.modules.get(type(inner.layers[0].self_attn).__module__) if len(inner.layers) else None
    if not hasattr(modelling, "apply_rotary_pos_emb"):
        return f"{type(base).__name__}'s modelling code has no apply_rotary_pos_emb (remote code?)"
    layer_types = getattr(cfg, "layer_types", None) or []
    if any(kind != "full_attention" for kind in layer_types) or (getattr(cfg, "use_sliding_window", False) and not layer_types):
        return "the model has sliding-window attention layers"
    window = getattr(cfg, "sliding_window", None) if cfg.model_type == "mistral" else None
    if window is not None and total_length > window:
        return f"sequences of {total_length} tokens exceed the sliding window ({window})"
    return None


class PackedLinear:
    """A decoding-time copy of a Linear layer's weights in oneDNN's blocked layout (CPU, fp32).

    At decoding shapes (a few dozen rows against a weight matrix streamed from memory) MKL's
    sgemm, which `F.linear` calls, re-packs the weight on every call; oneDNN's matmul on a weight
    packed once does not. On SmolLM2-135M, 32 rows, 2 cores (bench/engines.py): the output layer
    46 -> 18 ms, the 30 layers' projections 100 -> 77 ms a step. The same fp32 products summed in
    another order: logits differ by ~1e-6. Weights change every optimizer step, so each generate
    call packs afresh (~0.4 s at 135M parameters, against ~20 s of decoding)."""

    def __init__(self, linear: torch.nn.Linear):
        # The batch-size hint oneDNN packs for: 1 to 512 all decode 32 or 8 rows alike (measured).
        self.weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), 32)
        self.bias = linear.bias.detach() if linear.bias is not None else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")


# Below this hidden size the per-call cost of a oneDNN primitive outweighs what packing saves
# (bench/engines.py --packed on the 192-wide lab model).
PACKED_MIN_HIDDEN = 512
_packing = True


def set_weight_packing(enabled: bool) -> None:
    """Whether the static engine may decode with `PackedLinear` weights (rollout.pack_weights),
    process-wide as the logits budget is."""
    global _packing
    _packing = bool(enabled)


def packing_unsupported(model: PreTrainedModel) -> str | None:
    """Why the static engine cannot decode `model` with `PackedLinear` weights, or None."""
    base = base_model(model)
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        return "this torch build has no oneDNN linear"
    weight = base.get_output_embeddings().weight
    if weight.device.type != "cpu" or torch.is_autocast_enabled("cpu"):
        return "packing is for fp32 decoding on CPU"
    for layer in base.model.layers:
        mlp = layer.mlp
        if not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn")):
            return f"{type(mlp).__name__} is not the gated MLP down(act(gate(x)) * up(x))"
        attn = layer.self_attn
        for linear in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj):
            if type(linear) is not torch.nn.Linear or linear.weight.dtype != torch.float32:  # e.g. a LoRA-wrapped projection
                return f"a projection is a {type(linear).__name__} in {linear.weight.dtype}, not a plain fp32 Linear"
    head = base.get_output_embeddings()
    if type(head) is not torch.nn.Linear or head.weight.dtype != torch.float32:
        return "the output layer is not a plain fp32 Linear"
    return None


class StaticCacheEngine:
    """Llama-family models layer by layer, with keys and values in preallocated buffers."""

    def __init__(self, model: PreTrainedModel, max_new_tokens: int, packed: bool | None = None):
        """`packed`: decode with `PackedLinear` copies of the weights (None: when the model allows
        it and is at least PACKED_MIN_HIDDEN wide; True: insist, and say why not)."""
        self.base = base_model(model)
        self.inner = self.base.model
        reason = packing_unsupported(model)
        if packed and reason is not None:
            raise ValueError(f"packed decoding is not possible for this model: {reason}")
        if packed is None:
            packed = _packing and reason is None and self.base.config.hidden_size >= PACKED_MIN_HIDDEN
        self.linears = self._pack() if packed else None
        self.max_new_tokens = max_new_tokens
        attn = self.inner.layers[0].self_attn
        # The modelling module's own rotary application (the Llama form, shared by all four types).
        self.apply_rotary = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        self.keys: list[torch.Tensor] = []  # per layer (A, Hkv, P + max_new_tokens, D)
        self.values: list[torch.Tensor] = []
        self.valid_AK: torch.Tensor | None = None  # which key columns each row may attend to
        self.filled = 0  # columns written so far
        self.fp32_head = fp32_output_head(model)  # decided once per generate call (autocast does not change inside it)

    def _pack(self) -> dict[torch.nn.Module, PackedLinear]:
        linears = {}
        for layer in self.inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            for linear in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj):
                linears[linear] = PackedLinear(linear)
        head = self.base.get_output_embeddings()
        linears[head] = PackedLinear(head)
        return linears

    def _linear(self, module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return self.linears[module](x) if self.linears is not None else module(x)

    def _mlp(self, mlp: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.linears is None:
            return mlp(x)
        return self._linear(mlp.down_proj, mlp.act_fn(self._linear(mlp.gate_proj, x)) * self._linear(mlp.up_proj, x))

    def prefill(self, prompt_ids_NP: torch.Tensor, prompt_mask_NP: torch.Tensor, group_size: int) -> torch.Tensor:
        N, P = prompt_ids_NP.shape
        K = P + self.max_new_tokens
        self.valid_AK = torch.zeros((N, K), dtype=torch.bool, device=prompt_ids_NP.device)
        self.valid_AK[:, :P] = prompt_mask_NP.bool()
        causal_PP = torch.ones((P, P), dtype=torch.bool, device=prompt_ids_NP.device).tril()
        # A padding query attends to itself only, so no softmax row is empty: some attention
        # backends return NaN for an all-masked row, which would become a NaN key in the next
        # layer, and a masked NaN still poisons a real row's weighted sum (NaN * 0 = NaN).
        eye_PP = torch.eye(P, dtype=torch.bool, device=prompt_ids_NP.device)
        mask_N1PP = (causal_PP & self.valid_AK[:, None, None, :P]) | eye_PP
        positions_NP = (prompt_mask_NP.cumsum(dim=1) - 1).clamp(min=0)
        self.keys, self.values, self.filled = [], [], 0
        logits_NV = self._forward(prompt_ids_NP, positions_NP, mask_N1PP, allocate=K)
        G = group_size
        if G > 1:  # the prompt's KV, computed once, shared by its G samples
            self.keys = [k.repeat_interleave(G, 0) for k in self.keys]
            self.values = [v.repeat_interleave(G, 0) for v in self.values]
            self.valid_AK = self.valid_AK.repeat_interleave(G, 0)
        return logits_NV.repeat_interleave(G, 0)

    def step(self, tokens_A: torch.Tensor, positions_A: torch.Tensor) -> torch.Tensor:
        n = self.filled
        self.valid_AK[:, n] = True
        return self._forward(tokens_A.unsqueeze(1), positions_A.unsqueeze(1), self.valid_AK[:, None, None, : n + 1])

    def keep_rows(self, keep_A: torch.Tensor) -> bool:
        self.keys = [k[keep_A] for k in self.keys]
        self.values = [v[keep_A] for v in self.values]
        self.valid_AK = self.valid_AK[keep_A]
        return True

    def _forward(self, ids_AS: torch.Tensor, positions_AS: torch.Tensor, mask_A1SK: torch.Tensor, allocate: int = 0) -> torch.Tensor:
        """S new tokens per row written at columns filled..filled+S-1; logits of the last, (A, V) float."""
        A, S = ids_AS.shape
        n = self.filled
        x = self.inner.embed_tokens(ids_AS)  # (A, S, hidden)
        cos, sin = self.inner.rotary_emb(x, positions_AS)
        for i, layer in enumerate(self.inner.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = self._linear(attn.q_proj, h).view(A, S, -1, attn.head_dim)
            k = self._linear(attn.k_proj, h).view(A, S, -1, attn.head_dim)
            if hasattr(attn, "q_norm"):  # Qwen3 normalises each head before the rotation
                q, k = attn.q_norm(q), attn.k_norm(k)
            q, k = self.apply_rotary(q.transpose(1, 2), k.transpose(1, 2), cos, sin)  # (A, H, S, D), (A, Hkv, S, D)
            v = self._linear(attn.v_proj, h).view(A, S, -1, attn.head_dim).transpose(1, 2)
            if allocate:  # in v's dtype: under autocast k leaves the rotation in fp32 (fp32 cos/sin), v in bf16
                self.keys.append(v.new_zeros((A, k.shape[1], allocate, k.shape[3])))
                self.values.append(v.new_zeros((A, v.shape[1], allocate, v.shape[3])))
            self.keys[i][:, :, n : n + S] = k
            self.values[i][:, :, n : n + S] = v
            o = attend(q, self.keys[i][:, :, : n + S], self.values[i][:, :, : n + S], mask_A1SK, attn.scaling,
                       expand_kv=q.device.type != "cpu")  # (A, H, S, D)
            x = x + self._linear(attn.o_proj, o.transpose(1, 2).reshape(A, S, -1))
            x = x + self._mlp(layer.mlp, layer.post_attention_layernorm(x))
        self.filled = n + S
        hidden = self.inner.norm(x[:, -1])
        if self.fp32_head is not None:
            return logits_in_fp32(self.fp32_head, hidden)
        return self._linear(self.base.lm_head, hidden).float()


def attend(q_AHSD: torch.Tensor, k_AGKD: torch.Tensor, v_AGKD: torch.Tensor, mask_A1SK: torch.Tensor, scale: float,
           expand_kv: bool) -> torch.Tensor:
    """Attention of H query heads over G <= H key/value heads (grouped-query: query head h reads
    kv head h // (H / G), as transformers' repeat_kv lays them out). On CPU, SDPA's `enable_gqa`
    reads the shared heads in place; on CUDA a boolean mask with `enable_gqa` falls back to the
    slow math kernel, so the kv heads are expanded instead (`expand_kv`), as transformers does."""
    groups = q_AHSD.shape[1] // k_AGKD.shape[1]
    if groups > 1 and expand_kv:
        k_AGKD, v_AGKD = k_AGKD.repeat_interleave(groups, dim=1), v_AGKD.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q_AHSD, k_AGKD, v_AGKD, attn_mask=mask_A1SK, scale=scale,
                                          enable_gqa=groups > 1 and not expand_kv)


def make_engine(model: PreTrainedModel, choice: str, total_length: int, max_new_tokens: int):
    """The engine `rollout.engine` asks for: 'auto' takes the static-cache engine when the model
    allows it, 'static' insists on it (and says why not), 'transformers' always works."""
    if choice not in ("auto", "static", "transformers"):
        raise ValueError(f"rollout.engine must be auto, static or transformers, got {choice!r}")
    if choice == "transformers":
        return TransformersEngine(model)
    reason = static_engine_unsupported(model, total_length)
    if reason is None:
        return StaticCacheEngine(model, max_new_tokens)
    if choice == "static":
        raise ValueError(f"rollout.engine=static cannot run this model: {reason}; use rollout.engine=auto or transformers")
    return TransformersEngine(model)
