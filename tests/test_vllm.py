"""rollout.engine = "vllm": an in-process vLLM engine samples what rlvr's engine would, from the
policy's current weights.

Run by `make test-vllm` in .venv-vllm (vLLM's CPU build); where vLLM cannot be imported every test
here skips with the reason. What users depend on: the sampler's log-probs are the learner's (so
logp_mismatch and truncated importance sampling mean what they say), the engine never samples
from stale weights, rows and seeds behave as with rlvr's engine, and a run trains.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from rlvr.rollout.tools import TOOL_FORMATS, ToolCall
from rlvr.rollout.vllm_sampler import vllm_unavailable

_WHY = vllm_unavailable()
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(_WHY is not None, reason=f"vLLM unavailable: {_WHY}")]

PROMPTS = ["3+4*2=", "12-5=", "7*7-1=", "9+9="]


@pytest.fixture(scope="module")
def tiny():
    from rlvr.config import load_config
    from rlvr.runtime import tiny_lab_model

    cfg = load_config(overrides=["run.seed=3"])
    model, tokenizer = tiny_lab_model(cfg)
    return cfg, model, tokenizer


def _samplers(model, tokenizer, sampling):
    from rlvr.rollout import Sampler
    from rlvr.rollout.vllm_sampler import VLLMSampler

    return VLLMSampler(model, tokenizer, sampling), Sampler(model, tokenizer, sampling)


def _learner_logp(model, rollouts, temperature):
    from rlvr.logprobs import completion_logprobs

    with torch.no_grad():
        return completion_logprobs(model, rollouts.prompt_ids_BP, rollouts.prompt_mask_BP, rollouts.completion_ids_BT,
                                   rollouts.completion_mask_BT, temperature=temperature)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_engines_log_probs_of_its_samples_are_the_learners(tiny, temperature):
    from rlvr.sampling import Sampling

    _, model, tokenizer = tiny
    vllm, _ = _samplers(model, tokenizer, Sampling(max_new_tokens=20, temperature=temperature))
    done = vllm.sample(PROMPTS, 4, torch.Generator().manual_seed(0))
    r = done.rollouts
    mask = r.completion_mask_BT.bool()
    assert int(mask.sum()) > 40 and r.sample_logp_BT.shape == r.completion_ids_BT.shape
    gap = (_learner_logp(model, r, temperature) - r.sample_logp_BT)[mask].abs().max()
    assert float(gap) < 1e-4  # fp32 on both sides; measured ~1e-6
    assert float(r.sample_logp_BT[~mask].abs().sum()) == 0.0  # padding carries nothing
    # rollout/entropy's estimate: minus the summed log-probs of the sampled tokens
    assert r.entropy_sum == pytest.approx(float(-r.sample_logp_BT.sum()), rel=1e-6)


def test_with_truncation_the_log_probs_are_of_the_truncated_distribution(tiny):
    """top-k renormalises over the k kept tokens: each sampled token's log-prob can only rise against
    the learner's untruncated one (what docs/vllm.md and algo.tis_cap's help say)."""
    from rlvr.sampling import Sampling

    _, model, tokenizer = tiny
    vllm, _ = _samplers(model, tokenizer, Sampling(max_new_tokens=16, top_k=3))
    r = vllm.sample(PROMPTS, 4, torch.Generator().manual_seed(1)).rollouts
    mask = r.completion_mask_BT.bool()
    rise = (r.sample_logp_BT - _learner_logp(model, r, 1.0))[mask]
    assert float(rise.min()) > -1e-4 and float(rise.max()) > 1e-3


def test_greedy_completions_follow_every_update(tiny):
    """After each of three updates the engine samples from the new weights: its greedy completions
    are rlvr's engine's on the updated policy (and they do change, so stale weights would fail)."""
    from rlvr.config import load_config
    from rlvr.learner import LocalLearner
    from rlvr.runtime import tiny_lab_model
    from rlvr.sampling import Sampling
    from rlvr.tasks.arithmetic import make_splits

    cfg = load_config(overrides=["rollout.engine=vllm", "rollout.group_size=4", "rollout.prompts_per_step=4", "rollout.max_new_tokens=16",
                                 "train.lr=3e-2", "train.warmup_steps=0", "run.seed=5"])
    model, tokenizer = tiny_lab_model(cfg)
    learner = LocalLearner(model, tokenizer, cfg)
    greedy_vllm, greedy_rlvr = _samplers(model, tokenizer, Sampling(max_new_tokens=16, greedy=True))
    examples = make_splits(cfg.task, 0)[0][:4]
    seen = [greedy_vllm.sample(PROMPTS).texts]
    for update in range(3):
        generation = learner.generate(examples)
        B = len(generation.texts)
        advantages = torch.linspace(-1.0, 1.0, B)
        learner.update(generation.rollouts, advantages, torch.ones(B, dtype=torch.bool))
        got, want = greedy_vllm.sample(PROMPTS), greedy_rlvr.sample(PROMPTS)
        assert got.completion_ids() == want.completion_ids(), f"after update {update + 1}"
        seen.append(got.texts)
    assert len({tuple(texts) for texts in seen}) >= 3, "the updates did not change the greedy completions: the test proves nothing"


def test_rows_end_as_with_rlvrs_engine(tiny):
    """EOS and stop strings end a row and stay in it, masks cover exactly the completion, a row cut
    at max_new_tokens is marked truncated; greedy, both engines give the same rows."""
    from rlvr.sampling import Sampling

    _, model, tokenizer = tiny
    plain, _ = _samplers(model, tokenizer, Sampling(max_new_tokens=24, greedy=True))
    ids = plain.sample(PROMPTS).completion_ids()[0]
    text = tokenizer.decode(ids)
    # A stop string the greedy completion writes, spelled by its own tokens and first written there:
    # vLLM matches stop strings in the text, rlvr's engine in tokens; on such a string they agree.
    stop = next(s for k in range(2, len(ids) - 2) if text.find(s := tokenizer.decode(ids[k:k + 2])) == len(tokenizer.decode(ids[:k])))
    sampling = Sampling(max_new_tokens=24, greedy=True, stop=(stop,))
    vllm, rlvr = _samplers(model, tokenizer, sampling)
    got, want = vllm.sample(PROMPTS), rlvr.sample(PROMPTS)
    assert got.completion_ids() == want.completion_ids() and got.texts == want.texts
    assert got.texts[0].endswith(stop) and len(got.completion_ids()[0]) < len(ids)
    r = got.rollouts
    assert r.lengths_B.tolist() == want.rollouts.lengths_B.tolist()
    assert r.truncated_B.tolist() == want.rollouts.truncated_B.tolist()
    assert not bool(r.truncated_B[0])
    eos = tokenizer.eos_token_id
    for ids, n, cut in zip(got.completion_ids(), r.lengths_B.tolist(), r.truncated_B.tolist()):
        assert len(ids) == n and (cut or ids[-1] == eos or tokenizer.decode(ids).endswith(stop))


def test_a_round_longer_than_one_prefill_step_samples(tiny):
    """20 prompts x 8 samples x 30 tokens is more than one scheduler step prefills (4,096 tokens):
    vLLM 0.32's CPU build failed on seeded requests whose prefill it cut ("CPU Generator does not
    use offset"); the engine is built not to cut them."""
    from rlvr.sampling import Sampling

    _, model, tokenizer = tiny
    vllm, _ = _samplers(model, tokenizer, Sampling(max_new_tokens=6))
    prompts = [f"{i}+{i}*3-{i}+12*{i}-{i}+{i}*3-{i}+12*{i}=" for i in range(20)]
    assert sum(len(tokenizer.encode(p, add_special_tokens=False)) for p in prompts) * 8 > 4096
    done = vllm.sample(prompts, 8, torch.Generator().manual_seed(0))
    assert len(done.texts) == 160 and int(done.rollouts.completion_mask_BT.sum()) > 160


