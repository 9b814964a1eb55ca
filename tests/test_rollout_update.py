"""Rollout and update on a real (tiny) transformers model: padding, caching, EOS, exact accumulation."""

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.config import AlgoConfig, TinyModelConfig
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import Rollouts, decode_completions, encode_prompts, generate, sample_next
from rlvr.rollout.generate import draw_categorical
from rlvr.sampling import Sampling
from rlvr.logprobs import completion_logprobs, set_prompt_sharing
from rlvr.update import UpdateSettings, rl_update

PROMPTS = ["1+2=", "3*4-5=", "7=", "9-8*7+6="]


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    m = build_tiny_model(tokenizer, TinyModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64), seed=0)
    return m.eval()


ENGINES = ["static", "transformers"]


def greedy(model, tokenizer, prompts, n=12, engine="auto"):
    ids, mask = encode_prompts(tokenizer, prompts, torch.device("cpu"))
    return generate(model, ids, mask, Sampling(max_new_tokens=n, greedy=True), eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                    engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_batched_cached_decode_equals_one_prompt_at_a_time(model, tokenizer, engine):
    """Left padding + KV cache + explicit positions must not change what a row generates."""
    batch = greedy(model, tokenizer, PROMPTS, engine=engine)
    for row, prompt in enumerate(PROMPTS):
        alone = greedy(model, tokenizer, [prompt], engine=engine)
        n = int(alone.lengths_B[0])
        assert batch.completion_ids_BT[row, :n].tolist() == alone.completion_ids_BT[0, :n].tolist()
        assert int(batch.lengths_B[row]) == n


@pytest.mark.parametrize("engine", ENGINES)
def test_cached_decode_equals_full_recompute(model, tokenizer, engine):
    """Greedy tokens from the cache loop match argmax of a fresh full forward at every step."""
    out = greedy(model, tokenizer, PROMPTS[:1], n=8, engine=engine)
    seq = tokenizer.encode(PROMPTS[0], add_special_tokens=False)
    for tok in out.completion_ids_BT[0].tolist():
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
        assert int(logits.argmax()) == tok
        seq.append(tok)


def test_completion_mask_stops_after_eos_and_keeps_it(tokenizer):
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    ids = torch.tensor([[5, 6, eos, pad, pad], [5, 6, 7, 8, 9], [eos, pad, pad, pad, pad]])
    # reproduce generate()'s masking rule on a hand-made batch
    eos_BT = (ids == eos).long()
    mask = ((eos_BT.cumsum(1) - eos_BT) == 0).long()
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]


def test_generate_marks_truncation_and_decodes_without_eos(model, tokenizer):
    out = greedy(model, tokenizer, PROMPTS, n=3)
    assert out.completion_ids_BT.shape[1] <= 3
    texts = decode_completions(tokenizer, out)
    assert all("<eos>" not in t and "<pad>" not in t for t in texts)
    ended = (out.completion_ids_BT == tokenizer.eos_token_id).any(1)
    assert (out.truncated_B == ~ended).all()


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    g = torch.Generator().manual_seed(0)
    draws = {int(sample_next(logits, 1.0, 0.7, g)) for _ in range(300)}
    assert draws == {0, 1}  # 0.5 + 0.3 reaches 0.7; tokens 2 and 3 are never drawn
    assert {int(sample_next(logits, 1.0, 0.01, g)) for _ in range(50)} == {0}


def test_categorical_draws_follow_the_weights_and_never_a_zero_weight():
    """Inverse-CDF sampling: frequencies match the weights (unnormalised is fine), within 5 sigma
    over 40,000 draws, and an entry of weight 0 is never drawn, even where it sits between others."""
    weights = torch.tensor([0.5, 0.0, 0.3, 0.15, 0.0, 0.05]) * 3.0
    n = 40_000
    draws = draw_categorical(weights.expand(n, -1), torch.Generator().manual_seed(1))
    counts = torch.bincount(draws, minlength=6).double()
    p = weights.double() / weights.sum()
    assert counts[1] == 0 and counts[4] == 0
    sigma = (n * p * (1 - p)).sqrt()
    assert ((counts - n * p).abs() <= 5 * sigma + 1e-9).all(), counts.tolist()


