"""(1) Rollout: sample completions from the current policy, batched, with a KV cache.

Prompts are left-padded so every row's next token sits in the last column; completions are
right-padded after EOS. `completion_mask_BT` is 1 on every generated token up to and including
EOS, which is exactly the set of tokens the loss sees.

Written as a plain sampling loop over an engine's forward (rollout/engines.py) rather than
`model.generate`: it is the same math, but it lets us share a prompt's KV cache across its group,
drop rows at EOS, keep each token's sampling log-prob and entropy, and keep the per-token
overhead (most of a small model's decode cost) small.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.errors import RunStopped
from rlvr.rollout.controls import ThinkingBudget, ends_with
from rlvr.rollout.engines import make_engine
from rlvr.sampling import Sampling


@dataclass
class Rollouts:
    prompt_ids_BP: torch.Tensor  # left-padded prompt tokens
    prompt_mask_BP: torch.Tensor  # 1 on real prompt tokens
    completion_ids_BT: torch.Tensor  # right-padded generated tokens
    completion_mask_BT: torch.Tensor  # 1 up to and including EOS
    truncated_B: torch.Tensor  # True where max_new_tokens was hit before EOS
    entropy_sum: float  # summed sampling entropy over generated tokens (for logging)
    sample_logp_BT: torch.Tensor | None = None  # log-prob of each token under the sampling distribution (0 on padding)
    forced_BT: torch.Tensor | None = None  # True where a thinking budget forced the token instead of sampling it
    # Multi-turn rollouts (rollout/multiturn.py): 1 on every real token after the prompt, the tool results and
    # template text between the model's turns included. The model attends to all of them; the loss, the KL and
    # every per-token metric see only `completion_mask_BT`, the tokens the policy sampled. None: single-turn, the
    # two masks are one.
    context_mask_BT: torch.Tensor | None = None

    @property
    def lengths_B(self) -> torch.Tensor:
        """Tokens the policy sampled per row (EOS included): what length metrics and penalties count."""
        return self.completion_mask_BT.sum(dim=1)

    @property
    def attention_mask_BT(self) -> torch.Tensor:
        """The completion tokens the model attends to (sampled or not)."""
        return self.completion_mask_BT if self.context_mask_BT is None else self.context_mask_BT

    @property
    def spans_B(self) -> torch.Tensor:
        """Tokens after the prompt per row, tool results included: what a forward pass costs."""
        return self.attention_mask_BT.sum(dim=1)

    def select(self, rows: torch.Tensor) -> "Rollouts":
        """A subset of rows, trimmed to the padding that subset needs."""
        prompt_mask = self.prompt_mask_BP[rows]
        span_mask = self.attention_mask_BT[rows]
        first = int((prompt_mask.sum(0) > 0).nonzero()[0]) if prompt_mask.any() else 0
        last = int(span_mask.sum(1).max()) if span_mask.numel() else 0
        return Rollouts(
            self.prompt_ids_BP[rows, first:],
            prompt_mask[:, first:],
            self.completion_ids_BT[rows, :last],
            self.completion_mask_BT[rows, :last],
            self.truncated_B[rows],
            0.0,
            self.sample_logp_BT[rows, :last] if self.sample_logp_BT is not None else None,
            self.forced_BT[rows, :last] if self.forced_BT is not None else None,
            self.context_mask_BT[rows, :last] if self.context_mask_BT is not None else None,
        )


def concat_rollouts(parts: list[Rollouts], pad_id: int) -> Rollouts:
    """Rows of several rollout batches as one (dynamic sampling keeps groups from several
    generation rounds): prompts re-padded on the left, completions on the right."""
    if len(parts) == 1:
        return parts[0]
    P = max(r.prompt_ids_BP.shape[1] for r in parts)
    T = max(r.completion_ids_BT.shape[1] for r in parts)

    def pad(x: torch.Tensor, width: int, value: int, left: bool) -> torch.Tensor:
        extra = width - x.shape[1]
        return torch.nn.functional.pad(x, (extra, 0) if left else (0, extra), value=value)

    return Rollouts(
        torch.cat([pad(r.prompt_ids_BP, P, pad_id, left=True) for r in parts]),
        torch.cat([pad(r.prompt_mask_BP, P, 0, left=True) for r in parts]),
        torch.cat([pad(r.completion_ids_BT, T, pad_id, left=False) for r in parts]),
        torch.cat([pad(r.completion_mask_BT, T, 0, left=False) for r in parts]),
        torch.cat([r.truncated_B for r in parts]),
        sum(r.entropy_sum for r in parts),
        torch.cat([pad(r.sample_logp_BT, T, 0, left=False) for r in parts]) if all(r.sample_logp_BT is not None for r in parts) else None,
        torch.cat([pad(r.forced_BT.long(), T, 0, left=False).bool() for r in parts]) if all(r.forced_BT is not None for r in parts) else None,
        None if all(r.context_mask_BT is None for r in parts) else torch.cat([pad(r.attention_mask_BT, T, 0, left=False) for r in parts]),
    )


def encode_prompts(tokenizer: PreTrainedTokenizerBase, prompts: list[str], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded (ids, mask), each (B, P). Chat templates already carry their special tokens."""
    return pad_left([tokenizer.encode(p, add_special_tokens=False) for p in prompts], tokenizer.pad_token_id, device)


