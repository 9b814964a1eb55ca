"""Cold-start SFT: the loss is the mean NLL of completion tokens only, exact under micro-batching."""

import copy

import pytest
import torch

from rlvr.config import TinyModelConfig
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.stages.sft import sft_backward

PROMPTS = ["1+2=", "3*4-5=", "7=", "9-8*7+6="]
TARGETS = ["\\boxed{3}", "12-5=7\n\\boxed{7}", "\\boxed{7}", "9-56+6=-47+6=-41\n\\boxed{-41}"]


def tiny():
    tok = build_char_tokenizer()
    return tok, build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64), 0)


def test_sft_loss_is_mean_nll_of_target_tokens_only():
    tok, model = tiny()
    loss = sft_backward(model, tok, PROMPTS, TARGETS, micro_batch_size=64)
    # independent computation: one unpadded sequence at a time, sum NLL over target (+EOS) tokens
    nll, count = 0.0, 0
    with torch.no_grad():
        for p, t in zip(PROMPTS, TARGETS):
            p_ids = tok.encode(p, add_special_tokens=False)
            t_ids = tok.encode(t, add_special_tokens=False) + [tok.eos_token_id]
            logp = torch.log_softmax(model(input_ids=torch.tensor([p_ids + t_ids])).logits[0], -1)
            for k, token in enumerate(t_ids):
                nll -= float(logp[len(p_ids) + k - 1, token])
            count += len(t_ids)
    assert abs(loss - nll / count) < 1e-4


def test_sft_gradient_is_independent_of_micro_batch_size():
    tok, model = tiny()
    grads = []
    for mbs in (1, 3, 64):
        m = copy.deepcopy(model)
        sft_backward(m, tok, PROMPTS, TARGETS, micro_batch_size=mbs)
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters()]))
    torch.testing.assert_close(grads[1], grads[0], atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(grads[2], grads[0], atol=1e-6, rtol=1e-4)


def test_sft_loss_and_gradient_are_independent_of_the_token_budget():
    """micro_batch_tokens only regroups rows (and changes their padding): loss and gradient stay."""
    tok, model = tiny()
    prompts, targets = PROMPTS * 3, TARGETS[1:] + TARGETS[:1] + TARGETS * 2  # prompts and targets of every length mixed
    results = []
    for tokens in (0, 1, 20, 40, 10_000):
        m = copy.deepcopy(model)
        loss = sft_backward(m, tok, prompts, targets, micro_batch_size=64, micro_batch_tokens=tokens)
        results.append((loss, torch.cat([p.grad.flatten() for p in m.parameters()])))
    for loss, grad in results[1:]:
        assert abs(loss - results[0][0]) < 1e-6 * abs(results[0][0])
        torch.testing.assert_close(grad, results[0][1], atol=1e-7, rtol=1e-5)


def test_sft_matches_the_separate_prompt_and_target_layout():
    """One right-padded row per (prompt, target) scores the same tokens as a left-padded prompt
    block followed by a right-padded target block (the RL update's layout)."""
    from rlvr.logprobs import completion_logprobs
    from rlvr.rollout import encode_prompts
    from rlvr.stages.sft import encode_targets, pad_right

    tok, model = tiny()
    joined = copy.deepcopy(model)
    loss = sft_backward(joined, tok, PROMPTS, TARGETS, micro_batch_size=64)
    p_ids, p_mask = encode_prompts(tok, PROMPTS, torch.device("cpu"))
    t_ids, t_mask = pad_right(encode_targets(tok, TARGETS), tok.pad_token_id, torch.device("cpu"))
    logp = completion_logprobs(model, p_ids, p_mask, t_ids, t_mask)
    reference = -(logp * t_mask).sum() / t_mask.sum()
    reference.backward()
    assert abs(loss - reference.item()) < 1e-6 * reference.item()
    for a, b in zip(joined.parameters(), model.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("distill", [False, True])
def test_sft_chunked_output_layer_scores_only_targets_and_gives_the_same_loss_and_gradient(distill, monkeypatch):
    """Past the logits budget only target positions go through the output layer, a chunk at a
    time (never a prompt or padded position); the loss and gradient are those of one pass, with
    distillation's token-level KL too."""
    import rlvr.logprobs as logprobs
    from rlvr.logprobs import DEFAULT_LOGITS_BUDGET_MIB, set_logits_budget
    from rlvr.stages.sft import encode_targets

    tok, model = tiny()
    teacher = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64), 1)
    extra = {"teacher": teacher, "kl_coef": 0.5} if distill else {}
    n_targets = sum(len(ids) for ids in encode_targets(tok, TARGETS))
    results = []
    real_head_logits = logprobs._head_logits
    for budget in (DEFAULT_LOGITS_BUDGET_MIB, 0.005):  # 0.005 MiB: 3 positions a chunk at this vocabulary
        m = copy.deepcopy(model)
        rows = []  # positions per call of the output layer: the module (one pass, distillation) or its chunked form
        hook = m.get_output_embeddings().register_forward_hook(lambda mod, args, out: rows.append(args[0].reshape(-1, args[0].shape[-1]).shape[0]))
        monkeypatch.setattr(logprobs, "_head_logits", lambda w, b, h, *rest: rows.append(h.shape[0]) or real_head_logits(w, b, h, *rest))
        set_logits_budget(budget)
        try:
            loss = sft_backward(m, tok, PROMPTS, TARGETS, micro_batch_size=64, **extra)
        finally:
            set_logits_budget(DEFAULT_LOGITS_BUDGET_MIB)
            hook.remove()
        if budget < 1:  # forward chunks and their recomputation in backward: each covers the targets once
            assert max(rows) <= 3 and sum(rows) == 2 * n_targets, rows
        results.append((loss, torch.cat([p.grad.flatten() for p in m.parameters()])))
    assert abs(results[1][0] - results[0][0]) < 1e-6 * results[0][0]
    torch.testing.assert_close(results[1][1], results[0][1], atol=1e-7, rtol=1e-5)