def test_categorical_draw_at_the_top_of_the_range_lands_on_a_real_entry(monkeypatch):
    """A uniform that rounds up to the total (u * total == total) must still pick the last entry of
    positive weight, not run past the end or onto trailing zeros."""
    real_rand = torch.rand
    monkeypatch.setattr(torch, "rand", lambda *a, **k: torch.ones_like(real_rand(*a, **k)))  # u = 1: beyond [0, 1)
    weights = torch.tensor([[0.2, 0.7, 0.0, 0.0], [1.0, 0.0, 0.0, 3.0]])
    assert draw_categorical(weights, None).tolist() == [1, 3]


def test_logprobs_ignore_padding_on_both_sides(model, tokenizer):
    """Extra left padding of prompts and right padding of completions changes no real log-prob."""
    out = greedy(model, tokenizer, PROMPTS, n=6)
    lp = completion_logprobs(model, out.prompt_ids_BP, out.prompt_mask_BP, out.completion_ids_BT, out.completion_mask_BT)
    pad = tokenizer.pad_token_id
    left = lambda x, v: torch.cat([torch.full((x.shape[0], 3), v), x], 1)  # noqa: E731
    right = lambda x, v: torch.cat([x, torch.full((x.shape[0], 4), v)], 1)  # noqa: E731
    lp2 = completion_logprobs(
        model, left(out.prompt_ids_BP, pad), left(out.prompt_mask_BP, 0), right(out.completion_ids_BT, pad), right(out.completion_mask_BT, 0)
    )
    m = out.completion_mask_BT.bool()
    torch.testing.assert_close(lp2[:, : lp.shape[1]][m], lp[m], atol=1e-5, rtol=1e-5)


def make_rollouts(model, tokenizer, G=4):
    prompts = [p for p in PROMPTS for _ in range(G)]
    ids, mask = encode_prompts(tokenizer, prompts, torch.device("cpu"))
    g = torch.Generator().manual_seed(1)
    return generate(model, ids, mask, Sampling(max_new_tokens=8), eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, generator=g)


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean", "constant"])
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_update_gradient_is_independent_of_micro_batch_size(model, tokenizer, aggregation, beta):
    """Accumulating micro-batches of 1, 3 or all rows gives the same gradient (and the same step)."""
    rollouts = make_rollouts(model, tokenizer)
    adv = torch.linspace(-1.0, 1.0, rollouts.completion_ids_BT.shape[0])
    adv[:4] = 0.0  # a flat group: skipped at beta = 0, still in the denominator
    grads = []
    for mbs in (1, 3, 64):
        policy = copy.deepcopy(model).train()
        reference = copy.deepcopy(model).eval() if beta > 0 else None
        opt = torch.optim.SGD(policy.parameters(), lr=0.0)  # lr 0: keep weights, read the gradient
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        algo = AlgoConfig(aggregation=aggregation, beta=beta)
        settings = UpdateSettings.from_algo(algo, temperature=1.0, max_new_tokens=8, micro_batch_size=mbs, max_grad_norm=0.0)
        rl_update(policy, opt, sched, rollouts, adv, settings, reference=reference)
        grads.append(torch.cat([p.grad.flatten() for p in policy.parameters()]))
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[1], grads[0], atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(grads[2], grads[0], atol=1e-6, rtol=1e-4)


def test_select_trims_padding_the_subset_does_not_need():
    r = Rollouts(
        prompt_ids_BP=torch.tensor([[0, 0, 5], [4, 4, 4]]),
        prompt_mask_BP=torch.tensor([[0, 0, 1], [1, 1, 1]]),
        completion_ids_BT=torch.tensor([[1, 0, 0], [6, 6, 1]]),
        completion_mask_BT=torch.tensor([[1, 0, 0], [1, 1, 1]]),
        truncated_B=torch.tensor([False, False]),
        entropy_sum=0.0,
    )
    sub = r.select(torch.tensor([0]))
    assert sub.prompt_ids_BP.tolist() == [[5]] and sub.completion_ids_BT.tolist() == [[1]]


# ----------------------------------------------------------------------------- shared prefill, compaction, sampling log-probs


