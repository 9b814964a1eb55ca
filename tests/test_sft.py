"""Cold-start SFT: the loss is the mean NLL of completion tokens only, exact under micro-batching."""

import copy

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