def test_seeds_as_with_rlvrs_engine(tiny):
    """Group seeding: a prompt's samples depend on its own seed, not on which prompts share the
    batch; stream seeding: the same stream state draws the same samples."""
    from rlvr.learner import group_generators
    from rlvr.sampling import Sampling

    _, model, tokenizer = tiny
    vllm, _ = _samplers(model, tokenizer, Sampling(max_new_tokens=16))
    cpu = torch.device("cpu")
    whole = vllm.sample(PROMPTS, 4, generators=group_generators(7, 2, len(PROMPTS), cpu))
    alone = vllm.sample(PROMPTS[2:3], 4, generators=group_generators(7, 2, 1, cpu, first=2))
    assert alone.texts == whole.texts[8:12]
    assert len(set(whole.texts[8:12])) > 1  # the group's samples differ from each other
    a = vllm.sample(PROMPTS, 4, torch.Generator().manual_seed(11))
    b = vllm.sample(PROMPTS, 4, torch.Generator().manual_seed(11))
    c = vllm.sample(PROMPTS, 4, torch.Generator().manual_seed(12))
    assert a.texts == b.texts and a.texts != c.texts


@pytest.mark.parametrize("mode", ["adapter", "merged"])
def test_a_lora_policy_samples_with_its_adapters_after_every_update(mode):
    """rollout.vllm_lora: as a vLLM LoRA adapter per update (the base sent once), or merged; either
    way the engine's greedy completions are the peft policy's, before and after its adapters change,
    and the policy's base weights are left as they were."""
    from rlvr.config import load_config
    from rlvr.models import add_lora
    from rlvr.rollout import Sampler
    from rlvr.rollout.vllm_sampler import VLLMSampler, VLLMSettings
    from rlvr.runtime import tiny_lab_model
    from rlvr.sampling import Sampling

    cfg = load_config(overrides=["model.lora_rank=4", "model.lora_targets=['q_proj','v_proj','down_proj']", "run.seed=3"])
    base, tokenizer = tiny_lab_model(cfg)
    off = Sampler(base, tokenizer, Sampling(max_new_tokens=16, greedy=True)).sample(PROMPTS)
    policy = add_lora(base, cfg.model)
    frozen = {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_" not in n}
    greedy = Sampling(max_new_tokens=16, greedy=True)
    vllm, rlvr = VLLMSampler(policy, tokenizer, greedy, VLLMSettings(lora=mode)), Sampler(policy, tokenizer, greedy)
    seen = []
    for version in range(2):
        with torch.no_grad():
            for name, p in policy.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(version * 1000 + len(name)))
        vllm.weights_changed()
        got, want = vllm.sample(PROMPTS), rlvr.sample(PROMPTS)
        assert got.completion_ids() == want.completion_ids(), f"{mode}, version {version}"
        seen.append(got.texts)
    assert seen[0] != seen[1] and off.texts not in seen  # the adapters matter, and each version's do
    assert vllm.engine.lora_rank == (4 if mode == "adapter" else 0)
    assert all(torch.equal(frozen[n], p) for n, p in policy.named_parameters() if "lora_" not in n)


