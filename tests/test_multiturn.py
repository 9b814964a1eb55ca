"""Multi-turn rollouts with tools (rlvr/rollout/multiturn.py): exact tokens and masks, zero gradient
on what the model did not write, TRL-style environments and reward functions, bad tools and bad
calls, isolation between rollouts.

A real tiny model samples here on rlvr's engine. So that an untrained model takes several turns,
a test tool format (registered below) reads every turn as one call to `echo`, and turns end on any
of a set of frequent characters (stop strings): what is tested is the loop around the model, not
the model's skill.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
import torch

from rlvr.config import ConfigError, DataConfig, RewardConfig
from rlvr.data import Example
from rlvr.logprobs import completion_logprobs
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.config import TinyModelConfig
from rlvr.reward import RewardTerm, score_completions
from rlvr.rollout import Sampler
from rlvr.rollout.multiturn import ToolRenderer, ToolSampler, ToolSettings, ToolTrace
from rlvr.rollout.tools import TOOL_FORMATS, ToolCall
from rlvr.sampling import Sampling
from rlvr.verifiers.math import boxed_math

STOPS = tuple("0123456789abcdefghij")  # ~a fifth of the tiny vocabulary: a random model's turn ends within a few tokens


def every_turn(text: str) -> list[ToolCall]:
    """Test format: every turn is one call to `echo` with the turn's text."""
    return [ToolCall("echo", {"text": text}, text)]


def turns_that_say(text: str) -> list[ToolCall]:
    """Test format: a turn calls the tool its text names (first match), else it is the answer."""
    for name in ("boom", "hang", "huge", "leak", "count", "nope", "bad_args", "malformed"):
        if name in text:
            if name == "malformed":
                return [ToolCall(None, None, text, error="not JSON")]
            if name == "bad_args":
                return [ToolCall("count", {"n": "seven"}, text)]
            return [ToolCall(name, {}, text)]
    return []


TOOL_FORMATS.setdefault("every_turn", every_turn)
TOOL_FORMATS.setdefault("turns_that_say", turns_that_say)


def echo(text: str) -> str:
    """Say the text back.

    Args:
        text: what to say
    """
    return "<" + text[:6] + ">"


def boom() -> str:
    """Raise."""
    raise RuntimeError("the tool broke")


def hang() -> str:
    """Never return (within the test's timeout)."""
    time.sleep(30)
    return "late"


def huge() -> str:
    """Return 10 MB."""
    return "x" * 10_000_000


def leak() -> str:
    """Return the gold answer boxed: a tool's words are never the model's."""
    return "\\boxed{42}"


def count(n: int) -> str:
    """Count.

    Args:
        n: how far
    """
    return str(n)


class Counter:
    """A TRL-style environment: reset(**row), public methods are tools, get_reward() owns a reward."""

    instances = 0

    def __init__(self) -> None:
        Counter.instances += 1
        self.total = 0
        self.seen = []

    def reset(self, **row) -> str:
        self.target = int(row["answer"])
        self.seen.append(row["prompt"][-1]["content"])
        return " (count to the target)"

    def add(self, n: int) -> str:
        """Add to the running total.

        Args:
            n: how much
        """
        self.total += n
        return str(self.total)

    def get_reward(self) -> float:
        return float(self.total == self.target)


def tiny(seed: int = 0, tools: bool = True):
    tok = build_char_tokenizer(tools=tools)
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128,
                                                  max_positions=256), seed)
    return model.eval(), tok


def tool_sampler(model, tok, *, fmt: str = "every_turn", tools=("test_multiturn:echo",), max_turns: int = 3, max_new_tokens: int = 64,
                 stop=STOPS, greedy: bool = False, environment: str = "", **settings) -> ToolSampler:
    sampling = Sampling(max_new_tokens=max_new_tokens, temperature=1.0, stop=stop, greedy=greedy)
    inner = Sampler(model, tok, sampling)
    return ToolSampler(inner, tok, ToolSettings(tools=tuple(tools), environment=environment, max_turns=max_turns, format=fmt,
                                                **settings), DataConfig(use_chat_template=True))


EXAMPLES = [Example("12+7=", "19"), Example("3*4=", "12"), Example("9-2=", "7")]


