"""`rlvr check CONFIG`: the proofs rlvr's own test suite makes on its test models, run on the user's
model, tokenizer, chat template, data and settings before a GPU day is spent on them.

It loads what `rlvr train CONFIG` would load, samples one batch through the run's own learner, and
measures, through the code the run uses (not a copy of it):

    template         the exact text and tokens the model sees; they round-trip through the tokenizer;
                     the template opens the assistant's turn (add_generation_prompt); BOS where the
                     tokenizer expects one
    end_of_turn      the token the template ends an assistant turn with stops sampling
    pad_token        the pad token never occurs in real text (prompts, golds, solutions)
    padding          a row's loss and gradient, padded among longer rows, equal its own alone
    micro_batches    the run's micro-batch plan gives the loss and gradient of one whole-batch pass
    token_budget     so does the tightest train.micro_batch_tokens that admits every row
    engine           the sampling engine's logits at every position equal one full forward's
    sampler_logprobs the sampler's log-probs against the learner's recomputation: the mismatch the run will see
    ray              (distributed.backend = "ray") one rollout worker samples what the local learner samples
    resume           a short run SIGKILLed mid-step and resumed ends where an unbroken one does

Each finding is pass, warn (the run works but will see what is measured), fail (the run would be
wrong; exit status 1, naming the cause and what to change) or skip (does not apply, or --skip).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.markup import escape as markup_escape
from rich.table import Table
from transformers import PreTrainedModel

from rlvr.architecture import LLAMA_FAMILY, base_model, fp32_output_head, logits_in_fp32
from rlvr.config import Config, ConfigError
from rlvr.data import Example, chat_prompts, chat_template_text, format_prompt, prompt_messages
from rlvr.learner import LocalLearner
from rlvr.metrics import read_jsonl_records
from rlvr.models import add_lora, resolve_device
from rlvr.rollout import Rollouts, make_engine
from rlvr.rollout.multiturn import ToolRenderer, ToolSettings
from rlvr.runtime import apply_run_settings, forward_precision, prepare_model, seed_everything
from rlvr.tasks import load_splits
from rlvr.update import Share, UpdateSettings, plan_micro_batches, policy_logprobs, run_update

CHECKS = ("template", "end_of_turn", "pad_token", "dropout", "padding", "micro_batches", "token_budget", "engine", "sampler_logprobs", "ray",
          "resume")
MARK = "\u2063rlvr-check-reply\u2063"  # an assistant reply no template rewrites, to find what follows it


@dataclass
class Finding:
    name: str
    status: str  # pass | warn | fail | skip
    measured: str  # the numbers, or why it was skipped
    fix: str = ""  # what to change (fail, warn)


@dataclass(frozen=True)
class Tolerances:
    """How far two computations of the same quantity may differ, relative to its own scale, so one
    rule holds for a near-uniform random model and a confident real one. fp32 differs by reduction
    order only (1e-7 relative on tiny models, 3e-5 on SmolLM2-135M's 30 layers); bf16 autocast rounds each matmul to 8
    bits of mantissa, so different shapes (padding, micro-batches) differ by 5e-3 (tiny models) to 3e-2
    (SmolLM2's gradient). A defect (a
    per-micro-batch mean, a position off by one) differs by 1e-2 and more."""

    gradient: float  # |g_a - g_b| / |g_b|, and the loss's difference over max(|loss|, 1)
    logprob: float  # the sampler: a sampled token's log-prob difference over the spread of the sampled log-probs
    # The engine: the largest difference over every vocabulary entry and position, over the spread of the log-probs.
    # In bf16 that maximum over 49,152 x 273 values is 0.15 of the spread on SmolLM2 with nothing wrong and 2.1 with
    # positions off by one (the mean mass moved, 0.014 against 0.068, separates them far less).
    engine: float

    @classmethod
    def of(cls, cfg: Config) -> Tolerances:
        low = cfg.run.autocast != "none" or cfg.run.dtype in ("bfloat16", "float16")
        return cls(gradient=0.2, logprob=0.2, engine=0.5) if low else cls(gradient=1e-3, logprob=1e-3, engine=1e-3)


# ----------------------------------------------------------------------------- the template and tokens


def template_findings(tokenizer, examples: list[Example], cfg: Config) -> tuple[list[Finding], dict]:
    """What the model sees of the first prompt, exactly, and whether the template and tokens are sound."""
    data, first = cfg.data, examples[0]
    tools = ToolSettings.from_config(cfg.rollout)  # a tool run renders its prompts with the tools, as the pipeline shows them
    text = ToolRenderer(tokenizer, tools, data).start(first).prompt_text if tools else format_prompt(tokenizer, first, data)
    ids = tokenizer.encode(text, add_special_tokens=False)  # as rollout.encode_prompts encodes every prompt
    shown = {"text": text, "ids": ids, "tokens": tokenizer.convert_ids_to_tokens(ids)}
    problems, warnings = [], []
    back = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    exact = "exact"
    if back != text and _spaced_at_specials(back, tokenizer) == _spaced_at_specials(text, tokenizer):
        # SentencePiece's word-start marker after a special token ('<s>[INST]' -> '<s>', '▁[INST]'): the model was trained on these ids
        exact = "differs only in whitespace next to special tokens"
    elif back != text:
        exact = "differs"
        at = next((i for i, (a, b) in enumerate(zip(back, text)) if a != b), min(len(back), len(text)))
        problems.append(f"the prompt does not survive encode -> decode (first difference at character {at}: "
                        f"{text[at:at + 20]!r} became {back[at:at + 20]!r}); the tokenizer rewrites text, so the model "
                        "is trained on other text than the template wrote")
    chat = chat_prompts(tokenizer, [first], data) is not None or tools is not None
    if chat and tools is None:
        with_prompt, without = (render(tokenizer, prompt_messages(first, data), data, add_generation_prompt=flag) for flag in (True, False))
        if with_prompt == without:
            problems.append("the chat template ignores add_generation_prompt: the prompt ends with the user's turn, so the model "
                            "continues the user's text instead of answering; use a template that opens the assistant's turn "
                            "({% if add_generation_prompt %}...{% endif %}), in data.chat_template")
    bos = tokenizer.bos_token_id
    if bos is not None and bos != tokenizer.eos_token_id and (ids[:1] != [bos]):
        expects = tokenizer.encode("x", add_special_tokens=True)[:1] == [bos]
        if expects:
            warnings.append(f"the tokenizer puts BOS {tokenizer.bos_token!r} first, but the prompts have none (rlvr encodes the "
                            "template's text as written); if the model was trained with BOS, put it in the template or data.system_prompt")
    measured = f"{len(ids)} tokens, {'chat template' if chat else 'plain text (no chat template)'}; encode -> decode {exact}"
    status = "fail" if problems else "warn" if warnings else "pass"
    return [Finding("template", status, measured, "; ".join(problems + warnings))], shown


def _spaced_at_specials(text: str, tokenizer) -> str:
    """`text` without the whitespace directly around the tokenizer's added tokens."""
    pieces = sorted({t.content for t in tokenizer.added_tokens_decoder.values() if t.content}, key=len, reverse=True)
    if not pieces:
        return text
    return re.sub(r"\s*(" + "|".join(re.escape(p) for p in pieces) + r")\s*", r"\1", text)


def render(tokenizer, messages: list[dict], data, *, add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                         chat_template=chat_template_text(data), **data.chat_template_kwargs)


def end_of_turn_finding(tokenizer, example: Example, cfg: Config) -> Finding:
    """The token a chat template closes the assistant's turn with must stop sampling: an instruct model
    ends its answers with it, and a sampler that stops at another token runs every completion to
    rollout.max_new_tokens."""
    eos = tokenizer.eos_token_id
    if eos is None:
        return Finding("end_of_turn", "fail", "the tokenizer has no EOS token", "set tokenizer.eos_token (completions could never end)")
    if chat_prompts(tokenizer, [example], cfg.data) is None:
        return Finding("end_of_turn", "pass", f"plain-text prompts: sampling stops at EOS {tokenizer.eos_token!r} (id {eos})")
    try:
        full = render(tokenizer, [*prompt_messages(example, cfg.data), {"role": "assistant", "content": MARK}], cfg.data,
                      add_generation_prompt=False)
    except Exception as err:  # noqa: BLE001 - a template that cannot render an assistant turn at all
        return Finding("end_of_turn", "warn", f"the template cannot render an assistant turn ({type(err).__name__}: {err})",
                       "SFT on chat targets would fail; check data.chat_template")
    if MARK not in full:
        return Finding("end_of_turn", "warn", "the template drops the assistant's reply text", "check data.chat_template")
    after = full[full.rindex(MARK) + len(MARK):].lstrip(" ")
    if not after.strip():
        return Finding("end_of_turn", "pass", f"the template writes nothing after a reply; sampling stops at EOS {tokenizer.eos_token!r}")
    end = tokenizer.encode(after, add_special_tokens=False)[0]
    stops = {eos}  # rlvr's samplers stop at EOS and at rollout.stop's strings, nothing else
    end_text = tokenizer.decode([end])
    if end in stops or any(s and end_text.startswith(s) for s in cfg.rollout.stop):
        return Finding("end_of_turn", "pass", f"the template ends a reply with {end_text!r} (id {end}), which stops sampling")
    return Finding("end_of_turn", "fail",
                   f"the template ends a reply with {end_text!r} (id {end}) but sampling stops at EOS {tokenizer.eos_token!r} (id {eos}) only",
                   f"an instruct model ends its answers with {end_text!r} and would run on to rollout.max_new_tokens: set the tokenizer's "
                   f"eos_token to {end_text!r}, or add it to rollout.stop")


def pad_finding(tokenizer, examples: list[Example], cfg: Config) -> Finding:
    """Padding must be told from text by its id: no text may encode to the pad token. The pad token is
    special, so decoding skips it: a completion's copies of it vanish before the verifier reads them
    (rlvr.rollout.decode_completions), and tools that find padding by `ids == pad_token_id` drop real
    text. The template's own structure may write it (EOS as pad, closing each turn): that is not text.
    So the texts checked are the rows' contents (prompt, system prompt, answer, solution)."""
    pad = tokenizer.pad_token_id
    texts = [cfg.data.system_prompt] if cfg.data.system_prompt else []
    for e in examples:
        contents = [content for _, content in e.messages] if e.messages else [e.prompt]
        texts += [*contents, e.answer or "", e.solution or ""]
    hits = [t for t in texts if t and pad in tokenizer.encode(t, add_special_tokens=False)]
    role = " = EOS" if pad == tokenizer.eos_token_id else ""
    if hits:
        return Finding("pad_token", "fail",
                       f"pad token {tokenizer.pad_token!r} (id {pad}{role}) is what text encodes to: {len(hits)} of {len(texts)} texts "
                       f"hold it (first: {hits[0][:60]!r})",
                       "decoding skips it as a special token, so a completion's copies vanish before the verifier reads them: set "
                       "tokenizer.pad_token to a token no text contains (its EOS, or a new '<|pad|>')")
    added = tokenizer.added_tokens_decoder.get(pad)
    if added is None:  # a piece of the ordinary vocabulary that these rows happen not to contain
        return Finding("pad_token", "warn", f"pad token {tokenizer.pad_token!r} (id {pad}) is an ordinary vocabulary piece; none of "
                       f"{len(texts)} texts holds it", "other text will: set tokenizer.pad_token to a special token")
    return Finding("pad_token", "pass", f"pad token {tokenizer.pad_token!r} (id {pad}{role}) is in none of {len(texts)} texts")


# ----------------------------------------------------------------------------- the update


class _GradientCapture(torch.optim.Optimizer):
    """An optimizer that moves nothing and keeps the gradient it is asked to step on: the check reads
    the gradient the run's own update computes (rlvr.update.run_update), unclipped. Kept in host
    memory, so a device holds no more than the run's own update does."""

    def __init__(self, params: list[torch.nn.Parameter]):
        super().__init__(params, {"lr": 0.0})
        self.grads: list[torch.Tensor] = []

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ARG002 - the Optimizer signature
        self.grads = [torch.zeros(p.shape) if p.grad is None else p.grad.detach().float().cpu()
                      for group in self.param_groups for p in group["params"]]


def norm(grads: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float(g.square().sum()) for g in grads))


