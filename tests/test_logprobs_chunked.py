"""Log-probs, entropies, distillation's KL and their gradients without full-vocabulary logits:
equal to the one-pass (unchunked) values for every aggregation, with padding and LoRA, whatever
the chunk size, and no (rows, positions, vocabulary) tensor is ever made past the budget."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms.loss import AGGREGATIONS, aggregate
from rlvr.config import load_config
from rlvr.logprobs import _COPIES, chunk_rows, completion_logprobs, completion_teacher_kl
from rlvr.models import add_lora, build_char_tokenizer, build_tiny_model

WHOLE = 1024.0  # MiB: every position of these batches in one chunk (the path unchanged from before)


def budget_for(rows: int, vocab: int) -> float:
    """The budget (MiB) that makes chunks of `rows` positions."""
    return rows * vocab * 4 * _COPIES / 2**20


@pytest.fixture(scope="module")
def batch():
    tokenizer = build_char_tokenizer()
    cfg = load_config(overrides=["model.tiny.hidden_size=32", "model.tiny.intermediate_size=64"]).model.tiny
    torch.manual_seed(0)
    prompt = torch.randint(3, len(tokenizer), (4, 6))
    prompt_mask = torch.ones_like(prompt)
    prompt_mask[0, :3] = 0  # left padding
    prompt_mask[2, :1] = 0
    completion = torch.randint(3, len(tokenizer), (4, 9))
    completion_mask = torch.ones_like(completion)
    completion_mask[1, 5:] = 0  # right padding: rows end at different lengths
    completion_mask[3, 2:] = 0
    return tokenizer, cfg, (prompt, prompt_mask, completion, completion_mask)


def model_of(tokenizer, cfg, lora: bool):
    model = build_tiny_model(tokenizer, cfg, seed=0)
    if lora:
        model = add_lora(model, load_config(overrides=["model.lora_rank=4"]).model)
    return model


def scores_and_grads(model, tensors, budget: float, aggregation: str):
    model.zero_grad(set_to_none=True)
    logp, entropy = completion_logprobs(model, *tensors, temperature=0.7, with_entropy=True, budget_mib=budget)
    mask = tensors[3]
    loss = aggregate(-logp * 1.3 + 0.01 * entropy, mask, aggregation, max_completion_length=mask.shape[1])
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    m = mask.bool()
    return logp.detach()[m], entropy.detach()[m], grads


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("aggregation", list(AGGREGATIONS))
def test_chunked_scores_and_gradients_equal_the_one_pass_ones(batch, lora, aggregation):
    tokenizer, cfg, tensors = batch
    vocab = len(tokenizer)
    model = model_of(tokenizer, cfg, lora)
    reference = scores_and_grads(model, tensors, WHOLE, aggregation)
    assert chunk_rows(vocab, WHOLE) >= tensors[2].numel()
    for rows in (1, 5, 17):  # chunk sizes that do and do not divide the 29 real positions
        logp, entropy, grads = scores_and_grads(model, tensors, budget_for(rows, vocab), aggregation)
        assert chunk_rows(vocab, budget_for(rows, vocab)) == rows
        torch.testing.assert_close(logp, reference[0], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(entropy, reference[1], rtol=1e-6, atol=1e-6)
        assert grads.keys() == reference[2].keys() and grads
        for name in grads:
            # Chunks sum the same terms in another order: fp32 rounding, ~2e-7 on gradients of size ~0.5 on an
            # AVX-512 CPU (fails an absolute 1e-7 there). Bounded relative to the tensor's scale; an error would be ~1e-2.
            scale = float(reference[2][name].abs().max())
            torch.testing.assert_close(grads[name], reference[2][name], rtol=1e-6, atol=1e-6 * scale + 1e-9, msg=name)


def test_no_vocabulary_wide_tensor_for_all_positions_is_made(batch, monkeypatch):
    import rlvr.logprobs as logprobs

    tokenizer, cfg, tensors = batch
    vocab, rows = len(tokenizer), 5
    model = model_of(tokenizer, cfg, lora=False)
    chunks, head_calls = [], []
    real_head_logits = logprobs._head_logits

    def recording(*args, **kwargs):
        out = real_head_logits(*args, **kwargs)
        chunks.append(tuple(out.shape))
        return out

    monkeypatch.setattr(logprobs, "_head_logits", recording)
    handle = model.lm_head.register_forward_hook(lambda module, args, out: head_calls.append(tuple(out.shape)))
    try:
        logp = completion_logprobs(model, *tensors, budget_mib=budget_for(rows, vocab))
        logp.sum().backward()  # backward recomputes each chunk, one at a time
    finally:
        handle.remove()
    real = int(tensors[3].sum())
    assert not head_calls  # the head's weights are used a chunk at a time, never on the whole hidden state
    assert chunks and all(len(s) == 2 and s[0] <= rows and s[1] == vocab for s in chunks)
    assert sum(s[0] for s in chunks) == 2 * real  # each real position once forward, once in backward; padding never
    assert (logp[~tensors[3].bool()] == 0).all()


def test_distillation_kl_chunked_equals_one_pass(batch):
    tokenizer, cfg, tensors = batch
    vocab = len(tokenizer)
    student = model_of(tokenizer, cfg, lora=False)
    teacher = build_tiny_model(tokenizer, cfg, seed=1).eval()
    results = []
    for budget in (WHOLE, budget_for(4, vocab)):
        student.zero_grad(set_to_none=True)
        nll, kl = completion_teacher_kl(student, teacher, *tensors, budget_mib=budget)
        (aggregate(nll + 0.5 * kl, tensors[3], "token_mean")).backward()
        results.append((nll.detach(), kl.detach(), {n: p.grad.clone() for n, p in student.named_parameters()}))
    (nll_a, kl_a, grads_a), (nll_b, kl_b, grads_b) = results
    torch.testing.assert_close(nll_b, nll_a, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(kl_b, kl_a, rtol=1e-6, atol=1e-6)
    assert (kl_a >= -1e-6).all() and (kl_a[~tensors[3].bool()] == 0).all()
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-6, atol=1e-7, msg=name)
    assert all(p.grad is None for p in teacher.parameters())


@pytest.mark.parametrize("with_entropy", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_hand_written_head_gradient_equals_autograd_through_log_softmax(with_entropy, temperature):
    """The chunked output layer's backward (worked out by hand, rlvr.logprobs._HeadTokenScores)
    against autograd through log_softmax and gather on the same head, a bias included (Llama heads
    have none; other Linear heads may), chunks that do not divide the positions."""
    from rlvr.logprobs import _HeadTokenScores

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=True)
    hidden = torch.randn(23, 16, requires_grad=True)
    targets = torch.randint(0, 50, (23,))
    g_logp, g_entropy = torch.randn(23), torch.randn(23)

    def grads(fused: bool):
        head.zero_grad(set_to_none=True)
        hidden.grad = None
        if fused:
            logp, entropy = _HeadTokenScores.apply(hidden, head.weight, head.bias, targets, temperature, 5, with_entropy)
        else:
            log_probs = torch.log_softmax(head(hidden) / temperature, dim=-1)
            logp, entropy = log_probs.gather(1, targets[:, None]).squeeze(1), -(log_probs.exp() * log_probs).sum(-1)
        loss = (logp * g_logp).sum() + ((entropy * g_entropy).sum() if with_entropy else 0.0)
        loss.backward()
        return logp.detach(), entropy.detach(), hidden.grad.clone(), head.weight.grad.clone(), head.bias.grad.clone()

    fused, reference = grads(True), grads(False)
    names = ("logp", "entropy", "hidden grad", "weight grad", "bias grad")
    for name, a, b in zip(names, fused, reference):
        if name == "entropy" and not with_entropy:
            continue
        torch.testing.assert_close(a, b, rtol=1e-5, atol=5e-6, msg=name)