class Recording:
    """The inner sampler, recording every call's prompts and what it returned."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []
        self.sampling = inner.sampling

    def sample_ids(self, prompt_ids, group_size=1, generator=None, generators=None, limits=None):
        out = self.inner.sample_ids(prompt_ids, group_size, generator, generators, limits)
        self.calls.append((prompt_ids, group_size, out))
        return out


def sampled_conversations(seed: int = 0, G: int = 2, **kw):
    model, tok = tiny()
    sampler = tool_sampler(model, tok, **kw)
    sampler.inner = Recording(sampler.inner)
    gens = [torch.Generator().manual_seed(seed * 100 + g) for g in range(len(EXAMPLES))]
    out = sampler.sample([], G, None, gens, examples=EXAMPLES)
    return model, tok, sampler, out


def test_three_turns_token_for_token():
    """The sequence the learner scores is, token for token, the prompt, then each turn as the engine sampled it
    continuing from exactly the tokens before it, with the tool results' tokens between."""
    model, tok, sampler, out = sampled_conversations()
    r, trace = out.rollouts, out.trace
    assert max(trace.turns) == 3 and min(trace.turns) >= 2, trace.turns
    G = 2
    for b in range(len(out.texts)):
        prompt = r.prompt_ids_BP[b][r.prompt_mask_BP[b].bool()].tolist()
        span = r.completion_ids_BT[b][r.attention_mask_BT[b].bool()].tolist()
        sampled = r.completion_mask_BT[b][r.attention_mask_BT[b].bool()].tolist()
        # rebuild it from the engine's calls: turn 1 from the prompt, each later turn from exactly what precedes it
        rebuilt, flags = [], []
        for k, (prompts, group_size, got) in enumerate(sampler.inner.calls):
            rows = [b] if k == 0 else None
            if k == 0:
                assert prompts[b // G] == prompt and group_size == G
                j = b
            else:
                if prompt + rebuilt not in prompts:
                    break
                j = prompts.index(prompt + rebuilt)
            turn = got.completion_ids_BT[j][got.completion_mask_BT[j].bool()].tolist()
            rebuilt += turn
            flags += [1] * len(turn)
            tool_messages = [m for m in trace.conversations[b] if m["role"] == "tool"][k:k + 1]
            if len(rebuilt) < len(span) and tool_messages:
                suffix = sampler.renderer.tool_suffix_ids(tool_messages)
                rebuilt += suffix
                flags += [0] * len(suffix)
            del rows
        assert span == rebuilt and sampled == flags
        assert 0 in sampled and sampled.count(1) == int(r.lengths_B[b])


def test_learner_scores_the_sampled_tokens_as_the_sampler_did():
    """Every sampled token's log-prob, recomputed over the whole conversation (tool results attended to), equals the
    sampler's; tool-result tokens carry no sampling log-prob."""
    model, tok, sampler, out = sampled_conversations(seed=1)
    r = out.rollouts
    logp = completion_logprobs(model, r.prompt_ids_BP, r.prompt_mask_BP, r.completion_ids_BT, r.attention_mask_BT,
                               score_mask_BT=r.completion_mask_BT)
    mask = r.completion_mask_BT.bool()
    assert (logp[mask] - r.sample_logp_BT[mask]).abs().max() < 1e-4
    assert (r.sample_logp_BT[(r.attention_mask_BT.bool()) & ~mask] == 0).all()


@pytest.mark.parametrize("beta, entropy, aggregation, share", [(0.0, 0.0, "token_mean", True), (0.1, 0.01, "seq_mean_token_mean", False),
                                                               (0.04, 0.0, "constant", True)])
def test_tool_result_tokens_get_exactly_zero_gradient(beta, entropy, aggregation, share, monkeypatch):
    """Through the update itself (rl_update, the KL and entropy terms on as well): the gradient at each position that
    predicts a tool-result token (the hidden state the output layer reads there) is exactly zero; at every sampled
    token it is not. A KL reference scores the same conversation."""
    from rlvr.config import AlgoConfig
    from rlvr.models import frozen_copy
    from rlvr.update import UpdateSettings, rl_update

    import rlvr.logprobs

    monkeypatch.setattr(rlvr.logprobs, "_share_prompts", share)
    model, tok, sampler, out = sampled_conversations(seed=2)
    r = out.rollouts
    reference = frozen_copy(model) if beta else None
    with torch.no_grad():  # a step away from the reference, so that the KL term has a gradient
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    captured = []

    def keep(module, args, output):
        if output.requires_grad:
            output.retain_grad()
            captured.append(output)

    algo = AlgoConfig(beta=beta, entropy_coef=entropy, aggregation=aggregation)
    settings = UpdateSettings.from_algo(algo, temperature=1.0, max_new_tokens=64, micro_batch_size=64, max_grad_norm=0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    import rlvr.update

    chunks = []  # the micro-batch as the update cut it (rows sorted by length): the hidden states' row order
    scored = rlvr.update.policy_logprobs
    monkeypatch.setattr(rlvr.update, "policy_logprobs", lambda policy, chunk, *a, **k: (chunks.append(chunk), scored(policy, chunk, *a, **k))[1])
    handle = model.model.norm.register_forward_hook(keep)
    try:
        rl_update(model, optimizer, scheduler, r, torch.linspace(-1.0, 1.0, r.completion_ids_BT.shape[0]), settings, reference=reference)
    finally:
        handle.remove()
    assert len(chunks) == 1
    r = chunks[0]
    T = r.completion_ids_BT.shape[1]
    if len(captured) == 1:  # one forward over prompt and completion: position t predicts completion token t
        grad = captured[0].grad[:, -(T + 1):-1].abs().sum(-1)
        first = 0
    else:  # the prompts shared (run.share_prompts): the completion's own forward; its position t-1 predicts token t
        assert len(captured) == 2
        grad = torch.cat([torch.zeros_like(captured[1].grad[:, :1, 0]), captured[1].grad[:, :T - 1].abs().sum(-1)], dim=1)
        first = 1  # token 0 is predicted from the shared prompt's last position
    tool = r.attention_mask_BT.bool() & ~r.completion_mask_BT.bool()
    sampled = r.completion_mask_BT.bool()
    assert tool.any() and not tool[:, :first].any()
    assert (grad[tool] == 0).all()
    assert (grad[:, first:][sampled[:, first:]] > 0).all()


def test_a_groups_conversations_depend_on_its_seed_alone():
    """Group seeding: a prompt's conversations are the same sampled alone or beside other prompts (Ray's slices)."""
    model, tok = tiny()
    sampler = tool_sampler(model, tok)
    together = sampler.sample([], 2, None, [torch.Generator().manual_seed(7 + g) for g in range(3)], examples=EXAMPLES)
    alone = sampler.sample([], 2, None, [torch.Generator().manual_seed(8)], examples=EXAMPLES[1:2])
    assert together.trace.conversations[2:4] == alone.trace.conversations
    assert together.texts[2:4] == alone.texts


def test_conversation_budget_bounds_everything_after_the_prompt():
    model, tok = tiny()
    sampler = tool_sampler(model, tok, max_new_tokens=24, max_turns=8)
    out = sampler.sample([], 2, None, [torch.Generator().manual_seed(g) for g in range(3)], examples=EXAMPLES)
    spans = out.rollouts.spans_B
    assert int(spans.max()) <= 24
    assert "budget" in out.trace.stops and all(s in ("budget", "turn_limit", "answer") for s in out.trace.stops)
    assert all(out.rollouts.truncated_B[i] for i, s in enumerate(out.trace.stops) if s == "budget")


def test_turn_limit_is_counted_not_answered():
    model, tok = tiny()
    out = tool_sampler(model, tok, max_turns=2, max_new_tokens=200).sample([], 2, None, [torch.Generator().manual_seed(g) for g in range(3)],
                                                                          examples=EXAMPLES)
    assert all(t <= 2 for t in out.trace.turns)
    m = out.trace.metrics()
    assert m["tools/turn_limit"] == sum(s == "turn_limit" for s in out.trace.stops) > 0
    # the last call of a conversation the limit ended went unanswered: one tool message per earlier turn
    for conv, stop, turns in zip(out.trace.conversations, out.trace.stops, out.trace.turns):
        if stop == "turn_limit":
            assert sum(m["role"] == "tool" for m in conv) == turns - 1


class Scripted:
    """An inner sampler that writes given turns (the policy is not what these tests are about)."""

    def __init__(self, tok, turns: list[str], max_new_tokens: int = 400):
        self.tok, self.turns = tok, turns
        self.sampling = Sampling(max_new_tokens=max_new_tokens, temperature=1.0)
        self.k = 0

    def sample_ids(self, prompt_ids, group_size=1, generator=None, generators=None, limits=None):
        from rlvr.rollout.generate import Rollouts, pad_left

        rows = [p for p in prompt_ids for _ in range(group_size)]
        text = self.turns[min(self.k, len(self.turns) - 1)]
        self.k += 1
        ids = self.tok.encode(text, add_special_tokens=False) + [self.tok.eos_token_id]
        B = len(rows)
        limit = min(limits) if limits else self.sampling.max_new_tokens
        ids = ids[:limit]
        pids, pmask = pad_left(rows, self.tok.pad_token_id, torch.device("cpu"))
        comp = torch.tensor([ids] * B)
        return Rollouts(pids, pmask, comp, torch.ones_like(comp), torch.tensor([ids[-1] != self.tok.eos_token_id] * B), 0.0,
                        torch.full(comp.shape, -0.5))


def scripted(turns: list[str], tools=("test_multiturn:count",), **kw) -> ToolSampler:
    tok = build_char_tokenizer(tools=True)
    sampler = ToolSampler(Scripted(tok, turns), tok, ToolSettings(tools=tuple(tools), **kw), DataConfig(use_chat_template=True))
    return sampler


@pytest.mark.parametrize("turn, outcome", [
    ("boom", "error"), ("huge", "truncated"), ("nope", "unknown_tool"), ("bad_args", "bad_arguments"), ("malformed", "malformed"),
    ("hang", "timeout"),
])
def test_bad_tools_and_bad_calls_become_messages_and_counts(turn, outcome):
    """A tool that raises, hangs past its timeout or returns 10 MB; a call to an unknown tool, with wrong argument
    types, or that cannot be parsed: the model reads a message, the outcome is counted, the conversation goes on."""
    tools = ("test_multiturn:boom", "test_multiturn:huge", "test_multiturn:count", "test_multiturn:hang")
    sampler = scripted([turn, "\\boxed{1}"], tools=tools, format="turns_that_say", timeout_s=0.3, max_chars=64)
    t0 = time.perf_counter()
    out = sampler.sample([], 2, examples=EXAMPLES[:1])
    assert time.perf_counter() - t0 < 5
    trace = out.trace
    assert [r.outcome for r in trace.results[0]] == [outcome]
    assert trace.stops == ["answer", "answer"] and trace.turns == [2, 2]
    tool_message = trace.conversations[0][1]
    assert tool_message["role"] == "tool" and len(tool_message["content"]) < 200
    assert trace.metrics()[f"tools/{outcome}"] == 2
    assert out.texts[0].endswith("\\boxed{1}")


def test_a_tools_words_are_never_judged_as_the_models():
    """A tool that returns the boxed gold answer earns nothing: the verifier reads what the model wrote."""
    sampler = scripted(["leak", "I do not know"], tools=("test_multiturn:leak",), format="turns_that_say")
    out = sampler.sample([], 2, examples=[Example("6*7=", "42")])
    assert "\\boxed{42}" in json.dumps(out.trace.conversations[0])
    assert all(boxed_math(t, "42") == 0.0 for t in out.texts)
    assert "\\boxed{42}" not in tok_text(out)


def tok_text(out) -> str:
    return " ".join(out.texts)


def test_trl_style_environment_and_reward_functions_run_unchanged():
    """TRL's environment class (reset / public methods as tools / get_reward) and a TRL reward function reading
    completions as messages and environments=, scored through rlvr's reward contract."""
    call = '<tool_call>{"name": "add", "arguments": {"n": 19}}</tool_call>'
    sampler = scripted([call, "\\boxed{19}"], tools=(), environment="test_multiturn:Counter")
    Counter.instances = 0
    out = sampler.sample([], 2, examples=[Example("12+7=", "19"), Example("3*4=", "12")])
    assert Counter.instances == 4  # one fresh instance per rollout
    assert all("(count to the target)" in p for p in out.prompts)
    assert "add" in out.prompts[0]  # the environment's method is a tool the template lists
    envs = out.trace.environments
    assert [e.total for e in envs] == [19, 19, 19, 19] and all(len(e.seen) == 1 for e in envs)

    def used_a_tool(prompts, completions, environments, tool_calls, **kwargs):  # TRL's batched signature
        assert isinstance(completions[0], list) and completions[0][1]["role"] == "tool"
        assert prompts[0][-1]["content"].endswith("(count to the target)")
        return [float(any(m.get("tool_calls") for m in c)) for c in completions]

    terms = [RewardTerm("boxed_math", 1.0, boxed_math, False, correctness=True), RewardTerm("used_a_tool", 0.5, used_a_tool, True)]
    scores = score_completions(terms, RewardConfig(), out.prompts, out.texts, [e for e in (Example("12+7=", "19"), Example("3*4=", "12"))
                               for _ in range(2)], out.lengths, 400, prompt_messages=out.trace.prompt_messages,
                               completion_ids=out.completion_ids(), trace=out.trace)
    assert scores.terms["used_a_tool"].values == [1.0] * 4
    assert scores.terms["Counter"].values == [1.0, 1.0, 0.0, 0.0]  # get_reward: 19 is the first problem's target only
    assert scores.correct_B.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert scores.total_B.tolist() == [2.5, 2.5, 0.5, 0.5]


def test_environments_are_isolated_per_rollout():
    """State one rollout writes is never seen by another: each starts from a fresh instance."""
    call = '<tool_call>{"name": "add", "arguments": {"n": 5}}</tool_call>'
    sampler = scripted([call, call, "\\boxed{0}"], tools=(), environment="test_multiturn:Counter", max_turns=3)
    out = sampler.sample([], 4, examples=EXAMPLES[:2])
    totals = [e.total for e in out.trace.environments]
    assert totals == [10] * 8  # two calls of +5 each, never 15, 20, ... from a shared instance
    assert len({id(e) for e in out.trace.environments}) == 8
    assert [r.content for r in out.trace.results[0]] == ["5", "10"]


def test_environments_routed_by_a_data_field():
    call = '<tool_call>{"name": "add", "arguments": {"n": 1}}</tool_call>'
    tok = build_char_tokenizer(tools=True)
    settings = ToolSettings(environments=(("counting", "test_multiturn:Counter"),), environment_field="env")
    sampler = ToolSampler(Scripted(tok, [call, "\\boxed{1}"]), tok, settings, DataConfig(use_chat_template=True))
    out = sampler.sample([], 2, examples=[Example("1=", "1", info={"env": "counting"})])
    assert out.trace.environment_names == ["counting", "counting"]
    with pytest.raises(ConfigError, match="names environment 'other'"):
        sampler.sample([], 2, examples=[Example("1=", "1", info={"env": "other"})])


def test_sft_trace_is_laid_out_as_sampling_lays_it_out():
    """A tool trace given to SFT becomes the very tokens (and trained flags) the sampler builds when the model writes
    the same turns: cold start and RL see one layout."""
    call = '<tool_call>{"name": "count", "arguments": {"n": 3}}</tool_call>'
    sampler = scripted([call, "\\boxed{3}"], format="hermes")
    out = sampler.sample([], 2, examples=[Example("1+2=", "3")])
    r = out.rollouts
    prompt_ids, ids, trained = sampler.renderer.sft_pair(Example("1+2=", "3"), [
        {"role": "assistant", "content": call}, {"role": "tool", "name": "count", "content": "3"},
        {"role": "assistant", "content": "\\boxed{3}"}])
    assert prompt_ids == r.prompt_ids_BP[0][r.prompt_mask_BP[0].bool()].tolist()
    assert ids == r.completion_ids_BT[0][r.attention_mask_BT[0].bool()].tolist()
    assert [int(t) for t in trained] == r.completion_mask_BT[0][r.attention_mask_BT[0].bool()].tolist()


def test_tool_trace_travels_through_selection_and_concatenation():
    model, tok, sampler, out = sampled_conversations()
    trace = out.trace
    picked = trace.select([3, 0])
    assert picked.conversations == [trace.conversations[3], trace.conversations[0]]
    joined = ToolTrace.concat([trace.select([0]), trace.select([1, 2])])
    assert joined.turns == trace.turns[:3] and joined.prompts == trace.prompts[:3]
    assert dataclasses.fields(ToolTrace)  # every field is carried by select and concat
    for f in dataclasses.fields(ToolTrace):
        value = getattr(joined, f.name)
        assert value is None or isinstance(value, tuple) or len(value) == 3  # reward_kinds: the run's, not per row


def test_refused_by_name():
    tok = build_char_tokenizer(tools=False)  # no chat template
    inner = Scripted(tok, ["x"])
    with pytest.raises(ConfigError, match="chat template"):
        ToolSampler(inner, tok, ToolSettings(tools=("test_multiturn:count",)), DataConfig())
    tok = build_char_tokenizer(tools=True)
    with pytest.raises(ConfigError, match="rollout.environment"):
        ToolSampler(Scripted(tok, ["x"]), tok, ToolSettings(environment="no_such_module_rlvr:Env"), DataConfig())
    with pytest.raises(ConfigError, match="rollout.tools"):
        ToolSampler(Scripted(tok, ["x"]), tok, ToolSettings(tools=("test_multiturn:no_such_tool",)), DataConfig())
    with pytest.raises(ValueError, match="examples"):
        scripted(["x"]).sample(["prompt"], 2)


def test_config_checks():
    from rlvr.config import Config, load_config

    with pytest.raises(ConfigError, match="rollout.max_turns"):
        load_config(overrides=["rollout.tools=[\"m:f\"]", "rollout.max_turns=0"])
    with pytest.raises(ConfigError, match=r"rollout.tools\[0\]"):
        load_config(overrides=["rollout.tools=[\"no_colon\"]"])
    with pytest.raises(ConfigError, match="rollout.environments"):
        load_config(overrides=["rollout.environment=\"m:E\"", "rollout.environments={a=\"m:E\"}"])
    with pytest.raises(ConfigError, match="thinking.budget"):
        load_config(overrides=["rollout.tools=[\"m:f\"]", "thinking.budget=10"])
    assert not Config().rollout.multi_turn


class Same:
    """Resets to the same text every time: its group's G prompts are one text."""

    def reset(self, **row) -> str:
        return " ok"


class Varying:
    """Resets to a different text per instance: its group's prompts differ row to row."""

    made = 0

    def __init__(self) -> None:
        Varying.made += 1
        self.n = Varying.made

    def reset(self, **row) -> str:
        return f" #{self.n}"


def test_a_groups_conversations_do_not_depend_on_another_groups_prompts():
    """One group whose environment writes a different text per rollout beside another: the other group's
    conversations are those it has alone (turn 1 is decided group by group)."""
    model, tok = tiny()
    settings = dict(environments=(("same", "test_multiturn:Same"), ("varying", "test_multiturn:Varying")), environment_field="env")
    sampler = tool_sampler(model, tok, **settings)
    plain = Example("12+7=", "19", info={"env": "same"})
    mixed = sampler.sample([], 2, None, [torch.Generator().manual_seed(g) for g in (5, 6)],
                           examples=[plain, Example("3*4=", "12", info={"env": "varying"})])
    alone = sampler.sample([], 2, None, [torch.Generator().manual_seed(5)], examples=[plain])
    assert mixed.prompts[2] != mixed.prompts[3]  # the varying group's rows differ
    assert mixed.trace.conversations[:2] == alone.trace.conversations and mixed.texts[:2] == alone.texts


def test_every_environment_reward_is_a_term_of_every_step():
    """Routed environments: a round (or a Ray slice) whose rows all use one environment still reports the other's
    term (all None), so rounds merge into one step's figures."""
    from rlvr.reward import Scores

    call = '<tool_call>{"name": "add", "arguments": {"n": 19}}</tool_call>'
    tok = build_char_tokenizer(tools=True)
    settings = ToolSettings(environments=(("a", "test_multiturn:Counter"), ("b", "test_multiturn:Other")), environment_field="env")
    sampler = ToolSampler(Scripted(tok, [call, "\\boxed{19}"]), tok, settings, DataConfig(use_chat_template=True))
    assert sampler.renderer.reward_kinds == ("Counter", "Other")
    terms = [RewardTerm("boxed_math", 1.0, boxed_math, False, correctness=True)]
    parts = []
    for env in ("a", "b"):
        examples = [Example("12+7=", "19", info={"env": env})]
        out = sampler.sample([], 2, examples=examples)
        scores = score_completions(terms, RewardConfig(), out.prompts, out.texts, examples * 2, out.lengths, 400, trace=out.trace)
        assert set(scores.terms) == {"boxed_math", "Counter", "Other"}
        parts.append(scores)
    merged = Scores.merge(parts)
    assert merged.terms["Counter"].values == [1.0, 1.0, None, None] and merged.terms["Other"].values == [None, None, 0.5, 0.5]


class Other(Counter):
    """A second environment class with its own reward."""

    def get_reward(self) -> float:
        return 0.5


class Keeps(Counter):
    """Keeps the prompt it was reset with."""

    def reset(self, **row) -> str:
        self.prompt = row["prompt"]
        return " (observation)"


def test_reset_gets_its_own_copy_of_the_prompt():
    sampler = scripted(["\\boxed{1}"], tools=(), environment="test_multiturn:Keeps")
    out = sampler.sample([], 2, examples=[Example("1+1=", "2")])
    assert out.trace.environments[0].prompt[-1]["content"] == "1+1="  # not edited after reset returned
    assert out.trace.prompt_messages[0][-1]["content"] == "1+1= (observation)"


def test_a_budget_stop_drops_the_results_the_model_never_read():
    """As TRL: when the tool results do not fit the budget the conversation ends on the model's call, and the
    unread results are in neither the conversation nor the tool figures."""
    tools = ("test_multiturn:huge", "test_multiturn:count")
    sampler = scripted(["count", "huge", "\\boxed{1}"], tools=tools, format="turns_that_say", max_chars=300, max_turns=4)
    sampler.inner.sampling = Sampling(max_new_tokens=120, temperature=1.0)
    sampler.sampling = sampler.inner.sampling
    out = sampler.sample([], 2, examples=EXAMPLES[:1])
    assert out.trace.stops == ["budget", "budget"]
    for conversation, results in zip(out.trace.conversations, out.trace.results):
        assert conversation[-1]["role"] == "assistant"
        assert [r.name for r in results] == ["count"]  # huge's 300 characters never reached the model
    assert int(out.rollouts.spans_B.max()) <= 120


def test_sft_renders_a_turn_whose_call_is_only_in_tool_calls():
    """The conversations rlvr logs (and `rlvr rft` keeps) hold a turn's call in `tool_calls`, its text stripped of it:
    SFT on them writes the call in the format the model samples, not a bare EOS."""
    call = {"type": "function", "function": {"name": "count", "arguments": {"n": 3}}}
    text = '<tool_call>{"name": "count", "arguments": {"n": 3}}</tool_call>'
    renderer = scripted(["x"]).renderer
    example = Example("1+2=", "3")
    rest = [{"role": "tool", "name": "count", "content": "3"}, {"role": "assistant", "content": "\\boxed{3}"}]
    from_calls = renderer.sft_pair(example, [{"role": "assistant", "content": "", "tool_calls": [call]}, *rest])
    from_text = renderer.sft_pair(example, [{"role": "assistant", "content": text}, *rest])
    assert from_calls == from_text
    assert renderer.tokenizer.decode(from_calls[1]).startswith("<tool_call>")


def test_a_call_that_does_not_parse_stays_in_the_conversation():
    """TRL's assistant message holds a parsed call in tool_calls, its block out of the content; a block that did not
    parse is what the model wrote, and stays in the content (the report shows it)."""
    bad = '<tool_call>{"name": "count", "arguments": {"n": 3</tool_call>'
    sampler = scripted([bad, "\\boxed{3}"], format="hermes")
    out = sampler.sample([], 2, examples=[Example("1+2=", "3")])
    first = out.trace.conversations[0][0]
    assert first["content"] == bad and "tool_calls" not in first
    assert [r.outcome for r in out.trace.results[0]] == ["malformed"]


class boxed_math_env(Counter):  # noqa: N801 - named like the configured term, on purpose
    def get_reward(self) -> float:
        return 0.25


def test_an_environment_named_like_a_reward_term_does_not_overwrite_it():
    call = '<tool_call>{"name": "add", "arguments": {"n": 19}}</tool_call>'
    sampler = scripted([call, "\\boxed{19}"], tools=(), environment="test_multiturn:boxed_math_env")
    out = sampler.sample([], 2, examples=[Example("12+7=", "19")])
    terms = [RewardTerm("boxed_math_env", 1.0, boxed_math, False, correctness=True)]
    scores = score_completions(terms, RewardConfig(), out.prompts, out.texts, [Example("12+7=", "19")] * 2, out.lengths, 400,
                               trace=out.trace)
    assert scores.terms["boxed_math_env"].values == [1.0, 1.0]
    assert scores.terms["boxed_math_env.get_reward"].values == [0.25, 0.25]
    assert scores.total_B.tolist() == [1.25, 1.25]