def pad_left(encoded: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id prompts as left-padded (ids, mask), each (B, P)."""
    if any(len(ids) == 0 for ids in encoded):
        raise ValueError("a prompt encodes to zero tokens")
    width = max(len(ids) for ids in encoded)
    ids = torch.full((len(encoded), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, seq in enumerate(encoded):
        ids[row, width - len(seq) :] = torch.tensor(seq)
        mask[row, width - len(seq) :] = 1
    return ids.to(device), mask.to(device)


def sample_next(
    logits_BV: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None, top_k: int = 0, min_p: float = 0.0
) -> torch.Tensor:
    """One token per row: temperature, then top-k, nucleus (top-p) and min-p truncation, then a
    categorical draw. min-p (Nguyen et al. 2024) keeps the tokens whose probability is at least
    min_p times the most likely one's. Every truncation keeps the most likely token."""
    return sample_from_probs(torch.softmax(logits_BV / temperature, dim=-1), top_p, generator, top_k, min_p)


def sample_from_probs(
    probs_BV: torch.Tensor, top_p: float, generator: torch.Generator | None, top_k: int = 0, min_p: float = 0.0
) -> torch.Tensor:
    """`sample_next` from probabilities already tempered and normalised (decoding has them from
    its log-softmax, so the step does not compute a second softmax)."""
    if 0 < top_k < probs_BV.shape[-1]:
        kth_B1 = probs_BV.topk(top_k, dim=-1).values[:, -1:]
        probs_BV = probs_BV.masked_fill(probs_BV < kth_B1, 0.0)
        probs_BV = probs_BV / probs_BV.sum(dim=-1, keepdim=True)
    if min_p > 0.0:
        probs_BV = probs_BV.masked_fill(probs_BV < min_p * probs_BV.max(dim=-1, keepdim=True).values, 0.0)
        probs_BV = probs_BV / probs_BV.sum(dim=-1, keepdim=True)
    if top_p < 1.0:
        sorted_p, order = probs_BV.sort(dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the top token is always kept).
        drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs_BV = torch.zeros_like(probs_BV).scatter(-1, order, sorted_p)
    return draw_categorical(probs_BV, generator)


def draw_categorical(weights_BV: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One index per row, drawn with probability proportional to its (non-negative) weight, by
    inverting the running sum: one uniform number per row, found in the row's float64 cumulative
    sum. `torch.multinomial` draws one exponential number per vocabulary entry instead (the
    Gumbel-max form): at SmolLM2's 49,152 tokens that is ~43 ms of a ~200 ms decoding step of 32
    rows on a 2-core CPU, against ~2 ms here. An entry of weight 0 is never drawn: the search
    returns the first entry whose running sum exceeds the uniform, and a zero-weight entry's sum
    equals its predecessor's."""
    cdf_BV = weights_BV.double().cumsum(dim=-1)
    total_B1 = cdf_BV[:, -1:]
    u_B1 = torch.rand(total_B1.shape, dtype=torch.float64, device=weights_BV.device, generator=generator) * total_B1
    # u * total can round up to total itself; the largest double below it still lands on the last
    # entry of positive weight.
    u_B1 = torch.minimum(u_B1, torch.nextafter(total_B1, torch.zeros_like(total_B1)))
    return torch.searchsorted(cdf_BV, u_B1, right=True).squeeze(1)


class DecodingError(RunStopped):
    """Sampling cannot go on (the policy's logits are not finite)."""


@torch.no_grad()
def generate(
    model: PreTrainedModel,
    prompt_ids_NP: torch.Tensor,
    prompt_mask_NP: torch.Tensor,
    sampling: Sampling,
    *,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator | None = None,
    generators: list[torch.Generator] | None = None,
    group_size: int = 1,
    engine: str = "auto",
    compact: bool = True,
    stops: list[list[int]] = (),
    thinking: ThinkingBudget | None = None,
    limits_B: torch.Tensor | None = None,
) -> Rollouts:
    """Sample `group_size` completions of each of the N prompts (rows g*G .. g*G+G-1 answer
    prompt g) as `sampling` says, decoding until every row has emitted EOS or a stop sequence, or
    sampling.max_new_tokens is reached. Stop strings and a thinking budget are text in `sampling`;
    here they come as tokens of this batch (rollout/controls.py; rollout.Sampler makes them):
    `stops` the stop strings' token ids, `thinking` the per-row budget state (the forced tokens are
    marked in `forced_BT`). `generators` (one per prompt) gives each
    prompt's G samples their own random stream instead of sharing `generator`: a prompt's
    completions then do not depend on which other prompts share its batch (how a batch is split
    across rollout workers), only on its own seed. `limits_B` (at most sampling.max_new_tokens each)
    caps each row's own tokens: a multi-turn row's later turns get what its budget has left, and a
    row stops drawing at its own limit, so its stream never depends on another row's budget.

    Work is not repeated: each prompt is prefilled once and its KV cache shared by its G samples;
    rows that have finished leave the batch (`compact`: whenever they are a quarter of it, since
    dropping rows copies the cache) so they stop costing attention and MLP compute; and the
    log-prob of every sampled token is kept (`sample_logp_BT`) so the update can check it against
    its own recomputation. `engine` picks the forward pass (rollout/engines.py): 'auto',
    'static' or 'transformers'.
    """
    if sampling.stop and not stops:  # refused rather than ignored: text alone cannot end a row of tokens
        raise ValueError(f"sampling.stop = {sampling.stop} needs its token ids as `stops` (rollout.Sampler encodes them)")
    if sampling.budget is not None and thinking is None:
        raise ValueError("sampling.budget needs its per-row state as `thinking` (rollout.Sampler builds it)")
    max_new_tokens, temperature, top_p, top_k, min_p, greedy = (
        sampling.max_new_tokens, sampling.temperature, sampling.top_p, sampling.top_k, sampling.min_p, sampling.greedy)
    was_training = model.training
    model.eval()
    try:
        G = group_size
        device = prompt_ids_NP.device
        decoder = make_engine(model, engine, prompt_ids_NP.shape[1] + max_new_tokens, max_new_tokens)
        logits_AV = decoder.prefill(prompt_ids_NP, prompt_mask_NP, G)  # A: the rows still decoding
        prompt_ids_BP, prompt_mask_BP = prompt_ids_NP.repeat_interleave(G, 0), prompt_mask_NP.repeat_interleave(G, 0)
        B = prompt_ids_BP.shape[0]
        rows_A = torch.arange(B, device=device)  # which batch row each active row is
        pos_A = prompt_mask_BP.sum(dim=1) - 1  # position of each row's last prompt token
        done_A = torch.zeros(B, dtype=torch.bool, device=device)
        end_B = torch.full((B,), -1, dtype=torch.long, device=device)  # the position each row ended at (EOS or a stop); -1: not yet
        limit_B = torch.full((B,), max_new_tokens, dtype=torch.long, device=device) if limits_B is None else limits_B.to(device)
        tokens_BT = torch.full((B, max_new_tokens), pad_id, dtype=torch.long, device=device)
        sample_logp_BT = torch.zeros((B, max_new_tokens), device=device)
        entropy_sum, steps = torch.zeros((), device=device), 0
        for t in range(max_new_tokens):
            steps = t + 1
            # One reduction instead of a full isfinite pass: the sum of the logits is finite exactly
            # when every logit is (bar an overflow of the sum, itself a sign of divergence).
            # On a GPU, sampling from NaN would be a device-side assert.
            if not bool(torch.isfinite(logits_AV.sum())):
                raise DecodingError(f"the policy's logits are not finite at decoding step {t}: its weights have diverged")
            logp_AV = torch.log_softmax(logits_AV if greedy or temperature == 1.0 else logits_AV / temperature, dim=-1)
            probs_AV = None if greedy else logp_AV.exp()  # for the draw and the entropy
            if greedy:
                next_A = logits_AV.argmax(dim=-1)
            elif generators is None:
                next_A = sample_from_probs(probs_AV, top_p, generator, top_k, min_p)
            else:  # each prompt's rows from its own stream
                # Only rows still writing draw: which finished rows linger until the batch is
                # compacted depends on the whole batch, and a stream must depend on its group alone.
                next_A = torch.full((len(rows_A),), pad_id, dtype=torch.long, device=device)
                group_A = rows_A // G
                for g in torch.unique(group_A[~done_A]).tolist():
                    mine = ((group_A == g) & ~done_A).nonzero().squeeze(1)
                    next_A[mine] = sample_from_probs(probs_AV[mine], top_p, generators[g], top_k, min_p)
            if not greedy:
                entropy_sum += (probs_AV * logp_AV).sum(dim=-1).masked_fill(done_A, 0.0).sum().neg()
            if thinking is not None:
                next_A, forced_A = thinking.steer(next_A, rows_A, t, max_new_tokens)
            next_A = next_A.masked_fill(done_A, pad_id)
            tokens_BT[rows_A, t] = next_A
            sample_logp_BT[rows_A, t] = logp_AV.gather(1, next_A.unsqueeze(1)).squeeze(1).masked_fill(done_A, 0.0)
            ended_A = next_A == eos_id
            for seq in stops:  # a forced token (a budget's closing text) never ends a row
                ended_A |= ends_with(tokens_BT, rows_A, t, seq) & (~forced_A if thinking is not None else True)
            ended_A &= ~done_A
            end_B[rows_A[ended_A]] = t
            if thinking is not None:
                thinking.observe(tokens_BT, rows_A, t, ~done_A, forced_A)
            done_A = done_A | ended_A
            if limits_B is not None:  # a row at its own limit is done (truncated: it ended on no EOS)
                done_A = done_A | (limit_B[rows_A] <= t + 1)
            finished = int(done_A.sum())
            if finished == len(done_A) or t == max_new_tokens - 1:
                break  # (after the last token, its successor's logits would go unused)
            if compact and finished * 4 >= len(done_A):
                keep = torch.nonzero(~done_A).squeeze(1)
                if decoder.keep_rows(keep):
                    rows_A, pos_A, next_A, done_A = rows_A[keep], pos_A[keep], next_A[keep], done_A[keep]
            pos_A = pos_A + 1
            logits_AV = decoder.step(next_A, pos_A)

        completion_ids_BT = tokens_BT[:, :steps]
        # A token is real up to and including the one its row ended on: EOS (or a stop string) is
        # kept, so the model learns (and is credited for) stopping.
        truncated_B = end_B < 0
        positions_T = torch.arange(steps, device=device)
        completion_mask_BT = ((truncated_B.unsqueeze(1) & (positions_T.unsqueeze(0) < limit_B.unsqueeze(1)))
                              | (positions_T.unsqueeze(0) <= end_B.unsqueeze(1))).long()
        forced_BT = thinking.forced_BT[:, :steps] & completion_mask_BT.bool() if thinking is not None and thinking.forced_BT is not None else None
        return Rollouts(prompt_ids_BP, prompt_mask_BP, completion_ids_BT, completion_mask_BT, truncated_B, float(entropy_sum),
                        sample_logp_BT[:, :steps] * completion_mask_BT, forced_BT)
    finally:
        model.train(was_training)


def completion_id_lists(rollouts: Rollouts) -> list[list[int]]:
    """Each completion's token ids, EOS included, padding not: the `completion_ids` TRL hands to
    reward functions (a multi-turn row's tool results included, as TRL's are)."""
    return [[t for t, m in zip(ids, mask) if m] for ids, mask in zip(rollouts.completion_ids_BT.tolist(), rollouts.attention_mask_BT.tolist())]


def decode_completions(tokenizer: PreTrainedTokenizerBase, rollouts: Rollouts) -> list[str]:
    """Completion texts without EOS or padding (what the verifier judges): the tokens the policy
    sampled, so a multi-turn row's tool results are never judged as the model's words."""
    texts = []
    for ids, mask in zip(rollouts.completion_ids_BT.tolist(), rollouts.completion_mask_BT.tolist()):
        kept = [t for t, m in zip(ids, mask) if m and t != tokenizer.eos_token_id]
        texts.append(tokenizer.decode(kept, skip_special_tokens=True))
    return texts