def test_building_an_engine_leaves_the_runs_random_streams_alone(tiny):
    from rlvr.config import load_config
    from rlvr.runtime import tiny_lab_model
    from rlvr.sampling import Sampling

    model, tokenizer = tiny_lab_model(load_config(overrides=["run.seed=9", "model.tiny.num_layers=1"]))  # another shape: a new engine
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    from rlvr.rollout.vllm_sampler import _SHARED

    before = _SHARED.get("engine")
    vllm, _ = _samplers(model, tokenizer, Sampling(max_new_tokens=4))
    assert vllm.engine is not before
    assert torch.equal(torch.rand(3), expected)
    vllm.sample(PROMPTS[:1])  # the new engine works where the old one was freed


TOY = ["model.tiny.hidden_size=64", "model.tiny.num_heads=2", "model.tiny.num_kv_heads=1", "model.tiny.intermediate_size=128",
       "task.num_train=300", "task.num_eval=40", "task.min_ops=1", "task.max_ops=2", "task.max_operand=3", "task.max_value=-1",
       "eval.max_new_tokens=12", "rollout.max_new_tokens=12", "rollout.group_size=8", "rollout.prompts_per_step=8",
       "train.micro_batch_size=64", "sft.steps=150", "sft.batch_size=16", "sft.lr=5e-3", "sft.worked_fraction=0.5",
       "train.steps=8", "train.lr=1e-3", "train.warmup_steps=1", "run.seed=0"]


