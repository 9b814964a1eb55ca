"""The decoding engines compute what a full forward of the model computes, for every supported
architecture, with left padding, shared prompts, dropped rows, LoRA adapters and rotary scaling."""

import pytest
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from rlvr.rollout import StaticCacheEngine, TransformersEngine, generate, make_engine, static_engine_unsupported
from rlvr.sampling import Sampling

VOCAB, PAD = 50, 0
SHAPE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, pad_token_id=PAD)


def build(kind: str, dtype=torch.float32, **extra):
    torch.manual_seed(0)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**SHAPE, **extra))
    elif kind == "mistral":
        model = MistralForCausalLM(MistralConfig(**SHAPE, sliding_window=None, **extra))
    elif kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**SHAPE, **extra))  # q/k/v carry biases
    elif kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**SHAPE, head_dim=8, **extra))  # q_norm/k_norm per head
    else:
        raise ValueError(kind)
    with torch.no_grad():  # random biases and norm weights, so a skipped term would show
        for name, p in model.named_parameters():
            if "bias" in name or "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model.to(dtype).eval()


def prompts():
    """Three left-padded prompts of lengths 5, 2 and 7."""
    lengths = [5, 2, 7]
    g = torch.Generator().manual_seed(1)
    ids = torch.full((3, 7), PAD)
    mask = torch.zeros((3, 7), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, 7 - n:] = torch.randint(1, VOCAB, (n,), generator=g)
        mask[row, 7 - n:] = 1
    return ids, mask


def full_forward_logits(model, ids_BL, mask_BL):
    """Next-token logits at the last column from one uncached forward: the reference."""
    positions = (mask_BL.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        return model(input_ids=ids_BL, attention_mask=mask_BL, position_ids=positions).logits[:, -1].float()


def check_engine(model, engine, G=2, steps=4, atol=1e-5):
    """Prefill, then decode `steps` tokens, dropping a row half-way; compare each step's logits
    with a full forward over each row's whole sequence so far."""
    ids_NP, mask_NP = prompts()
    ids_BL, mask_BL = ids_NP.repeat_interleave(G, 0), mask_NP.repeat_interleave(G, 0)
    rows = torch.arange(ids_BL.shape[0])
    with torch.no_grad():
        logits = engine.prefill(ids_NP, mask_NP, G)
    torch.testing.assert_close(logits, full_forward_logits(model, ids_BL, mask_BL), atol=atol, rtol=atol)
    g = torch.Generator().manual_seed(2)
    for step in range(steps):
        if step == 2:  # drop rows 1 and 4, as compaction does
            keep = torch.tensor([0, 2, 3, 5])
            assert engine.keep_rows(keep)
            rows, ids_BL, mask_BL = rows[keep], ids_BL[keep], mask_BL[keep]
        tokens = torch.randint(1, VOCAB, (len(rows),), generator=g)
        positions = mask_BL.sum(1)
        ids_BL = torch.cat([ids_BL, tokens[:, None]], 1)
        mask_BL = torch.cat([mask_BL, torch.ones_like(tokens)[:, None]], 1)
        with torch.no_grad():
            logits = engine.step(tokens, positions)
        torch.testing.assert_close(logits, full_forward_logits(model, ids_BL, mask_BL), atol=atol, rtol=atol)


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "qwen3"])
def test_static_engine_equals_a_full_forward(kind):
    model = build(kind)
    assert static_engine_unsupported(model, 20) is None
    check_engine(model, StaticCacheEngine(model, max_new_tokens=8))


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "qwen3"])
def test_static_engine_with_packed_weights_equals_a_full_forward(kind):
    """oneDNN's matmul on weights packed once (rollout.pack_weights; on by default from 512 wide):
    the same logits as the model's forward, q/k/v biases (qwen2) included."""
    model = build(kind)
    engine = StaticCacheEngine(model, max_new_tokens=8, packed=True)
    assert engine.linears is not None and len(engine.linears) == 7 * model.config.num_hidden_layers + 1
    check_engine(model, engine)