def distance(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float((x - y).square().sum()) for x, y in zip(a, b)))


def dropout_sources(model: torch.nn.Module) -> list[str]:
    """Where dropout is on: Dropout modules (LoRA's lora_dropout, older architectures) and the config's own rates,
    which Llama-family attention applies functionally while the model is in training mode."""
    modules = [m.p for m in model.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0]
    config = getattr(base_model(model), "config", None)
    rates = {k: v for k, v in (vars(config).items() if config is not None else ()) if (k.endswith("dropout") or k.endswith("pdrop"))
             and isinstance(v, float) and v > 0}
    out = [f"config.{k} = {v:g}" for k, v in sorted(rates.items())]
    return out + ([f"{len(modules)} Dropout modules (p = {', '.join(f'{p:g}' for p in sorted(set(modules)))})"] if modules else [])


@contextlib.contextmanager
def dropout_off(model: torch.nn.Module, sources: list[str]):
    """The model in eval mode while the comparisons run, when dropout is on (two passes would draw two masks); gradient
    checkpointing, which transformers applies in training mode only, recomputes the same values and is left out then."""
    was = model.training
    if sources:
        model.eval()
    try:
        yield
    finally:
        model.train(was)


def dropout_finding(sources: list[str]) -> Finding:
    if not sources:
        return Finding("dropout", "pass", "no dropout: the update scores tokens as the sampler drew them")
    return Finding("dropout", "warn", f"dropout is on ({'; '.join(sources)}); the checks below ran the model without it",
                   "the update runs the model with dropout while sampling runs without: every ratio starts off 1 by the dropout's "
                   "noise; RL trainers switch it off (the model config's *_dropout, model.lora_dropout = 0)")