def _train(out, engine):
    cmd = [sys.executable, "-m", "rlvr.cli", "lab", "--quiet", *TOY, f"rollout.engine={engine}", f"run.output_dir={out}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rl = [s for s in steps if "reward/mean" in s]
    summary = json.loads((out / "summary.json").read_text())
    return rl, summary


def test_a_short_run_trains_with_vllm_as_with_rlvrs_engine(tmp_path):
    """The same seed, SFT and 8 GRPO steps on each engine: rewards and held-out accuracy in the same
    range, the sampler and the learner agreeing on every step's log-probs."""
    vllm_steps, vllm_summary = _train(tmp_path / "vllm", "vllm")
    rlvr_steps, rlvr_summary = _train(tmp_path / "rlvr", "auto")
    assert len(vllm_steps) == len(rlvr_steps) == 8
    mean = lambda steps: sum(s["reward/mean"] for s in steps) / len(steps)  # noqa: E731
    assert abs(mean(vllm_steps) - mean(rlvr_steps)) < 0.15, (mean(vllm_steps), mean(rlvr_steps))
    assert max(s["rollout/logp_mismatch_max"] for s in vllm_steps) < 1e-3
    acc = lambda summary: summary["eval"]["after_rl"]["accuracy"]  # noqa: E731
    assert abs(acc(vllm_summary) - acc(rlvr_summary)) <= 0.15, (acc(vllm_summary), acc(rlvr_summary))


def test_ray_rollout_workers_each_sample_on_their_own_vllm_engine(tmp_path):
    """distributed.rollout_engine = vllm: each worker's engine is sent every weight version the worker
    receives. With a large learning rate, an engine left on the old weights would sample tokens the
    learner scores very differently; the mismatch stays at float rounding instead."""
    out = tmp_path / "ray"
    overrides = [*TOY, "train.steps=3", "train.lr=1e-2", "eval.before_rl=false", "eval.after_rl=false", "distributed.backend=ray", "distributed.rollout_workers=1",
                 "distributed.rollout_engine=vllm", f"run.output_dir={out}"]
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "lab", "--quiet", *overrides], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rl = [s for s in steps if "reward/mean" in s]
    scored = [s for s in rl if s["loss/active_frac"] > 0]  # steps whose tokens the learner scored (some reward varied)
    assert len(rl) == 3 and scored and scored[-1]["step"] > 1, [(s["step"], s["reward/mean"]) for s in rl]
    assert max(s["rollout/logp_mismatch_max"] for s in scored) < 1e-3


# ---------------------------------------------------------------------------------------------
# Multi-turn rollouts with tools (rollout/multiturn.py) on vLLM: a ToolSampler over a VLLMSampler
# (and over a ServerSampler). As in tests/test_multiturn.py, a test tool format reads every turn as
# one call to `echo`, and turns end on frequent characters, so that an untrained model takes several
# turns: what is tested is vLLM under the loop, not the model's skill.


def every_turn(text: str) -> list[ToolCall]:
    """Test format: every turn is one call to `echo` with the turn's text."""
    return [ToolCall("echo", {"text": text}, text)]


TOOL_FORMATS.setdefault("every_turn", every_turn)


def echo(text: str) -> str:
    """Say the text back.

    Args:
        text: what to say
    """
    return "<" + text[:6] + ">"


@pytest.fixture(scope="module")
def tool_tiny():
    """The file's tiny model (its shape and seed) on the tool lab's tokenizer (the tool tags are tokens
    of their own; its chat template renders tools and tool messages), its weights moved off their
    initialization: freshly drawn, with tied embeddings, its greedy turns repeat the prompt's last
    token (a space) to the end of the budget, and no turn would end."""
    from rlvr.config import load_config
    from rlvr.models import build_char_tokenizer, build_tiny_model

    cfg = load_config(overrides=["run.seed=3"])
    tokenizer = build_char_tokenizer(tools=True)
    model = build_tiny_model(tokenizer, cfg.model.tiny, cfg.run.seed)
    noise = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=noise) * 0.3)
    return model, tokenizer