@pytest.fixture
def stops_at_position_9(model, tokenizer):
    """Make the model say EOS whenever it writes position 9, so rows of different prompt
    lengths finish at different steps (and compaction has rows to drop). Hooked on the rotary
    embedding (which sees every forward's positions) and the LM head, so it acts the same in
    every engine and in the update's forward."""
    seen = {}

    def remember_positions(module, args, output):
        seen["positions"] = args[1]

    def force_eos(module, args, output):
        pos = seen["positions"][:, -output.shape[-2]:] if output.dim() == 3 else seen["positions"][:, -1]
        output[..., tokenizer.eos_token_id] += 1e4 * (pos == 8)  # logits at position 8 predict position 9
        return output

    handles = [model.model.rotary_emb.register_forward_hook(remember_positions), model.lm_head.register_forward_hook(force_eos)]
    # The hook reads positions from the last forward; with prompts shared the update's last forward
    # holds only the completions' (tests/test_prompt_sharing.py shows that path equal to this one).
    set_prompt_sharing(False)
    yield model
    set_prompt_sharing(True)
    for handle in handles:
        handle.remove()


@pytest.mark.parametrize("engine", ENGINES)
def test_shared_prompt_cache_equals_prefilling_every_copy(model, tokenizer, engine):
    ids, mask = encode_prompts(tokenizer, PROMPTS, torch.device("cpu"))
    sampling, kw = Sampling(max_new_tokens=10, greedy=True), dict(eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, engine=engine)
    shared = generate(model, ids, mask, sampling, group_size=3, **kw)
    copies = generate(model, ids.repeat_interleave(3, 0), mask.repeat_interleave(3, 0), sampling, **kw)
    assert torch.equal(shared.prompt_ids_BP, copies.prompt_ids_BP)
    assert torch.equal(shared.completion_ids_BT, copies.completion_ids_BT)
    assert torch.equal(shared.completion_mask_BT, copies.completion_mask_BT)