def update_loss_and_gradient(learner: LocalLearner, policy: PreTrainedModel, rollouts: Rollouts, advantages_B: torch.Tensor, settings: UpdateSettings,
                             parts: list[torch.Tensor] | None, cfg: Config) -> tuple[float, list[torch.Tensor]]:
    """The loss and the gradient (per trainable parameter, on the host) of one pass of the run's update
    on this batch, with the micro-batches `settings` plans or the ones given (`parts`), sharing the
    whole batch's normaliser."""
    trainable = [p for group in learner.optimizer.param_groups for p in group["params"]]
    capture = _GradientCapture(trainable)
    scheduler = torch.optim.lr_scheduler.LambdaLR(capture, lambda _: 1.0)
    plan = plan_micro_batches(rollouts, advantages_B, None, settings)
    share = Share.whole(plan) if parts is None else Share(parts, len(parts))
    with forward_precision(cfg, learner.device):
        log = run_update(policy, capture, scheduler, rollouts, advantages_B, settings, plan, share, reference=learner.reference,
                         teacher=learner.teacher)
    for p in trainable:
        p.grad = None
    return log.loss, capture.grads


def check_advantages(B: int, device: torch.device) -> torch.Tensor:
    """Advantages of both signs and several sizes, none zero (a zero-advantage row is not forwarded
    without KL or entropy, and a fresh model's real rewards are often all equal)."""
    return torch.tensor([(1.0 + i / B) * (-1) ** i for i in range(B)], device=device)