def test_packed_weights_are_used_only_where_they_apply():
    """Default: packed from PACKED_MIN_HIDDEN wide, plain modules below; never for LoRA-wrapped
    projections or bf16 weights (asking for it says why), and never when rollout.pack_weights is off."""
    peft = pytest.importorskip("peft")
    from rlvr.rollout import engines

    assert StaticCacheEngine(build("llama"), max_new_tokens=8).linears is None  # 32 wide
    wide = LlamaForCausalLM(LlamaConfig(**{**SHAPE, "hidden_size": engines.PACKED_MIN_HIDDEN, "num_hidden_layers": 1})).eval()
    assert StaticCacheEngine(wide, max_new_tokens=8).linears is not None
    engines.set_weight_packing(False)
    try:
        assert StaticCacheEngine(wide, max_new_tokens=8).linears is None
    finally:
        engines.set_weight_packing(True)
    lora = peft.get_peft_model(build("qwen3"), peft.LoraConfig(r=4, target_modules=["q_proj"]))
    with pytest.raises(ValueError, match="not a plain fp32 Linear"):
        StaticCacheEngine(lora, max_new_tokens=8, packed=True)
    with pytest.raises(ValueError, match="not a plain fp32 Linear"):
        StaticCacheEngine(build("qwen3", dtype=torch.bfloat16), max_new_tokens=8, packed=True)


def test_transformers_engine_equals_a_full_forward():
    model = build("qwen3")
    check_engine(model, TransformersEngine(model))


def test_static_engine_applies_the_models_rotary_scaling():
    model = build("llama", rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
    check_engine(model, StaticCacheEngine(model, max_new_tokens=8))


def test_static_engine_decodes_through_lora_adapters():
    peft = pytest.importorskip("peft")
    model = build("qwen3")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "gate_proj", "down_proj"]))
    with torch.no_grad():  # adapters start at B = 0; make them matter
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    lora.eval()
    assert static_engine_unsupported(lora, 20) is None
    check_engine(lora, StaticCacheEngine(lora, max_new_tokens=8))


def test_static_engine_in_bfloat16_stays_close_to_the_full_forward():
    model = build("qwen3", dtype=torch.bfloat16)
    engine = StaticCacheEngine(model, max_new_tokens=8)
    check_engine(model, engine, atol=3e-2)
    assert engine.keys[0].dtype == torch.bfloat16


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_both_engines_sample_the_same_completions(kind):
    model = build(kind)
    ids, mask = prompts()
    sampling, kw = Sampling(max_new_tokens=10, temperature=0.8), dict(eos_id=VOCAB - 1, pad_id=PAD, group_size=4)
    a = generate(model, ids, mask, sampling, engine="static", generator=torch.Generator().manual_seed(3), **kw)
    b = generate(model, ids, mask, sampling, engine="transformers", generator=torch.Generator().manual_seed(3), **kw)
    assert torch.equal(a.completion_ids_BT, b.completion_ids_BT)
    torch.testing.assert_close(a.sample_logp_BT, b.sample_logp_BT, atol=1e-5, rtol=1e-5)


def test_auto_falls_back_and_static_says_why():
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=64)).eval()
    assert isinstance(make_engine(gpt2, "auto", 20, 8), TransformersEngine)
    with pytest.raises(ValueError, match="model type 'gpt2'"):
        make_engine(gpt2, "static", 20, 8)
    ids, mask = prompts()
    out = generate(gpt2, ids, mask, Sampling(max_new_tokens=5, greedy=True), eos_id=VOCAB - 1, pad_id=PAD)  # auto: still generates
    assert out.completion_ids_BT.shape[0] == 3 and out.completion_mask_BT.sum() > 0


def test_sliding_window_models_use_the_transformers_engine():
    windowed = MistralForCausalLM(MistralConfig(**SHAPE, sliding_window=12)).eval()
    assert static_engine_unsupported(windowed, 12) is None  # the window never binds
    assert "sliding window" in static_engine_unsupported(windowed, 13)
    assert isinstance(make_engine(windowed, "auto", 13, 6), TransformersEngine)
    layered = Qwen3ForCausalLM(Qwen3Config(**SHAPE, use_sliding_window=True, sliding_window=8, max_window_layers=1)).eval()
    assert "sliding-window" in static_engine_unsupported(layered, 10)


def test_expanded_kv_heads_attend_exactly_as_grouped_query_attention():
    """The CUDA path (kv heads expanded) and the CPU path (SDPA's enable_gqa) agree."""
    from rlvr.rollout.engines import attend

    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 6, 2, 8, generator=g), torch.randn(3, 2, 5, 8, generator=g), torch.randn(3, 2, 5, 8, generator=g)
    mask = torch.rand(3, 1, 2, 5, generator=g) > 0.3
    mask[..., 0] = True
    torch.testing.assert_close(attend(q, k, v, mask, 0.35, expand_kv=True), attend(q, k, v, mask, 0.35, expand_kv=False))
    # query head h reads kv head h // 3, as transformers' repeat_kv lays them out
    reference = torch.nn.functional.scaled_dot_product_attention(q[:, 3:], k[:, 1:].expand(3, 3, 5, 8), v[:, 1:].expand(3, 3, 5, 8),
                                                                 attn_mask=mask, scale=0.35)
    torch.testing.assert_close(attend(q, k, v, mask, 0.35, expand_kv=False)[:, 3:], reference)


