"""The Sampling settings object (rlvr/sampling.py) and the one sampling path (rollout.Sampler)."""

import pytest
import torch

from rlvr.config import ConfigError, TinyModelConfig, load_config
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import Sampler, encode_prompts, generate
from rlvr.rollout.controls import encode_stops
from rlvr.sampling import BudgetForcing, InvalidSampling, Sampling


@pytest.mark.parametrize("field, value, named", [
    ("max_new_tokens", 0, "max_new_tokens"), ("temperature", 0.0, "temperature"), ("top_p", 0.0, "top_p"), ("top_p", 1.01, "top_p"),
    ("top_k", -1, "top_k"), ("min_p", 1.0, "min_p"), ("min_p", -0.1, "min_p"), ("stop", ["</s>", ""], "stop[1]"),
])
def test_a_setting_out_of_range_is_refused_by_its_name(field, value, named):
    with pytest.raises(InvalidSampling) as caught:
        Sampling(**{"max_new_tokens": 8, field: value})
    assert caught.value.field == named


def test_every_sampling_section_builds_one_and_names_the_key_the_user_wrote():
    cfg = load_config(overrides=["rollout.temperature=0.7", "rollout.stop=[\"#\"]", "eval.top_k=5", "eval.max_new_tokens=12",
                                 "rft.min_p=0.1", "thinking.budget=3"])
    assert cfg.rollout.sampling() == Sampling(max_new_tokens=64, temperature=0.7, stop=("#",))
    assert cfg.eval.sampling(cfg.rollout.stop, cfg.thinking) == Sampling(
        max_new_tokens=12, top_k=5, stop=("#",), budget=BudgetForcing("<think>", "</think>", "</think>", 3))
    assert cfg.rft.sampling(cfg.rollout.max_new_tokens, cfg.rollout.stop) == Sampling(max_new_tokens=64, min_p=0.1, stop=("#",))
    for override, key in [("rollout.top_p=0", "rollout.top_p"), ("eval.temperature=0", "eval.temperature"), ("rft.top_k=-2", "rft.top_k"),
                          ("rollout.stop=[\"\"]", r"rollout.stop\[0\]")]:
        with pytest.raises(ConfigError, match=key):
            load_config(overrides=[override])
    with pytest.raises(ConfigError, match=r"rollout.stop\[0\]"):  # eval's stop strings are rollout.stop: the error says so
        cfg.eval.sampling([""], None)


@pytest.fixture(scope="module")
def tiny():
    tokenizer = build_char_tokenizer(thinking=True)
    model = build_tiny_model(tokenizer, TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64), 3)
    return model.eval(), tokenizer


def test_the_sampler_draws_what_generate_draws_with_the_same_tokens(tiny):
    model, tokenizer = tiny
    prompts = ["1+2=", "3*3-1=<think>", "7="]
    sampling = Sampling(max_new_tokens=16, temperature=0.9, stop=("3",), budget=BudgetForcing("<think>", "</think>", "</think>", 2))
    got = Sampler(model, tokenizer, sampling).sample(prompts, 2, torch.Generator().manual_seed(4))
    ids, mask = encode_prompts(tokenizer, prompts, torch.device("cpu"))
    thinking = Sampler(model, tokenizer, sampling)._thinking(prompts, 2, torch.device("cpu"))
    assert thinking.open_B.tolist() == [False, False, True, True, False, False]
    want = generate(model, ids, mask, sampling, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, group_size=2,
                    generator=torch.Generator().manual_seed(4), stops=encode_stops(tokenizer, ["3"]), thinking=thinking)
    assert torch.equal(got.rollouts.completion_ids_BT, want.completion_ids_BT)
    assert got.prompts == [p for p in prompts for _ in range(2)] and len(got.texts) == 6 and got.lengths == want.lengths_B.tolist()


def test_generate_refuses_stop_strings_or_a_budget_it_was_not_given_the_tokens_of(tiny):
    model, tokenizer = tiny
    ids, mask = encode_prompts(tokenizer, ["1+2="], torch.device("cpu"))
    kw = dict(eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="stops"):
        generate(model, ids, mask, Sampling(max_new_tokens=4, stop=("3",)), **kw)
    with pytest.raises(ValueError, match="thinking"):
        generate(model, ids, mask, Sampling(max_new_tokens=4, budget=BudgetForcing("<think>", "</think>", "</think>", 1)), **kw)


def test_a_budget_whose_forced_text_never_closes_the_block_is_refused_before_decoding(tiny):
    model, tokenizer = tiny
    with pytest.raises(InvalidSampling, match="closing tag"):
        Sampler(model, tokenizer, Sampling(max_new_tokens=4, budget=BudgetForcing("<think>", "</think>", "12", 1)))