def update_findings(learner: LocalLearner, policy: PreTrainedModel, rollouts: Rollouts, cfg: Config, tol: Tolerances, wanted: Callable[[str], bool]) -> list[Finding]:
    B = rollouts.completion_ids_BT.shape[0]
    advantages = check_advantages(B, learner.device)
    one_pass = dataclasses.replace(learner.settings, num_iterations=1, max_grad_norm=0.0)
    whole_plan = dataclasses.replace(one_pass, micro_batch_size=B, micro_batch_tokens=0, bucket_overhead_tokens=0)
    rows = torch.arange(B, device=learner.device)
    loss_ref, grad_ref = update_loss_and_gradient(learner, policy, rollouts, advantages, whole_plan, [rows], cfg)
    scale = norm(grad_ref)
    if scale == 0.0 or not math.isfinite(scale):
        return [Finding(name, "fail", f"the whole-batch gradient is {scale}", "the update computes no gradient on this batch: check the model's "
                        "trainable parameters (LoRA targets) and algo settings") for name in ("padding", "micro_batches", "token_budget") if wanted(name)]

    def compare(name: str, loss: float, grad: list[torch.Tensor], how: str, fix: str) -> Finding:
        gap, loss_gap = distance(grad, grad_ref) / scale, abs(loss - loss_ref) / max(abs(loss_ref), 1.0)
        measured = f"{how}: gradient differs by {gap:.1e} of its norm, loss by {loss_gap:.1e} (tolerance {tol.gradient:.0e})"
        return Finding(name, "pass" if max(gap, loss_gap) <= tol.gradient else "fail", measured, "" if max(gap, loss_gap) <= tol.gradient else fix)

    out = []
    lengths = rollouts.prompt_mask_BP.sum(1) + rollouts.spans_B
    padded_share = 1 - float(lengths.sum()) / (B * (rollouts.prompt_mask_BP.shape[1] + rollouts.completion_mask_BT.shape[1]))
    if wanted("padding") and (B < 2 or padded_share == 0.0):
        out.append(Finding("padding", "skip", f"{B} rows of equal length: no padding to test; raise --prompts or rollout.group_size"))
    elif wanted("padding"):
        loss, grad = update_loss_and_gradient(learner, policy, rollouts, advantages, whole_plan, [rows[i:i + 1] for i in range(B)], cfg)
        out.append(compare("padding", loss, grad, f"{B} rows alone against all in one micro-batch ({padded_share:.0%} of it padding)",
                           "padding changes the loss: a mean over padded positions, attention to padding, or positions counted "
                           "from the padded start (left padding); this model or its attention implementation does not mask padding"))
    if wanted("micro_batches"):
        split, how = one_pass, "the run's plan"
        if len(plan_micro_batches(rollouts, advantages, None, split).parts) < 2:  # the run forwards the batch whole: split it anyway
            split = dataclasses.replace(one_pass, micro_batch_size=max(1, math.ceil(B / 3)), micro_batch_tokens=0, bucket_overhead_tokens=0)
            how = "the run's plan is one micro-batch; split"
        sizes = sorted(len(p) for p in plan_micro_batches(rollouts, advantages, None, split).parts)
        loss, grad = update_loss_and_gradient(learner, policy, rollouts, advantages, split, None, cfg)
        out.append(compare("micro_batches", loss, grad, f"{how} ({len(sizes)} micro-batches of {sizes[0]}-{sizes[-1]} rows) against one",
                           "accumulated micro-batches do not add up to the batch: a mean divided per micro-batch instead of by the whole "
                           "batch's normaliser"))
    if wanted("token_budget"):
        budget = 2 * int(lengths.max())  # two of the longest rows: micro-batches cut by tokens that still pad rows together
        tight = dataclasses.replace(one_pass, micro_batch_size=B, micro_batch_tokens=budget, bucket_overhead_tokens=0)
        parts = plan_micro_batches(rollouts, advantages, None, tight).parts
        loss, grad = update_loss_and_gradient(learner, policy, rollouts, advantages, tight, None, cfg)
        out.append(compare("token_budget", loss, grad, f"train.micro_batch_tokens = {budget} ({len(parts)} micro-batches) against one",
                           "micro-batches cut by a token budget do not add up to the batch"))
    return out


