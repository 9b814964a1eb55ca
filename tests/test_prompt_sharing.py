"""Rows that share a prompt compute it once (run.share_prompts): log-probs, entropies and
gradients equal those of one joint forward per row, with left-padded prompts, right-padded
completions and LoRA, and the decoder really sees each distinct prompt once."""

from __future__ import annotations

import contextlib

import pytest
import torch

from rlvr.config import load_config
from rlvr.logprobs import completion_logprobs, set_prompt_sharing
from rlvr.models import add_lora, build_char_tokenizer, build_tiny_model


@pytest.fixture(autouse=True)
def sharing_restored():
    yield
    set_prompt_sharing(True)


def grouped_batch(seed: int):
    """3 prompts of 16 positions (two left-padded), repeated 3, 2 and 3 times, rows interleaved;
    completions of different lengths. Sharing saves 5 x 16 = 80 positions, past its 64-position threshold."""
    tokenizer = build_char_tokenizer()
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, len(tokenizer), (3, 16), generator=g)
    masks = torch.ones_like(prompts)
    masks[0, :2] = 0
    masks[2, :9] = 0
    prompts = prompts * masks  # pad id 0 under the mask, as the rollouts hold them
    order = torch.tensor([0, 1, 2, 0, 2, 1, 0, 2])
    completion = torch.randint(3, len(tokenizer), (len(order), 10), generator=g)
    completion_mask = torch.ones_like(completion)
    for row, length in enumerate([10, 4, 7, 1, 10, 6, 3, 9]):
        completion_mask[row, length:] = 0
    return tokenizer, (prompts[order], masks[order], completion * completion_mask, completion_mask)


@contextlib.contextmanager
def decoder_inputs(model):
    """The shape of every batch of token ids the decoder embeds while the block runs."""
    seen: list[tuple[int, ...]] = []
    hook = model.model.embed_tokens.register_forward_hook(lambda module, args, out: seen.append(tuple(args[0].shape)))
    try:
        yield seen
    finally:
        hook.remove()


def scores_and_grads(model, tensors, share: bool):
    set_prompt_sharing(share)
    model.zero_grad(set_to_none=True)
    logp, entropy = completion_logprobs(model, *tensors, temperature=0.8, with_entropy=True)
    mask = tensors[3]
    loss = ((-1.7 * logp + 0.05 * entropy) * mask).sum() / mask.sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach()[mask.bool()], entropy.detach()[mask.bool()], grads


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lora", [False, True])
def test_shared_prompts_give_the_joint_forwards_scores_and_gradients(seed, lora):
    tokenizer, tensors = grouped_batch(seed)
    cfg = load_config(overrides=["model.tiny.hidden_size=48", "model.tiny.intermediate_size=96"])
    model = build_tiny_model(tokenizer, cfg.model.tiny, seed=seed)
    if lora:
        model = add_lora(model, load_config(overrides=["model.lora_rank=4"]).model)
        with torch.no_grad():  # adapters away from their zero start, so their gradients mean something
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.05)
    logp, entropy, grads = scores_and_grads(model, tensors, share=False)
    shared_logp, shared_entropy, shared_grads = scores_and_grads(model, tensors, share=True)
    assert torch.allclose(shared_logp, logp, rtol=1e-5, atol=1e-5)
    assert torch.allclose(shared_entropy, entropy, rtol=1e-5, atol=1e-5)
    assert grads.keys() == shared_grads.keys() and grads
    for name, grad in grads.items():
        scale = grad.abs().max().clamp(min=1e-6)
        assert (shared_grads[name] - grad).abs().max() <= 1e-5 * scale + 1e-7, name


def test_each_distinct_prompt_goes_through_the_decoder_once():
    tokenizer, tensors = grouped_batch(0)
    model = build_tiny_model(tokenizer, load_config().model.tiny, seed=0)
    with decoder_inputs(model) as seen, torch.no_grad():
        completion_logprobs(model, *tensors)
        assert seen == [(3, 16), (8, 10)]  # 3 prompts once each, then the 8 rows' completions
        seen.clear()
        set_prompt_sharing(False)
        completion_logprobs(model, *tensors)
        assert seen == [(8, 26)]


def test_no_repeated_prompt_or_right_padded_prompts_take_the_joint_forward():
    tokenizer, (prompts, masks, completion, completion_mask) = grouped_batch(0)
    model = build_tiny_model(tokenizer, load_config().model.tiny, seed=0)
    with decoder_inputs(model) as seen, torch.no_grad():
        distinct = [0, 1, 2]
        completion_logprobs(model, prompts[distinct], masks[distinct], completion[distinct], completion_mask[distinct])
        right = masks.flip(1)  # padding on the right of the prompt: its last position is not the last token
        completion_logprobs(model, prompts, right, completion, completion_mask)
    assert seen == [(3, 26), (8, 26)]


def test_the_chunked_output_layer_sees_the_shared_hidden_states():
    """A budget of a few positions per chunk: the shared path's hidden states go through the
    checkpointed chunks with the same scores and gradients as the joint forward's."""
    tokenizer, tensors = grouped_batch(3)
    model = build_tiny_model(tokenizer, load_config(overrides=["model.tiny.hidden_size=48", "model.tiny.intermediate_size=96"]).model.tiny, seed=3)
    budget = 5 * len(tokenizer) * 4 * 4 / 2**20  # 5 positions a chunk

    def run(share):
        set_prompt_sharing(share)
        model.zero_grad(set_to_none=True)
        logp = completion_logprobs(model, *tensors, temperature=0.9, budget_mib=budget)
        (-(logp * tensors[3]).sum()).backward()
        return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    (logp, grads), (shared, shared_grads) = run(False), run(True)
    assert torch.allclose(shared, logp, rtol=1e-5, atol=1e-5)
    for name, grad in grads.items():
        assert (shared_grads[name] - grad).abs().max() <= 1e-5 * grad.abs().max().clamp(min=1e-6) + 1e-7, name


def test_gradient_checkpointing_and_one_token_prompts_take_the_joint_forward():
    tokenizer, (prompts, masks, completion, completion_mask) = grouped_batch(0)
    model = build_tiny_model(tokenizer, load_config().model.tiny, seed=0)
    with decoder_inputs(model) as seen:
        model.gradient_checkpointing_enable()
        model.train()
        completion_logprobs(model, prompts, masks, completion, completion_mask).sum().backward()
        assert seen[0] == (8, 26)  # transformers would drop the prompt's cache in training: never shared
        model.gradient_checkpointing_disable()
        seen.clear()
        with torch.no_grad():  # SFT's layout: a one-token prompt shared by every row saves too little
            completion_logprobs(model, prompts[:, -1:], masks[:, -1:], completion, completion_mask)
        assert seen == [(8, 11)]
