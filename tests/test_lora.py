"""LoRA through peft: only adapters train, the KL reference is the same weights with adapters off
(no copy), exports and checkpoints carry the adapters."""

import copy

import torch

from rlvr.config import AlgoConfig, ModelConfig, TinyModelConfig
from rlvr.models import AdapterOffReference, add_lora, build_char_tokenizer, build_tiny_model, merged, reference_for
from rlvr.rollout import encode_prompts, generate
from rlvr.sampling import Sampling
from rlvr.logprobs import completion_logprobs
from rlvr.update import UpdateSettings, rl_update

PROMPTS = ["1+2=", "3*4-5=", "7=", "9-8*7+6="]


def setup():
    tokenizer = build_char_tokenizer()
    base = build_tiny_model(tokenizer, TinyModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64), seed=0)
    ids, mask = encode_prompts(tokenizer, PROMPTS, torch.device("cpu"))
    rollouts = generate(base, ids, mask, Sampling(max_new_tokens=8), eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                        group_size=4, generator=torch.Generator().manual_seed(0))
    return tokenizer, base, rollouts


def logprobs(model, r):
    with torch.no_grad():
        return completion_logprobs(model, r.prompt_ids_BP, r.prompt_mask_BP, r.completion_ids_BT, r.completion_mask_BT)


def test_only_adapters_train_and_the_reference_stays_the_starting_model():
    tokenizer, base, rollouts = setup()
    start = logprobs(base, rollouts)
    frozen = {k: v.clone() for k, v in base.state_dict().items()}
    policy = add_lora(base, ModelConfig(lora_rank=4))
    reference = reference_for(policy)
    assert isinstance(reference, AdapterOffReference) and reference.policy is policy  # no second copy
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)

    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    adv = torch.linspace(-1.0, 1.0, 16)
    for _ in range(3):
        settings = UpdateSettings.from_algo(AlgoConfig(beta=0.1), temperature=1.0, max_new_tokens=8, micro_batch_size=16, max_grad_norm=1.0)
        rl_update(policy, opt, sched, rollouts, adv, settings, reference=reference)
    moved = logprobs(policy, rollouts)
    assert (moved - start).abs().max() > 1e-3  # the adapters learned something
    torch.testing.assert_close(logprobs(reference, rollouts), start, atol=0, rtol=0)  # the anchor never moved
    base_now = policy.get_base_model().state_dict()
    for k, v in frozen.items():
        peft_key = next(key for key in base_now if key.replace("base_layer.", "") == k)
        assert torch.equal(base_now[peft_key], v), k


def test_merged_export_computes_what_the_adapter_policy_computes():
    tokenizer, base, rollouts = setup()
    policy = add_lora(base, ModelConfig(lora_rank=4))
    for n, p in policy.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 0.1)  # a non-trivial adapter
    plain = merged(policy)
    assert not hasattr(plain, "peft_config") and hasattr(policy, "peft_config")  # the policy is untouched
    torch.testing.assert_close(logprobs(plain, rollouts), logprobs(policy, rollouts), atol=1e-4, rtol=1e-4)


def test_generation_through_the_adapter_wrapper_uses_the_kv_cache_correctly():
    tokenizer, base, _ = setup()
    policy = add_lora(copy.deepcopy(base), ModelConfig(lora_rank=4))
    ids, mask = encode_prompts(tokenizer, PROMPTS, torch.device("cpu"))
    sampling, kw = Sampling(max_new_tokens=10, greedy=True), dict(eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id)
    assert torch.equal(generate(policy, ids, mask, sampling, **kw).completion_ids_BT, generate(base, ids, mask, sampling, **kw).completion_ids_BT)


def test_under_autocast_the_adapter_off_reference_scores_exactly_like_the_policy_at_start():
    """At LoRA's start (B = 0) policy and reference are the same function, so under bf16 autocast
    both must take the same (fp32-head) path: a KL of exactly 0, not precision noise."""
    tokenizer, base, r = setup()
    with torch.no_grad():
        base.lm_head.weight.mul_(30.0)  # large logits, where a bf16 head and an fp32 head differ
    policy = add_lora(base, ModelConfig(lora_rank=4, lora_alpha=8))
    reference = reference_for(policy)
    assert isinstance(reference, AdapterOffReference)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(logprobs(policy, r), logprobs(reference, r))