# ----------------------------------------------------------------------------- sampling


def engine_finding(learner: LocalLearner, policy: PreTrainedModel, rollouts: Rollouts, cfg: Config, tol: Tolerances) -> Finding:
    """The engine's logits at every position of the sampled rows against one uncached full forward of each whole row."""
    if cfg.rollout.engine not in ("auto", "static", "transformers"):
        return Finding("engine", "skip", f"rollout.engine = {cfg.rollout.engine}: its logits are not exposed; sampler_logprobs measures it")
    if ToolSettings.from_config(cfg.rollout) is not None:
        return Finding("engine", "skip", "multi-turn rollouts: sampler_logprobs measures the engine on the sampled turns")
    G = cfg.rollout.group_size
    prompts, per = min(2, rollouts.prompt_ids_BP.shape[0] // G), min(G, 2)
    rows = torch.tensor([p * G + g for p in range(prompts) for g in range(per)], device=learner.device)
    part = rollouts.select(rows)
    P, T = part.prompt_ids_BP.shape[1], part.completion_ids_BT.shape[1]
    distinct = part.prompt_ids_BP[::per], part.prompt_mask_BP[::per]
    ids = torch.cat([part.prompt_ids_BP, part.completion_ids_BT], 1)
    mask = torch.cat([part.prompt_mask_BP, part.completion_mask_BT], 1)
    worst, where, count, spreads, distances = 0.0, "", 0, [], []
    temperature = cfg.rollout.temperature
    was_training = policy.training
    policy.eval()
    try:
        with torch.no_grad(), forward_precision(cfg, learner.device):
            # As generate builds it: under autocast (where it decides whether it may pack fp32 weights), for the whole
            # batch's prompt width plus rollout.max_new_tokens (what decides whether the static engine applies).
            engine = make_engine(policy, cfg.rollout.engine, rollouts.prompt_ids_BP.shape[1] + cfg.rollout.max_new_tokens,
                                 cfg.rollout.max_new_tokens)
            reference = full_forward(policy, ids, mask)
            prompt_len = part.prompt_mask_BP.sum(1)
            for t in range(T):
                logits = engine.prefill(*distinct, per) if t == 0 else engine.step(part.completion_ids_BT[:, t - 1], prompt_len + t - 1)
                live = part.completion_mask_BT[:, t].bool()
                if not live.any():
                    break
                got = torch.log_softmax(logits.float()[live] / temperature, -1)
                want = torch.log_softmax(reference(P - 1 + t)[live] / temperature, -1)
                gap = float((got - want).abs().max())
                spreads.append(want.std(-1))
                distances.append(0.5 * (got.exp() - want.exp()).abs().sum(-1))  # total variation: the probability mass moved
                count += int(live.sum())
                if gap > worst:
                    worst, where = gap, f"completion token {t}"
    finally:
        policy.train(was_training)
    name = type(engine).__name__
    spread = float(torch.cat(spreads).mean()) if spreads else 1.0
    mass = float(torch.cat(distances).mean()) if distances else 0.0
    measured = (f"{name}: {count} positions of {len(rows)} rows: largest log-prob difference {worst:.1e} nats ({where or 'none'}), "
                f"{worst / spread:.1e} of the log-probs' spread {spread:.2g} (tolerance {tol.engine:.0e}); probability mass moved "
                f"{mass:.1e} a position on average")
    if worst <= tol.engine * spread:
        return Finding("engine", "pass", measured)
    return Finding("engine", "fail", measured, "the engine's cached decoding does not compute the model's forward (a position or cache "
                   "slot off, a layer computed differently): completions come from another model than the one trained; "
                   "rollout.engine = transformers uses the model's own forward")


def full_forward(policy: PreTrainedModel, ids: torch.Tensor, mask: torch.Tensor) -> Callable[[int], torch.Tensor]:
    """The reference: one uncached forward of whole rows; returns the logits at a column, (rows, V) fp32. For the
    Llama family the decoder runs once and the output layer one column at a time, in fp32 under autocast as the
    engine and the learner compute it (architecture.fp32_output_head): no (rows, length, V) tensor is held."""
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    base = base_model(policy)
    if getattr(base.config, "model_type", None) in LLAMA_FAMILY:
        hidden = base.model(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
        head = fp32_output_head(policy)
        return lambda column: (logits_in_fp32(head, hidden[:, column]) if head is not None else base.lm_head(hidden[:, column])).float()
    logits = policy(input_ids=ids, attention_mask=mask, position_ids=positions).logits  # any other model: its own forward, whole
    return lambda column: logits[:, column].float()


def sampler_finding(learner: LocalLearner, policy: PreTrainedModel, rollouts: Rollouts, cfg: Config, tol: Tolerances) -> Finding:
    """The log-probs the sampler drew each token with against the learner's recomputation (what the update's ratio starts from)."""
    if rollouts.sample_logp_BT is None:
        return Finding("sampler_logprobs", "skip", f"rollout.engine = {cfg.rollout.engine} keeps no log-probs")
    mask = rollouts.completion_mask_BT.bool()
    if rollouts.forced_BT is not None:
        mask &= ~rollouts.forced_BT.bool()  # a thinking budget's forced tokens were not sampled
    gaps, values = [], []
    with torch.no_grad(), forward_precision(cfg, learner.device):
        for start in range(0, mask.shape[0], max(1, learner.settings.micro_batch_size)):
            rows = torch.arange(start, min(start + max(1, learner.settings.micro_batch_size), mask.shape[0]), device=learner.device)
            chunk = rollouts.select(rows)
            logp, _ = policy_logprobs(policy, chunk, learner.settings.temperature, with_entropy=False)
            width = logp.shape[1]
            keep = mask[rows, :width]
            gaps.append((logp.float() - rollouts.sample_logp_BT[rows, :width].float())[keep])
            values.append(logp.float()[keep])
    gap = torch.cat(gaps).abs()
    if gap.numel() == 0:
        return Finding("sampler_logprobs", "skip", "no sampled tokens")
    mean, worst = float(gap.mean()), float(gap.max())
    # The scale: how much the sampled tokens' log-probs themselves vary (near 0 for a near-uniform model, nats for a real one).
    spread = max(float(torch.cat(values).std()) if sum(v.numel() for v in values) > 1 else 1.0, 1e-6)
    measured = (f"{gap.numel()} tokens: mean |difference| {mean:.1e}, largest {worst:.1e} nats, {worst / spread:.1e} of the sampled "
                f"log-probs' spread {spread:.2g} (tolerance {tol.logprob:.0e})")
    own_fp32 = cfg.rollout.engine in ("auto", "static", "transformers") and tol.logprob < 0.01
    if worst <= tol.logprob * spread:
        return Finding("sampler_logprobs", "pass", measured)
    if own_fp32 or mean > 0.1:
        return Finding("sampler_logprobs", "fail", measured, "the sampler draws from another distribution than the learner scores "
                       "(an engine defect, a temperature applied twice, another model's weights)")
    return Finding("sampler_logprobs", "warn", measured, "the update's ratios start off 1 by this much; algo.tis_cap (e.g. 2) corrects "
                   "the surrogate for it")


# ----------------------------------------------------------------------------- Ray and resume


def ray_finding(cfg: Config, model, tokenizer, examples: list[Example], local: Rollouts) -> Finding:
    """One Ray rollout worker samples the same completions, with the same log-probs, as the local learner
    did (both fresh from the run's seed, first round; the check's updates moved no weight)."""
    from rlvr.distributed import make_learner  # Ray is imported only when the run configures it

    one = dataclasses.replace(cfg, distributed=dataclasses.replace(cfg.distributed, rollout_workers=1, reward_workers=1, learner_workers=0))
    learner = make_learner(model, tokenizer, one)
    try:
        remote = learner.generate(examples).rollouts
    finally:
        learner.close()
    if remote.completion_ids_BT.shape != local.completion_ids_BT.shape or not torch.equal(remote.completion_ids_BT.cpu(), local.completion_ids_BT.cpu()):
        return Finding("ray", "fail", "the Ray rollout worker sampled other tokens than the local learner",
                       "the worker's model, tokenizer or seeding differs from the driver's (check distributed.* and rollout.seeding)")
    gap = float((remote.sample_logp_BT.cpu() - local.sample_logp_BT.cpu()).abs().max()) if remote.sample_logp_BT is not None else 0.0
    return Finding("ray", "pass", f"1 rollout worker: the same {int(local.completion_mask_BT.sum())} tokens, log-probs within {gap:.1e}")


SHORT_RUN = ["train.steps=3", "checkpoint.every=1", "checkpoint.keep_last=1", "sft.steps=0", "sft.save_model=false", "train.save_model=true",
             "eval.before_rl=false", "eval.after_rl=false", "eval.every=0", "run.report_every=0", "run.trackers=[]", "rollout.prompts_per_step=2"]
RESUME_TIMEOUT_S = 3600  # each of the three child runs


def resume_finding(config: str | None, overrides: list[str], workdir: Path, cfg: Config) -> Finding:
    """Three steps straight, against three steps SIGKILLed while sampling step 3 and resumed: the same
    metrics and the same final weights (bit for bit on CPU)."""
    command = [sys.executable, "-m", "rlvr.cli", "train" if config else "lab", "--quiet"]

    def run(out: Path, kill: str | None = None, resume: bool = False) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "RLVR_KILL_AT"}
        if kill:
            env["RLVR_KILL_AT"] = kill
        what = ["--resume", str(out)] if resume else [*([config] if config else []), *overrides, *SHORT_RUN, f"run.output_dir={json.dumps(str(out))}"]
        try:
            return subprocess.run(command + what, env=env, capture_output=True, text=True, timeout=RESUME_TIMEOUT_S)
        except subprocess.TimeoutExpired as err:
            return subprocess.CompletedProcess(err.cmd, 124, "", f"did not finish in {RESUME_TIMEOUT_S} s")

    straight, broken = workdir / "straight", workdir / "broken"
    done = run(straight)
    if done.returncode != 0:
        return Finding("resume", "fail", f"a 3-step run failed (exit {done.returncode}): {done.stderr.strip()[-300:]}", "run it with rlvr train to see why")
    killed = run(broken, kill="generate@3")
    if killed.returncode != -9:
        return Finding("resume", "fail", f"the run to be killed ended with exit {killed.returncode} instead of SIGKILL", killed.stderr.strip()[-300:])
    resumed = run(broken, resume=True)
    if resumed.returncode != 0:
        return Finding("resume", "fail", f"resuming failed (exit {resumed.returncode}): {resumed.stderr.strip()[-300:]}",
                       "a killed run of this setup cannot resume")
    metrics = [_comparable(d) for d in (straight, broken)]
    if len(metrics[0]) != 3:
        return Finding("resume", "fail", f"the 3-step run wrote {len(metrics[0])} metrics lines", "run it with rlvr train to see why")
    weights = [_weights(d / "model") for d in (straight, broken)]
    if not weights[0] or weights[0].keys() != weights[1].keys():
        return Finding("resume", "fail", f"the runs' model/ directories hold {len(weights[0])} and {len(weights[1])} weights, not the same set",
                       "run it with rlvr train to see why")
    same_metrics = metrics[0] == metrics[1]
    gap = max((float((a.float() - b.float()).abs().max()) for a, b in zip(weights[0].values(), weights[1].values())), default=0.0)
    same_weights = weights[0].keys() == weights[1].keys() and gap == 0.0
    measured = (f"3 steps straight against killed while sampling step 3 and resumed: metrics {'equal' if same_metrics else 'differ'}, "
                f"final weights {'bit for bit equal' if same_weights else f'differ by up to {gap:.1e}'}")
    if same_metrics and same_weights:
        return Finding("resume", "pass", measured)
    on_gpu = resolve_device(cfg.run.device).type == "cuda"
    if on_gpu and gap < 1e-3:  # GPU kernels are not bitwise deterministic run to run
        return Finding("resume", "warn", measured, "GPU kernels differ run to run in the last bits; CUDA's deterministic mode would make them equal")
    return Finding("resume", "fail", measured, "a state the run needs is not in its checkpoints (an RNG, the data order, the optimizer)")


def _comparable(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "rollout/tokens_per_s"}
            for r in read_jsonl_records(run_dir / "metrics.jsonl")]


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file  # start-up time: only the resume check reads weight files

    out = {}
    for path in sorted(directory.glob("*.safetensors")):
        out.update(load_file(path))
    return out