def _turn_stops(tokenizer) -> tuple[str, ...]:
    """20 characters that end a turn: ones no word token spells (vLLM matches stop strings in the
    text, rlvr's engine in tokens; a character that only ever is its own token is matched alike)."""
    import string

    words = [piece for piece in tokenizer.get_vocab() if len(piece) > 1]
    return tuple(c for c in string.digits + string.ascii_lowercase if not any(c in w for w in words))[:20]


def _tool_sampler(inner, tokenizer, max_turns: int):
    from rlvr.config import DataConfig
    from rlvr.rollout.multiturn import ToolSampler, ToolSettings

    return ToolSampler(inner, tokenizer, ToolSettings(tools=("test_vllm:echo",), max_turns=max_turns, format="every_turn"),
                       DataConfig(use_chat_template=True))


def _tool_sampling(tokenizer, budget: int, **kw):
    from rlvr.sampling import Sampling

    return Sampling(max_new_tokens=budget, stop=_turn_stops(tokenizer), **kw)


TOOL_EXAMPLES = [("12+7=", "19"), ("3*4=", "12"), ("9-2=", "7"), ("8+8=", "16")]


def _examples():
    from rlvr.data import Example

    return [Example(prompt, answer) for prompt, answer in TOOL_EXAMPLES]


class _Recorded:
    """The inner sampler, recording every call: its prompts, group size, limits and what came back."""

    def __init__(self, inner):
        self.inner, self.calls, self.sampling = inner, [], inner.sampling

    def weights_changed(self):
        self.inner.weights_changed()

    def sample_ids(self, prompt_ids, group_size=1, generator=None, generators=None, limits=None):
        out = self.inner.sample_ids(prompt_ids, group_size, generator, generators, limits)
        self.calls.append((prompt_ids, group_size, limits, out))
        return out


def _runs(flags: list[int]) -> list[tuple[int, int, int]]:
    """(flag, start, end) of each run of equal flags."""
    runs, start = [], 0
    for i in range(1, len(flags) + 1):
        if i == len(flags) or flags[i] != flags[start]:
            runs.append((flags[start], start, i))
            start = i
    return runs


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_multi_turn_on_vllm_the_learner_scores_every_sampled_token_as_vllm_did(tool_tiny, temperature):
    """Conversations of several turns sampled on vLLM: every sampled token's log-prob, recomputed by the
    learner over the whole conversation (tool results attended to), is vLLM's; the tool results' tokens
    are context (attended, context mask 1) and never the policy's (completion mask 0, no log-prob)."""
    from rlvr.logprobs import completion_logprobs
    from rlvr.rollout.vllm_sampler import VLLMSampler

    model, tokenizer = tool_tiny
    sampler = _tool_sampler(VLLMSampler(model, tokenizer, _tool_sampling(tokenizer, 64, temperature=temperature)), tokenizer, 4)
    out = sampler.sample([], 4, None, [torch.Generator().manual_seed(100 + g) for g in range(len(TOOL_EXAMPLES))], examples=_examples())
    r, trace = out.rollouts, out.trace
    assert len(out.texts) == 16 and max(trace.turns) >= 3 and sum(t >= 2 for t in trace.turns) >= 12, trace.turns
    with torch.no_grad():
        learner = completion_logprobs(model, r.prompt_ids_BP, r.prompt_mask_BP, r.completion_ids_BT, r.attention_mask_BT,
                                      temperature=temperature, score_mask_BT=r.completion_mask_BT)
    sampled, context = r.completion_mask_BT.bool(), r.context_mask_BT.bool()
    assert int(sampled.sum()) > 100
    assert float((learner - r.sample_logp_BT)[sampled].abs().max()) < 1e-4  # fp32 on both sides, as single-turn
    tool = context & ~sampled
    assert int(tool.sum()) > 100 and bool((sampled <= context).all())
    assert float(r.sample_logp_BT[~sampled].abs().sum()) == 0.0  # tool results and padding carry no sampling log-prob
    for b in range(len(out.texts)):
        n = int(r.spans_B[b])
        assert bool(context[b, :n].all()) and not bool(context[b, n:].any())
        ids, flags = r.completion_ids_BT[b, :n].tolist(), r.completion_mask_BT[b, :n].tolist()
        runs = _runs(flags)
        tool_messages = [m for m in trace.conversations[b] if m["role"] == "tool"]
        # turn, tool result, turn, ...: each context run is exactly the template's tokens of the row's next tool message
        assert [flag for flag, _, _ in runs] == [1, 0] * (trace.turns[b] - 1) + [1], (b, trace.turns[b], trace.stops[b])
        for k, (_, start, end) in enumerate(run for run in runs if run[0] == 0):
            assert ids[start:end] == sampler.renderer.tool_suffix_ids(tool_messages[k:k + 1])
            assert tokenizer.decode(ids[start:end]).startswith("\n<tool_response><")