@pytest.mark.parametrize("engine", ENGINES)
def test_dropping_finished_rows_changes_no_row(stops_at_position_9, tokenizer, engine):
    ids, mask = encode_prompts(tokenizer, PROMPTS, torch.device("cpu"))
    sampling, kw = Sampling(max_new_tokens=12, greedy=True), dict(eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, group_size=2, engine=engine)
    compacted = generate(stops_at_position_9, ids, mask, sampling, compact=True, **kw)
    full = generate(stops_at_position_9, ids, mask, sampling, compact=False, **kw)
    assert len(set(compacted.lengths_B.tolist())) >= 3  # rows did finish at different steps
    assert torch.equal(compacted.completion_ids_BT, full.completion_ids_BT)
    torch.testing.assert_close(compacted.sample_logp_BT, full.sample_logp_BT, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_logprobs_match_the_updates_recomputation(stops_at_position_9, tokenizer, temperature, engine):
    ids, mask = encode_prompts(tokenizer, PROMPTS, torch.device("cpu"))
    r = generate(stops_at_position_9, ids, mask, Sampling(max_new_tokens=12, temperature=temperature), eos_id=tokenizer.eos_token_id,
                 pad_id=tokenizer.pad_token_id, group_size=4, generator=torch.Generator().manual_seed(0), engine=engine)
    recomputed = completion_logprobs(stops_at_position_9, r.prompt_ids_BP, r.prompt_mask_BP, r.completion_ids_BT, r.completion_mask_BT, temperature)
    m = r.completion_mask_BT.bool()
    torch.testing.assert_close(r.sample_logp_BT[m], recomputed[m], atol=1e-4, rtol=1e-4)
    assert (r.sample_logp_BT[~m] == 0).all()


def test_token_budget_groups_short_rows_and_separates_long_ones():
    from rlvr.batching import token_budget_batches

    rows = torch.tensor([3, 0, 1, 2, 4])  # sorted by length: 2, 2, 3, 9, 20
    lengths = torch.tensor([2, 3, 9, 2, 20])
    parts = token_budget_batches(rows, lengths, max_rows=64, max_tokens=10)
    assert [p.tolist() for p in parts] == [[3, 0, 1], [2], [4]]  # 3 x 3 = 9 fits; 2 x 9 does not; 20 alone
    assert [p.tolist() for p in token_budget_batches(rows, lengths, max_rows=2, max_tokens=100)] == [[3, 0], [1, 2], [4]]
    assert [p.tolist() for p in token_budget_batches(rows, lengths, max_rows=2, max_tokens=0)] == [[3, 0], [1, 2], [4]]


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean", "constant"])
def test_token_budget_micro_batches_give_the_whole_batch_gradient(model, tokenizer, aggregation):
    rollouts = make_rollouts(model, tokenizer)
    adv = torch.linspace(-1.0, 1.0, rollouts.completion_ids_BT.shape[0])
    grads = []
    for tokens in (0, 30, 1):  # whole batch; a budget; one row per micro-batch
        policy = copy.deepcopy(model).train()
        opt = torch.optim.SGD(policy.parameters(), lr=0.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        settings = UpdateSettings.from_algo(AlgoConfig(aggregation=aggregation), temperature=1.0, max_new_tokens=8,
                                            micro_batch_size=64, max_grad_norm=0.0, micro_batch_tokens=tokens)
        rl_update(policy, opt, sched, rollouts, adv, settings)
        grads.append(torch.cat([p.grad.flatten() for p in policy.parameters()]))
    torch.testing.assert_close(grads[1], grads[0], atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(grads[2], grads[0], atol=1e-6, rtol=1e-4)


def test_length_buckets_split_where_padding_costs_more_than_a_forward():
    from rlvr.update import length_buckets

    rows = torch.tensor([0, 1, 2, 3, 4, 5])  # sorted by completion length
    prompt = torch.tensor([3, 3, 3, 3, 3, 3])
    completion = torch.tensor([2, 2, 2, 2, 40, 40])
    # One forward: 6 x 43 = 258 positions + 20. Two: 4 x 5 + 2 x 43 = 106 positions + 40: cheaper.
    assert [b.tolist() for b in length_buckets(rows, prompt, completion, 20)] == [[0, 1, 2, 3], [4, 5]]
    # When a forward is worth more than the 152 positions saved, everything stays together.
    assert [b.tolist() for b in length_buckets(rows, prompt, completion, 200)] == [[0, 1, 2, 3, 4, 5]]
    # The longest prompt of a bucket pads it too (Rollouts.select trims to it).
    prompt = torch.tensor([30, 1, 1, 1, 1, 1])
    assert [b.tolist() for b in length_buckets(rows, prompt, torch.full((6,), 2), 20)] == [[0], [1, 2, 3, 4, 5]]
    assert [b.tolist() for b in length_buckets(rows, prompt, completion, 0)] == [[0, 1, 2, 3, 4, 5]]  # 0 = off


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.integers(1, 30)), min_size=1, max_size=7), st.integers(1, 60))
def test_length_buckets_are_the_cheapest_consecutive_split(sizes, overhead):
    """Against every way to cut the sorted rows into consecutive buckets."""
    from itertools import combinations

    from rlvr.update import length_buckets

    sizes = sorted(sizes, key=lambda pt: pt[1])
    prompt, completion = torch.tensor([p for p, _ in sizes]), torch.tensor([t for _, t in sizes])
    rows = torch.arange(len(sizes))

    def cost(buckets):
        return sum(len(b) * (max(prompt[b].tolist()) + max(completion[b].tolist())) + overhead for b in buckets)

    got = length_buckets(rows, prompt, completion, overhead)
    assert torch.equal(torch.cat(got), rows)
    n = len(sizes)
    best = min(cost([rows[a:b] for a, b in zip((0, *cuts), (*cuts, n))]) for k in range(n) for cuts in combinations(range(1, n), k))
    assert cost(got) == best


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_length_buckets_give_the_whole_batch_gradient(model, tokenizer, aggregation):
    from rlvr.update import length_buckets

    rollouts = make_rollouts(model, tokenizer)
    adv = torch.linspace(-1.0, 1.0, rollouts.completion_ids_BT.shape[0])
    rows = torch.argsort(rollouts.lengths_B, stable=True)
    assert len(length_buckets(rows, rollouts.prompt_mask_BP.sum(1), rollouts.lengths_B, 1)) >= 3  # really split
    grads = []
    for overhead in (0, 1):  # one forward; a bucket per distinct length
        policy = copy.deepcopy(model).train()
        opt = torch.optim.SGD(policy.parameters(), lr=0.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        settings = UpdateSettings.from_algo(AlgoConfig(aggregation=aggregation, beta=0.1), temperature=1.0, max_new_tokens=8,
                                            micro_batch_size=64, max_grad_norm=0.0, bucket_overhead_tokens=overhead)
        rl_update(policy, opt, sched, rollouts, adv, settings, reference=copy.deepcopy(model))
        grads.append(torch.cat([p.grad.flatten() for p in policy.parameters()]))
    torch.testing.assert_close(grads[1], grads[0], atol=1e-6, rtol=1e-4)


@pytest.fixture
def ends_at_random(model, tokenizer):
    """The model with its EOS logit raised, so rows end at random steps: the rows of one prompt
    finish at different times, and finished rows linger until the batch is compacted."""
    def raise_eos(module, args, output):
        output[..., tokenizer.eos_token_id] += 3.0
        return output

    handle = model.lm_head.register_forward_hook(raise_eos)
    yield model
    handle.remove()


@pytest.mark.parametrize("engine", ENGINES)
def test_group_seeding_makes_a_prompts_samples_independent_of_its_batch(ends_at_random, tokenizer, engine):
    """rollout.seeding = "group": a prompt's G samples come from its own stream, so splitting a
    round across rollout workers (each given a slice and its place in the round) samples the same
    tokens as one batch, while a shared stream would not. Only rows still writing may draw from a
    stream: when finished rows are compacted away depends on the whole batch."""
    from rlvr.learner import group_generators

    def sample(prompts, first, seeded=True, compact=True):
        ids, mask = encode_prompts(tokenizer, prompts, torch.device("cpu"))
        gens = group_generators(7, 3, len(prompts), torch.device("cpu"), first=first) if seeded else None
        out = generate(ends_at_random, ids, mask, Sampling(max_new_tokens=12, temperature=1.0), eos_id=tokenizer.eos_token_id,
                       pad_id=tokenizer.pad_token_id, generator=torch.Generator().manual_seed(0), group_size=3, engine=engine, generators=gens,
                       compact=compact)
        return [out.completion_ids_BT[r, : int(out.lengths_B[r])].tolist() for r in range(len(prompts) * 3)]

    whole = sample(PROMPTS, 0)
    lengths = [len(row) for row in whole]
    assert any(len(set(lengths[g * 3:(g + 1) * 3])) > 1 for g in range(len(PROMPTS)))  # a prompt's rows end apart
    assert sample(PROMPTS[:2], 0) + sample(PROMPTS[2:], 2) == whole
    assert sample(PROMPTS[:1], 0) + sample(PROMPTS[1:], 1) == whole
    assert sample(PROMPTS, 0, compact=False) == whole
    assert sample(PROMPTS[2:], 0) != whole[6:]  # the place in the round is part of the seed
    assert sample(PROMPTS[:2], 0, seeded=False) + sample(PROMPTS[2:], 2, seeded=False) != sample(PROMPTS, 0, seeded=False)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_truncated_importance_sampling_is_a_no_op_on_policy_and_corrects_stale_samples(model, tokenizer, level):
    """On the sampler's own weights the weights are 1 up to KV-cache numerics, so the gradient is
    unchanged; on samples drawn by other (stale) weights they move away from 1 and change it."""
    def grad_and_metrics(policy_model, rollouts, cap):
        policy = copy.deepcopy(policy_model).train()
        opt = torch.optim.SGD(policy.parameters(), lr=0.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        algo = AlgoConfig(tis_cap=cap, tis_level=level)
        settings = UpdateSettings.from_algo(algo, temperature=1.0, max_new_tokens=8, micro_batch_size=64, max_grad_norm=0.0)
        metrics = rl_update(policy, opt, sched, rollouts, torch.linspace(-1.0, 1.0, rollouts.completion_ids_BT.shape[0]), settings)
        return torch.cat([p.grad.flatten() for p in policy.parameters()]), metrics

    rollouts = make_rollouts(model, tokenizer)
    plain, _ = grad_and_metrics(model, rollouts, 0.0)
    same, metrics = grad_and_metrics(model, rollouts, 1e6)
    torch.testing.assert_close(same, plain, atol=1e-5, rtol=1e-3)
    assert metrics["loss/tis_weight_mean"] == pytest.approx(1.0, abs=1e-4) and metrics["loss/tis_capped_frac"] == 0.0

    newer = copy.deepcopy(model)  # the learner moved on since these were sampled
    with torch.no_grad():
        for p in newer.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    stale_plain, _ = grad_and_metrics(newer, rollouts, 0.0)
    stale_tis, metrics = grad_and_metrics(newer, rollouts, 2.0)
    assert abs(metrics["loss/tis_weight_mean"] - 1.0) > 1e-3 and 0.0 <= metrics["loss/tis_capped_frac"] <= 1.0
    assert not torch.allclose(stale_tis, stale_plain, atol=1e-5, rtol=1e-3)