# ----------------------------------------------------------------------------- the command


@dataclass
class CheckReport:
    findings: list[Finding]
    prompt: dict  # the first prompt's text, ids and tokens

    @property
    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "fail"]

    def to_json(self) -> dict:
        return {"findings": [dataclasses.asdict(f) for f in self.findings], "prompt": self.prompt}


def run_checks(cfg: Config, *, config_path: str | None, overrides: list[str], skip: set[str] = frozenset(), prompts: int = 2) -> CheckReport:
    """Every check of the module docstring on one batch of `prompts` training prompts x rollout.group_size samples.
    A check that raises is a failure naming the exception; the others still run."""
    unknown = skip - set(CHECKS)
    if unknown:
        raise ConfigError(f"--skip: unknown check(s) {sorted(unknown)}; the checks are {', '.join(CHECKS)}")
    findings: list[Finding] = []

    def run(names: tuple[str, ...], compute: Callable[[], list[Finding]]) -> None:
        wanted = [n for n in names if n not in skip]
        if not wanted:
            findings.extend(Finding(n, "skip", "--skip") for n in names)
            return
        try:
            got = compute()
        except Exception as err:  # noqa: BLE001 - a check that cannot run on this setup is its finding, not the end of the others
            got = [Finding(n, "fail", f"raised {type(err).__name__}: {err}", "the run would raise the same") for n in wanted]
        findings.extend(f for f in got if f.name in wanted)
        findings.extend(Finding(n, "skip", "--skip") for n in names if n in skip)

    train, _ = load_splits(cfg)
    examples = train[:max(1, prompts)]
    apply_run_settings(cfg)
    seed_everything(cfg.run.seed)
    tol, shown = Tolerances.of(cfg), {}
    with tempfile.TemporaryDirectory(prefix="rlvr-check-") as tmp:
        workdir = Path(tmp)
        model, tokenizer = prepare_model(cfg, workdir)

        def template() -> list[Finding]:
            found, seen = template_findings(tokenizer, examples, cfg)
            shown.update(seen)
            return found

        run(("template",), template)
        run(("end_of_turn",), lambda: [end_of_turn_finding(tokenizer, examples[0], cfg)])
        run(("pad_token",), lambda: [pad_finding(tokenizer, train[:64], cfg)])
        if cfg.model.lora_rank:
            model = add_lora(model, cfg.model)
        if cfg.distributed.backend == "ray" and cfg.rollout.seeding == "auto":  # what "auto" means on Ray: the ray check compares alike
            cfg = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, seeding="group"))
        # The check drives the learner's own sampling and reads the update's gradient through run_update on the model
        # it built and handed the learner (`model`), as a test would: a run's code never reads a learner's policy.
        sampled = ("dropout", "padding", "micro_batches", "token_budget", "engine", "sampler_logprobs", "ray")
        try:
            learner = LocalLearner(model, tokenizer, cfg)
            with forward_precision(cfg, learner.device):
                rollouts = learner.generate(examples).rollouts
        except Exception as err:  # noqa: BLE001 - what needs a sampled batch cannot run; the rest still does
            findings.extend(Finding(n, "fail", f"building the learner or sampling raised {type(err).__name__}: {err}", "the run would raise "
                                    "the same at its first step") if n not in skip else Finding(n, "skip", "--skip") for n in sampled)
        else:
            learner.sampler.rest()  # as the learner's update does: a vLLM engine on a GPU sleeps through it
            dropout = dropout_sources(model)
            run(("dropout",), lambda: [dropout_finding(dropout)])
            with dropout_off(model, dropout):  # the comparisons need one computation, not two draws of masks
                run(("padding", "micro_batches", "token_budget"), lambda: update_findings(learner, model, rollouts, cfg, tol, lambda n: n not in skip))
                run(("engine",), lambda: [engine_finding(learner, model, rollouts, cfg, tol)])
                run(("sampler_logprobs",), lambda: [sampler_finding(learner, model, rollouts, cfg, tol)])
            if cfg.distributed.backend != "ray":
                findings.append(Finding("ray", "skip", "distributed.backend is local"))
            else:
                run(("ray",), lambda: [ray_finding(cfg, model, tokenizer, examples, rollouts)])
            close = getattr(learner.sampler, "close", None)  # a vLLM engine frees its device memory for the resume check's runs
            if close is not None:
                close()
            learner.close()
            del learner
        del model
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        run(("resume",), lambda: [resume_finding(config_path, overrides, workdir, cfg)])
    order = {name: i for i, name in enumerate(CHECKS)}
    return CheckReport(sorted(findings, key=lambda f: order[f.name]), shown)


def report_table(report: CheckReport) -> Table:
    colour = {"pass": "green", "warn": "yellow", "fail": "red", "skip": "dim"}
    table = Table(title="rlvr check")
    for column in ("check", "result", "measured", "what to change"):
        table.add_column(column)
    for f in report.findings:
        table.add_row(f.name, f"[{colour[f.status]}]{f.status}[/]", markup_escape(f.measured), markup_escape(f.fix))
    return table