def test_greedy_multi_turn_conversations_on_vllm_are_rlvrs_engines(tool_tiny):
    """Greedy, the same model and examples: vLLM's conversations are rlvr's engine's, turn for turn and
    token for token (stops, budget cuts and per-turn limits included)."""
    from rlvr.rollout import Sampler
    from rlvr.rollout.vllm_sampler import VLLMSampler

    model, tokenizer = tool_tiny
    greedy = _tool_sampling(tokenizer, 48, greedy=True)
    got = _tool_sampler(VLLMSampler(model, tokenizer, greedy), tokenizer, 4).sample([], 1, examples=_examples())
    want = _tool_sampler(Sampler(model, tokenizer, greedy), tokenizer, 4).sample([], 1, examples=_examples())
    assert got.trace.conversations == want.trace.conversations
    assert got.completion_ids() == want.completion_ids() and got.texts == want.texts
    for name in ("prompt_ids_BP", "prompt_mask_BP", "completion_ids_BT", "completion_mask_BT", "context_mask_BT", "truncated_B"):
        assert torch.equal(getattr(got.rollouts, name), getattr(want.rollouts, name)), name
    assert got.trace.turns == want.trace.turns and got.trace.stops == want.trace.stops
    assert min(got.trace.turns) >= 2 and len({json.dumps(c) for c in got.trace.conversations}) == len(TOOL_EXAMPLES), got.trace.turns
    # the loop's three ends all reached: a call in the last turn, results that no longer fit, a later turn cut at what was left
    spans = got.rollouts.spans_B.tolist()
    assert "turn_limit" in got.trace.stops and any(s == "budget" and n < 48 for s, n in zip(got.trace.stops, spans))
    assert any(s == "budget" and t >= 2 and n == 48 for s, t, n in zip(got.trace.stops, got.trace.turns, spans))


def test_multi_turn_on_vllm_stays_within_the_conversations_budget(tool_tiny):
    """sampling.max_new_tokens bounds everything after the prompt; each later turn is asked for at most
    what is left of it (`limits`), and vLLM cuts a turn there (a row so cut ends the conversation)."""
    from rlvr.rollout.vllm_sampler import VLLMSampler

    model, tokenizer = tool_tiny
    budget = 40
    sampler = _tool_sampler(_Recorded(VLLMSampler(model, tokenizer, _tool_sampling(tokenizer, budget))), tokenizer, 8)
    out = sampler.sample([], 4, None, [torch.Generator().manual_seed(g) for g in range(len(TOOL_EXAMPLES))], examples=_examples())
    r, trace, calls = out.rollouts, out.trace, sampler.inner.calls
    assert int(r.spans_B.max()) <= budget and int(r.lengths_B.min()) > 0
    assert len(calls) >= 3 and calls[0][2] is None  # turn 1: the whole budget
    prompt_len = {tuple(p): len(p) for p in calls[0][0]}
    cut_at_limit = 0
    for prompts, group_size, limits, turn in calls[1:]:
        assert group_size == 1 and len(limits) == len(prompts)
        for j, (ids, limit) in enumerate(zip(prompts, limits)):
            start = next(n for key, n in prompt_len.items() if tuple(ids[:n]) == key)
            assert limit == budget - (len(ids) - start) and 0 < limit < budget  # what the conversation has left
            n = int(turn.completion_mask_BT[j].sum())
            last = int(turn.completion_ids_BT[j, n - 1])
            ended = last == tokenizer.eos_token_id or tokenizer.decode([last]) in sampler.sampling.stop
            assert n <= limit and bool(turn.truncated_B[j]) == (n == limit and not ended)
            cut_at_limit += bool(turn.truncated_B[j])
    assert cut_at_limit > 0, "no turn was cut at its limit: the test proves nothing"
    assert "budget" in trace.stops and all(s in ("budget", "turn_limit") for s in trace.stops)
    for b, stop in enumerate(trace.stops):
        assert bool(r.truncated_B[b]) == (stop == "budget")
    print(f"\nbudget {budget}: spans {r.spans_B.tolist()}, turns {trace.turns}, {cut_at_limit} turns cut at their limit")


