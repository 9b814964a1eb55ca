"""Log-probs of completion tokens: the one primitive every stage scores tokens with.

RL's update, the KL reference and SFT call `completion_logprobs`, and distillation's token-level
KL `completion_teacher_kl`, so they agree on positions, temperature, masking and precision
(sampling and evaluation decode through the engines, which project only the last position). Under `run.autocast` the decoder runs in bf16 but the output projection in fp32
(`fp32_output_head`), and backward steps out of autocast (`backward_outside_autocast`).

Without full-vocabulary logits: for the Llama family (whose forward is `lm_head(hidden)`) the
decoder's hidden states of the completion positions that count (mask 1) go through the output
layer a chunk of positions at a time, each chunk's logits reduced to the token's log-prob (and
the entropy) before the next is made, so no (rows, positions, vocabulary) tensor exists. With a
graph each chunk is checkpointed (`torch.utils.checkpoint`): backward recomputes that chunk's
logits, one chunk at a time, and the gradient is the unchunked one (the same ops, rows taken in
a different grouping). The chunk's rows come from a memory budget (`run.logits_budget_mib`, 256
MiB by default: `set_logits_budget`): at the lab's 100-token vocabulary every position fits in
one chunk; at SmolLM2's 49,152, 341 positions do. Other models, and an output layer that is not
a plain Linear (LoRA on lm_head, modules_to_save), are scored through their own forward
(`logits_to_keep`), whose logits are whole.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel

from rlvr.architecture import LLAMA_FAMILY, base_model, cache_argument, fp32_output_head, logits_in_fp32
from rlvr.models import AdapterOffReference

DEFAULT_LOGITS_BUDGET_MIB = 256.0
_budget_mib = DEFAULT_LOGITS_BUDGET_MIB
# fp32 copies of a chunk's (rows, vocabulary) alive at once at the peak: logits, log-softmax,
# exp for the entropy, and in backward the gradient of each.
_COPIES = 4


def set_logits_budget(mib: float) -> None:
    """The memory one chunk of output-layer work may take (run.logits_budget_mib), process-wide as
    torch's thread count is: every stage's scoring shares it."""
    global _budget_mib
    if mib <= 0:
        raise ValueError(f"run.logits_budget_mib must be > 0, got {mib}")
    _budget_mib = float(mib)


def chunk_rows(vocab_size: int, budget_mib: float | None = None) -> int:
    """Positions per chunk so that one chunk's vocabulary-wide tensors stay within the budget."""
    budget = (budget_mib if budget_mib is not None else _budget_mib) * 2**20
    return max(1, int(budget // (vocab_size * 4 * _COPIES)))

def completion_log_softmax(
    model: PreTrainedModel,
    prompt_ids_BP: torch.Tensor,
    prompt_mask_BP: torch.Tensor,
    completion_ids_BT: torch.Tensor,
    completion_mask_BT: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """log pi(. | x, y_<t) over the vocabulary at every completion position, shape (B, T, V), fp32.

    Logits are divided by the sampling temperature so the ratio compares the distribution the
    tokens were actually drawn from. Only the last T+1 positions are projected to the vocabulary
    (`logits_to_keep`): prompt positions never need logits.
    """
    T = completion_ids_BT.shape[1]
    input_ids = torch.cat([prompt_ids_BP, completion_ids_BT], dim=1)
    attention = torch.cat([prompt_mask_BP, completion_mask_BT], dim=1)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    head = fp32_output_head(model)  # under autocast: the decoder in bf16, the logits in fp32
    if head is None:
        logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, logits_to_keep=T + 1).logits
    else:
        hidden = base_model(model).model(input_ids=input_ids, attention_mask=attention, position_ids=positions).last_hidden_state
        logits = logits_in_fp32(head, hidden[:, -(T + 1):])
    logits_BTV = logits[:, :-1].float() / temperature  # position t predicts completion token t
    return torch.log_softmax(logits_BTV, dim=-1)


def _completion_hidden(model: PreTrainedModel, prompt_ids_BP, prompt_mask_BP, completion_ids_BT, completion_mask_BT):
    """(hidden states at the last T+1 positions (B, T+1, H): position t predicts completion token
    t, the last predicts what follows; the output layer as a function of them), or None when the
    model's forward is not `lm_head(hidden)`. The T+1 suffix is what the model's own forward
    projects with logits_to_keep=T+1, so the one-chunk path computes exactly what it did."""
    base = base_model(model)
    head = base.get_output_embeddings() if isinstance(base, PreTrainedModel) else None
    if head is None or base.config.model_type not in LLAMA_FAMILY or not isinstance(head, torch.nn.Linear) or not hasattr(base, "model"):
        return None
    T = completion_ids_BT.shape[1]
    hidden = _shared_prompt_hidden(base.model, prompt_ids_BP, prompt_mask_BP, completion_ids_BT, completion_mask_BT)
    if hidden is None:  # no prompt is repeated: prompt and completion in one forward
        input_ids = torch.cat([prompt_ids_BP, completion_ids_BT], dim=1)
        attention = torch.cat([prompt_mask_BP, completion_mask_BT], dim=1)
        positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
        hidden = base.model(input_ids=input_ids, attention_mask=attention, position_ids=positions).last_hidden_state[:, -(T + 1):]
    fp32 = fp32_output_head(model)  # under autocast: the logits in fp32 all the same
    return hidden, ((lambda h: logits_in_fp32(fp32, h)) if fp32 is not None else head)


def set_prompt_sharing(enabled: bool) -> None:
    """Whether rows that share a prompt compute it once (run.share_prompts), process-wide as the
    logits budget is."""
    global _share_prompts
    _share_prompts = bool(enabled)


_share_prompts = True
_MIN_SAVED_POSITIONS = 64


def _shared_prompt_hidden(decoder, prompt_ids_BP, prompt_mask_BP, completion_ids_BT, completion_mask_BT) -> torch.Tensor | None:
    """The decoder's hidden states at the last T+1 positions, (B, T+1, H), computing each distinct
    prompt once: a group's G completions share one prompt, so a batch of B rows holds only B / G
    of them. The prompts go through the decoder alone, their keys and values are copied to the
    rows that share them (`reorder_cache`: an index_select, so gradients from every row sum back
    into the one prompt forward), and the completions attend to them as decoding does. The same
    arithmetic as one joint forward, up to float rounding, on (B/G) x P + B x T positions instead
    of B x (P + T). None when it would save too little (under 64 positions: no prompt repeated,
    SFT's one-token prompts), when sharing is off, or when it cannot run: under gradient
    checkpointing transformers drops the cache in training."""
    B, P = prompt_ids_BP.shape
    if not _share_prompts or P == 0 or B < 2 or getattr(decoder, "gradient_checkpointing", False):
        return None
    key = torch.cat([prompt_ids_BP, prompt_mask_BP.to(prompt_ids_BP.dtype)], dim=1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    # Too few positions saved to pay for a second pass through every layer (SFT's one-token
    # "prompts"), or prompts that are not left-padded (the last prompt position must be a token).
    if (B - len(unique)) * P < _MIN_SAVED_POSITIONS or not bool(prompt_mask_BP[:, -1].all()):
        return None
    ids_UP, mask_UP = unique[:, :P], unique[:, P:].to(prompt_mask_BP.dtype)
    cache_arg = cache_argument(type(decoder))
    prompt = decoder(input_ids=ids_UP, attention_mask=mask_UP, position_ids=(mask_UP.cumsum(dim=1) - 1).clamp(min=0), use_cache=True)
    cache = getattr(prompt, cache_arg)
    if cache is None or cache.get_seq_length() != P:  # a decoder that did not keep its cache (checkpointing under another name)
        return None
    cache.reorder_cache(inverse)  # (U, ...) -> (B, ...), differentiable
    attention = torch.cat([prompt_mask_BP, completion_mask_BT], dim=1)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)[:, P:]
    completion = decoder(input_ids=completion_ids_BT, attention_mask=attention, position_ids=positions, use_cache=True,
                         **{cache_arg: cache}).last_hidden_state
    return torch.cat([prompt.last_hidden_state[:, -1:][inverse], completion], dim=1)


def _chunked(score, inputs: list[torch.Tensor], rows: int) -> list[torch.Tensor]:
    """`score` over row chunks of `inputs`, concatenated; checkpointed when a graph is being built
    (its backward recomputes one chunk at a time instead of keeping every chunk's logits)."""
    n = inputs[0].shape[0]
    if n <= rows:
        return list(score(*inputs))
    graph = torch.is_grad_enabled()
    parts = []
    for start in range(0, n, rows):
        piece = [x[start:start + rows] for x in inputs]
        parts.append(checkpoint(score, *piece, use_reentrant=False) if graph else score(*piece))
    return [torch.cat(outs) for outs in zip(*parts)]


class _HeadTokenScores(torch.autograd.Function):
    """The output layer's token log-probs (and entropies) over N positions, a chunk of `rows`
    positions at a time, with the gradient worked out by hand instead of by autograd through
    checkpointed chunks.

    Forward keeps one number per position (the log-sum-exp; the entropy when asked), never a
    chunk's logits. Backward recomputes each chunk's logits once and turns them in place into
    the gradient with respect to the logits z = (h W^T + b) / temperature:
        d logp_y / dz = onehot(y) - p          d H / dz = -p * (log p + H)
    so g_logp * (onehot - p) - g_H * p * (log p + H), divided by the temperature, then
    multiplies it into the hidden states' and the weights' gradients. That is the arithmetic
    autograd does through `log_softmax` and `gather` on the same values, without its copies:
    every chunk is computed into the same one or two (rows, vocabulary) buffers. A fresh tensor
    of that size (67 MB at SmolLM2's 49,152 tokens and 341 rows) is above glibc's largest mmap
    threshold, so each one is mapped, page-faulted in and unmapped again, ~25 ms apiece on a
    2-core CPU, where the arithmetic on it takes ~5-15 ms. The weight gradient is not computed
    when the head is frozen (LoRA).

    Only for a plain Linear head computed in fp32 (fp32 weights; under autocast the head stays
    fp32 as `fp32_output_head` keeps it, so autocast is off inside).
    """

    @staticmethod
    def forward(ctx, hidden_NH, weight_VH, bias_V, targets_N, temperature, rows, with_entropy):
        N, V = hidden_NH.shape[0], weight_VH.shape[0]
        logp_N = torch.empty(N, dtype=torch.float32, device=hidden_NH.device)
        lse_N = torch.empty_like(logp_N)
        entropy_N = torch.zeros_like(logp_N)
        z_buf = torch.empty((min(rows, N), V), dtype=torch.float32, device=hidden_NH.device)
        e_buf = torch.empty_like(z_buf) if with_entropy else None
        with torch.autocast(device_type=hidden_NH.device.type, enabled=False):
            for start in range(0, N, rows):
                end = min(start + rows, N)
                z = _head_logits(weight_VH, bias_V, hidden_NH[start:end], temperature, z_buf[: end - start])
                token = z.gather(1, targets_N[start:end, None]).squeeze(1)
                top = z.amax(dim=1, keepdim=True)
                z.sub_(top)  # z - max: every exp below is at most 1
                if with_entropy:
                    e = torch.exp(z, out=e_buf[: end - start])
                    log_sum = e.sum(dim=1).log()
                    # H = -sum p log p = log s - sum e (z - max) / s, two non-negative terms
                    entropy_N[start:end] = log_sum - e.mul_(z).sum(dim=1) / log_sum.exp()
                else:
                    log_sum = z.exp_().sum(dim=1).log()
                lse_N[start:end] = top.squeeze(1) + log_sum
                logp_N[start:end] = token - lse_N[start:end]
        ctx.save_for_backward(hidden_NH, weight_VH, bias_V, targets_N, lse_N, entropy_N)
        ctx.temperature, ctx.rows, ctx.with_entropy = temperature, rows, with_entropy
        return logp_N, entropy_N

    @staticmethod
    def backward(ctx, grad_logp_N, grad_entropy_N):
        hidden_NH, weight, bias, targets_N, lse_N, entropy_N = ctx.saved_tensors
        temperature, rows = ctx.temperature, ctx.rows
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[:3]
        N, V = hidden_NH.shape[0], weight.shape[0]
        g_logp_N = grad_logp_N.float() / temperature  # the chain rule through z = logits / temperature
        g_entropy_N = grad_entropy_N.float() / temperature if ctx.with_entropy else None
        grad_hidden = torch.empty_like(hidden_NH) if want_hidden else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_weight else None
        grad_bias = torch.zeros(V, dtype=torch.float32, device=weight.device) if want_bias else None
        z_buf = torch.empty((min(rows, N), V), dtype=torch.float32, device=hidden_NH.device)
        p_buf = torch.empty_like(z_buf) if g_entropy_N is not None else None
        with torch.autocast(device_type=hidden_NH.device.type, enabled=False):
            for start in range(0, N, rows):
                end = min(start + rows, N)
                h = hidden_NH[start:end].float()
                z = _head_logits(weight, bias, h, temperature, z_buf[: end - start]).sub_(lse_N[start:end, None])  # log p
                g = g_logp_N[start:end, None]
                if g_entropy_N is not None:  # -p * (g_logp + g_H * (log p + H))
                    p = torch.exp(z, out=p_buf[: end - start])
                    grad_z = p.mul_(z.add_(entropy_N[start:end, None]).mul_(g_entropy_N[start:end, None]).add_(g)).neg_()
                else:  # -p * g_logp
                    grad_z = z.exp_().mul_(g).neg_()
                grad_z.scatter_add_(1, targets_N[start:end, None], g)  # + g_logp at the token
                if grad_hidden is not None:
                    grad_hidden[start:end] = (grad_z @ weight.float()).to(grad_hidden.dtype)
                if grad_weight is not None:
                    grad_weight.addmm_(grad_z.t(), h)
                if grad_bias is not None:
                    grad_bias += grad_z.sum(dim=0)
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        if grad_bias is not None:
            grad_bias = grad_bias.to(bias.dtype)
        return grad_hidden, grad_weight, grad_bias, None, None, None, None


def _head_logits(weight_VH: torch.Tensor, bias_V: torch.Tensor | None, hidden: torch.Tensor, temperature: float,
                 out: torch.Tensor) -> torch.Tensor:
    """One chunk's fp32 logits written into `out`, divided by the temperature (in place; skipped at 1)."""
    h = hidden.float()
    z = torch.addmm(bias_V.float(), h, weight_VH.t(), out=out) if bias_V is not None else torch.mm(h, weight_VH.t(), out=out)
    return z if temperature == 1.0 else z.div_(temperature)


def _fused_head(model: PreTrainedModel) -> torch.nn.Linear | None:
    """The output layer when `_HeadTokenScores` computes exactly what `head(h).float()` (or the
    fp32 head under autocast) would: a plain fp32 Linear of the Llama family."""
    base = base_model(model)
    head = base.get_output_embeddings() if isinstance(base, PreTrainedModel) else None
    if type(head) is not torch.nn.Linear or head.weight.dtype != torch.float32 or base.config.model_type not in LLAMA_FAMILY:
        return None
    return head


def _scatter(values_N: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Per-position values of the masked-in positions back into (B, T), zeros elsewhere."""
    out = values_N.new_zeros(mask_BT.shape)
    return out.index_put((mask_BT.nonzero(as_tuple=True)), values_N)


def completion_logprobs(
    model: PreTrainedModel,
    prompt_ids_BP: torch.Tensor,
    prompt_mask_BP: torch.Tensor,
    completion_ids_BT: torch.Tensor,
    completion_mask_BT: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    budget_mib: float | None = None,
    score_mask_BT: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """log pi(y_t | x, y_<t) for every completion position, shape (B, T); with `with_entropy`
    also the entropy of pi(. | x, y_<t) at each position, (B, T), with its graph. When the batch
    is past one chunk, positions with mask 0 hold 0 (nothing is computed for them).

    `score_mask_BT` (a subset of the completion mask) names the positions that are scored when
    they differ from those attended to: SFT writes prompt and target as one right-padded row and
    scores only the target's positions. `model` may be a LoRA policy's KL reference
    (`AdapterOffReference`): the policy, scored with its adapters off."""
    if isinstance(model, AdapterOffReference):
        with model.policy.disable_adapter():
            return completion_logprobs(model.policy, prompt_ids_BP, prompt_mask_BP, completion_ids_BT, completion_mask_BT,
                                       temperature, with_entropy, budget_mib, score_mask_BT)
    found = _completion_hidden(model, prompt_ids_BP, prompt_mask_BP, completion_ids_BT, completion_mask_BT)
    if found is None:  # not the Llama family: its own forward, full logits
        logp_BTV = completion_log_softmax(model, prompt_ids_BP, prompt_mask_BP, completion_ids_BT, completion_mask_BT, temperature)
        logp_BT = torch.gather(logp_BTV, 2, completion_ids_BT.unsqueeze(2)).squeeze(2)
        return (logp_BT, -(logp_BTV.exp() * logp_BTV).sum(dim=-1)) if with_entropy else logp_BT
    hidden_BTH, head = found

    def score(h: torch.Tensor, targets: torch.Tensor, logits=None) -> tuple[torch.Tensor, ...]:
        logp = torch.log_softmax((head(h) if logits is None else logits).float() / temperature, dim=-1)
        token = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return (token, -(logp.exp() * logp).sum(dim=-1)) if with_entropy else (token,)

    rows = chunk_rows(base_model(model).get_output_embeddings().weight.shape[0], budget_mib)
    if completion_ids_BT.shape[0] * (completion_ids_BT.shape[1] + 1) <= rows:  # within the budget: one pass, as the model's forward
        outs = score(None, completion_ids_BT, logits=head(hidden_BTH)[:, :-1])
        return (outs[0], outs[1]) if with_entropy else outs[0]
    mask = (completion_mask_BT if score_mask_BT is None else score_mask_BT).bool()  # past the budget: only the positions
    fused = _fused_head(model)  # that count, a chunk at a time
    if fused is not None:
        logp_N, entropy_N = _HeadTokenScores.apply(hidden_BTH[:, :-1][mask], fused.weight, fused.bias, completion_ids_BT[mask],
                                                   float(temperature), rows, with_entropy)
        logp_BT = _scatter(logp_N, mask)
        return (logp_BT, _scatter(entropy_N, mask)) if with_entropy else logp_BT
    outs = _chunked(score, [hidden_BTH[:, :-1][mask], completion_ids_BT[mask]], rows)
    logp_BT = _scatter(outs[0], mask)
    return (logp_BT, _scatter(outs[1], mask)) if with_entropy else logp_BT


def completion_teacher_kl(
    student: PreTrainedModel,
    teacher: PreTrainedModel,
    prompt_ids_BP: torch.Tensor,
    prompt_mask_BP: torch.Tensor,
    completion_ids_BT: torch.Tensor,
    completion_mask_BT: torch.Tensor,
    budget_mib: float | None = None,
    score_mask_BT: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) each: the student's negative log-likelihood of each completion token, and KL(teacher
    || student) over the vocabulary at that position (distillation's token-level term), the
    student's with its graph. A token the teacher gives probability 0 adds 0 (not 0 * -inf = NaN).
    Chunked as `completion_logprobs` is when both are of the Llama family; zeros where the mask
    (`score_mask_BT` when given, as in `completion_logprobs`) is 0."""
    args = (prompt_ids_BP, prompt_mask_BP, completion_ids_BT, completion_mask_BT)
    found = _completion_hidden(student, *args)
    with torch.no_grad():
        taught = _completion_hidden(teacher, *args)
    mask = (completion_mask_BT if score_mask_BT is None else score_mask_BT).bool()

    def kl_terms(student_BTV: torch.Tensor, teacher_BTV: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        nll = -student_BTV.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        kl = torch.where(teacher_BTV > float("-inf"), teacher_BTV.exp() * (teacher_BTV - student_BTV), 0.0).sum(dim=-1)
        return nll, kl

    if found is None or taught is None:
        student_BTV = completion_log_softmax(student, *args)
        with torch.no_grad():
            teacher_BTV = completion_log_softmax(teacher, *args)
        nll_BT, kl_BT = kl_terms(student_BTV, teacher_BTV, completion_ids_BT)
        return nll_BT * mask, kl_BT * mask
    (student_hidden, student_head), (teacher_hidden, teacher_head) = found, taught

    def score(h: torch.Tensor, t: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            teacher_logp = torch.log_softmax(teacher_head(t).float(), dim=-1)
        return kl_terms(torch.log_softmax(student_head(h).float(), dim=-1), teacher_logp, ids)

    rows = chunk_rows(base_model(student).get_output_embeddings().weight.shape[0], budget_mib)
    student_hidden, teacher_hidden = student_hidden[:, :-1], teacher_hidden[:, :-1]
    if completion_ids_BT.numel() <= rows:  # (the T positions that predict a token: the last one is dropped above)
        nll_BT, kl_BT = score(student_hidden, teacher_hidden, completion_ids_BT)
        return nll_BT * mask, kl_BT * mask
    nll_N, kl_N = _chunked(score, [student_hidden[mask], teacher_hidden[mask], completion_ids_BT[mask]], rows)
    return _scatter(nll_N, mask), _scatter(kl_N, mask)


def backward_outside_autocast(loss: torch.Tensor) -> None:
    """`loss.backward()` with autocast switched off. Under `run.autocast` the forwards run in bf16
    inside torch.autocast; torch recommends running backward outside it (the backward ops follow
    the dtypes the forward chose, and the weights' gradients stay in their fp32 dtype)."""
    with torch.autocast(device_type=loss.device.type, enabled=False):
        loss.backward()