@pytest.mark.parametrize("engine", ["static", "transformers"])
def test_a_single_new_token(engine):
    model = build("qwen3")
    ids, mask = prompts()
    out = generate(model, ids, mask, Sampling(max_new_tokens=1), eos_id=VOCAB - 1, pad_id=PAD, group_size=2, engine=engine,
                   generator=torch.Generator().manual_seed(0))
    assert out.completion_ids_BT.shape == (6, 1) and out.completion_mask_BT.sum() == 6


def test_an_unknown_engine_name_is_refused_even_for_a_supported_model():
    with pytest.raises(ValueError, match="auto, static or transformers"):
        make_engine(build("qwen3"), "fast", 20, 8)


def test_static_engine_keeps_kv_in_bf16_under_autocast():
    """fp32 weights under bf16 autocast: keys leave the rotation in fp32 (fp32 cos/sin); the cache
    stores them in the values' bf16, and the logits still match the model's own forward."""
    model = build("qwen3")
    engine = StaticCacheEngine(model, max_new_tokens=8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        check_engine(model, engine, atol=5e-2)
    assert engine.keys[0].dtype == engine.values[0].dtype == torch.bfloat16


def test_under_autocast_logits_come_from_an_fp32_head():
    """With fp32 weights under bf16 autocast, the update's log-probs use an fp32 output projection.

    Two properties, both independent of the CPU's bf16 kernels (with or without AVX-512/bf16 the
    decoder's bf16 rounding differs, so no ratio between errors is asserted):
    1. the logits are exactly the fp32 projection of the (bf16-computed) hidden states, which the
       model's own bf16 head is not: at logits around 30 bf16 steps are 1/8;
    2. over several seeds, those log-probs are closer to full fp32 than the bf16 head's.
    """
    from rlvr.architecture import base_model, logits_in_fp32
    from rlvr.logprobs import completion_logprobs

    model = build("qwen3")
    with torch.no_grad():
        model.lm_head.weight.mul_(60.0)  # logits of tens, where bf16 steps are 1/8
    ids, mask = prompts()
    fp32_head_errors, bf16_head_errors = [], []
    for seed in range(5):
        completion = torch.randint(1, VOCAB, (3, 6), generator=torch.Generator().manual_seed(seed))
        cmask = torch.ones_like(completion)
        full_mask = torch.cat([mask, cmask], 1)
        positions = (full_mask.cumsum(1) - 1).clamp(min=0)
        seq = torch.cat([ids, completion], 1)
        exact = completion_logprobs(model, ids, mask, completion, cmask)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = completion_logprobs(model, ids, mask, completion, cmask)
            hidden = base_model(model).model(input_ids=seq, attention_mask=full_mask, position_ids=positions).last_hidden_state
            full_bf16 = model(input_ids=seq, attention_mask=full_mask, position_ids=positions).logits  # the model's own bf16 head
        assert full_bf16.dtype == torch.bfloat16
        by_hand = torch.log_softmax(hidden[:, -7:-1].float() @ model.lm_head.weight.T, -1).gather(2, completion[..., None]).squeeze(2)
        torch.testing.assert_close(mixed, by_hand, rtol=0, atol=1e-4)  # property 1: an fp32 projection
        bf16_logp = torch.log_softmax(full_bf16[:, -7:-1].float(), -1).gather(2, completion[..., None]).squeeze(2)
        assert (bf16_logp - by_hand).abs().max() > 1e-3  # ... which the bf16 head is not
        fp32_head_errors.append((mixed - exact).abs().mean())
        bf16_head_errors.append((bf16_logp - exact).abs().mean())
    assert logits_in_fp32(model.lm_head, hidden).dtype == torch.float32
    assert sum(fp32_head_errors) < sum(bf16_head_errors), (fp32_head_errors, bf16_head_errors)  # property 2
    with torch.autocast("cpu", dtype=torch.bfloat16):  # and the gradient still reaches every weight in fp32
        completion_logprobs(model, ids, mask, completion, cmask).sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())