@pytest.fixture(scope="module")
def tool_server(tool_tiny, tmp_path_factory):
    """`rlvr serve` on the tool model (its config and tokenizer: the server decodes, and matches stop
    strings, with the run's tokenizer); the samplers push the weights. Started as tests/test_vllm_server.py
    starts its own."""
    from rlvr.models import save_pretrained
    from test_vllm_server import Served

    root = tmp_path_factory.mktemp("tool-served")
    save_pretrained(*tool_tiny, root / "tool-tiny")
    served = Served(root / "tool-tiny", root)
    served.start()  # these turns end on 20 stop strings: `rlvr serve` lifts vLLM's limit of 4 (VLLM_MAX_STOP_STRINGS)
    print(f"\nrlvr serve: up in {served.start_s:.1f} s")
    yield served
    served.stop()


def test_multi_turn_through_a_server_is_as_in_process(tool_tiny, tool_server):
    """A ToolSampler over a ServerSampler (rollout.engine = vllm_server) gives the conversations an
    in-process engine gives: greedy, and seeded (rows, masks and log-probs bit for bit)."""
    from rlvr.learner import group_generators
    from rlvr.rollout.vllm_sampler import VLLMSampler
    from rlvr.rollout.vllm_server import ServerSampler

    model, tokenizer = tool_tiny
    cpu = torch.device("cpu")
    seeded = lambda: {"generators": group_generators(7, 2, len(TOOL_EXAMPLES), cpu)}  # noqa: E731
    for sampling, G, seeds in ((_tool_sampling(tokenizer, 48, greedy=True), 1, dict), (_tool_sampling(tokenizer, 48, temperature=0.9), 2, seeded)):
        remote = _tool_sampler(ServerSampler(model, tokenizer, sampling, tool_server.url, 60), tokenizer, 4)
        local = _tool_sampler(VLLMSampler(model, tokenizer, sampling), tokenizer, 4)
        got, want = remote.sample([], G, **seeds(), examples=_examples()), local.sample([], G, **seeds(), examples=_examples())
        assert got.trace.conversations == want.trace.conversations and got.texts == want.texts
        assert got.trace.turns == want.trace.turns and got.trace.stops == want.trace.stops and max(got.trace.turns) >= 3
        for name in ("prompt_ids_BP", "prompt_mask_BP", "completion_ids_BT", "completion_mask_BT", "context_mask_BT", "sample_logp_BT",
                     "truncated_B"):
            assert torch.equal(getattr(got.rollouts, name), getattr(want.rollouts, name)), (sampling.greedy, name)


def test_rlvr_check_measures_vllm_through_the_sampler_s_log_probs():
    """`rlvr check` with rollout.engine = vllm: vLLM's logits are not exposed, so its engine is measured by the
    log-probs it sampled with against the learner's (fp32 on CPU: the same to 1e-3 of their spread)."""
    from rlvr.commands.check import run_checks
    from rlvr.config import load_config

    overrides = ["rollout.engine=vllm", "rollout.max_new_tokens=10", "rollout.group_size=4"]  # the lab model: vLLM's CPU attention takes its head size
    report = run_checks(load_config(overrides=overrides), config_path=None, overrides=overrides, skip={"resume"})
    found = {f.name: f for f in report.findings}
    assert not report.failed, report.findings
    assert found["engine"].status == "skip" and "rollout.engine = vllm" in found["engine"].measured
    assert found["sampler_logprobs"].status == "pass" and " tokens: mean |difference|" in found["sampler_logprobs"].measured
