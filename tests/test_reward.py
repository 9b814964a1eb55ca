"""Reward terms: weights, TRL-style functions by import path, missing rewards counted, never silent."""

import math
import textwrap

import pytest
import torch

from rlvr.config import ConfigError, RewardConfig, load_config
from rlvr.data import Example
from rlvr.reward import RewardTerm, build_reward_terms, score_completions

EXAMPLES = [Example("1+1=", "2", level=1, info={"source": "a"}), Example("2*3=", "6", level=2, info={"source": "b"})]


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A user's reward module on the import path, with TRL's reward signature."""
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent('''
        calls = []

        def brevity(prompts, completions, completion_lengths, answer, source, **kwargs):
            calls.append(dict(prompts=prompts, answer=answer, source=source, level=kwargs["level"]))
            return [1.0 / n for n in completion_lengths]

        def sometimes_none(prompts, completions, **kwargs):
            return [None if "?" in c else 0.5 for c in completions]

        def wrong_length(prompts, completions, **kwargs):
            return [1.0]

        def boom(prompts, completions, **kwargs):
            raise RuntimeError("reward server down")

        not_callable = 3
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib, sys
    sys.modules.pop("my_rewards", None)
    return importlib.import_module("my_rewards")


def score(cfg, completions, lengths, examples=EXAMPLES, max_new_tokens=8):
    return score_completions(build_reward_terms(cfg), cfg, [e.prompt for e in examples], completions, examples, lengths, max_new_tokens)


def test_terms_combine_by_weight_and_are_logged_one_by_one(user_module):
    cfg = load_config(overrides=['reward.functions=["boxed_math", "my_rewards:brevity"]', "reward.weights=[1.0, 0.5]"]).reward
    s = score(cfg, ["\\boxed{2}", "\\boxed{7}"], [4, 2])
    assert s.total_B.tolist() == pytest.approx([1.0 + 0.5 / 4, 0.0 + 0.5 / 2])
    m = s.metrics()
    assert m["reward/boxed_math"] == 0.5 and m["reward/brevity"] == pytest.approx((0.25 + 0.5) / 2)
    assert m["reward/boxed_math/missing"] == 0 and m["reward/brevity/errors"] == 0
    # the batched function saw the prompts and every column, extra example fields included
    (call,) = user_module.calls
    assert call == {"prompts": ["1+1=", "2*3="], "answer": ["2", "6"], "source": ["a", "b"], "level": [1, 2]}


def test_a_none_is_not_applicable_where_another_term_scores_the_row_and_missing_where_none_does(user_module):
    # TRL's semantics (issue 11): a term's None leaves the row to the other terms; only a row no
    # (weighted) term scores is missing. Before, any None made the row missing.
    cfg = RewardConfig(functions=["boxed_math", "my_rewards:sometimes_none"])
    s = score(cfg, ["\\boxed{2}", "\\boxed{6}?"], [3, 3])
    assert s.total_B.tolist() == [1.5, 1.0]
    assert s.metrics()["reward/sometimes_none/missing"] == 1 and s.metrics()["reward/sometimes_none/errors"] == 0
    alone = RewardConfig(functions=["my_rewards:sometimes_none"])
    t = score(alone, ["\\boxed{2}", "\\boxed{6}?"], [3, 3]).total_B
    assert t[0] == 0.5 and math.isnan(t[1])  # no term scores row 1
    # a term of weight 0 is a metric: it neither changes the sum nor scores a row on its own
    cfg = RewardConfig(functions=["my_rewards:sometimes_none", "boxed_math"], weights=[1.0, 0.0])
    t = score(cfg, ["\\boxed{2}", "\\boxed{6}?"], [3, 3]).total_B
    assert t[0] == 0.5 and math.isnan(t[1])


@pytest.mark.parametrize("name, why", [("wrong_length", "returned 1 rewards for 2"), ("boom", "reward server down")])
def test_a_failing_batched_function_marks_its_batch_missing_with_the_error(user_module, name, why):
    cfg = RewardConfig(functions=["boxed_math", f"my_rewards:{name}"])
    s = score(cfg, ["\\boxed{2}", "\\boxed{6}"], [3, 3])
    assert torch.isnan(s.total_B).all()
    assert s.metrics()[f"reward/{name}/errors"] == 2 and why in s.problems()


def test_a_verifier_that_raises_or_returns_junk_scores_nothing_silently():
    def flaky(completion, answer):
        if completion == "raise":
            raise ValueError("cannot parse")
        return {"nan": float("nan"), "inf": float("inf"), "none": None, "str": "1"}.get(completion, 1.0)

    term = RewardTerm("flaky", 1.0, flaky, batched=False)
    completions = ["raise", "nan", "inf", "none", "str", "ok"]
    t = term.score([""] * 6, completions, [EXAMPLES[0]] * 6, [1] * 6)
    assert t.values == [None, None, None, None, None, 1.0]
    # NaN and None are "not scored" (as in TRL); a raise, a string and an infinity are errors (an
    # infinity used to pass as a quiet None: now a row it touches is missing, not left to others)
    assert t.errors == 3 and t.failed == {0, 2, 4} and "ValueError: cannot parse" in t.first_error


def test_overlong_term_uses_the_generation_limit():
    cfg = RewardConfig(overlong_buffer_frac=0.25)  # max_new_tokens 8 -> L_cache 2: free up to 6
    s = score(cfg, ["\\boxed{2}", "\\boxed{6}"], [7, 8])
    assert s.terms["overlong"].values == pytest.approx([-0.5, -1.0])
    assert s.total_B.tolist() == pytest.approx([0.5, 0.0])


def test_bad_reward_functions_are_rejected_before_any_work(user_module):
    with pytest.raises(ConfigError, match=r"reward.functions\[1\]: cannot import 'my_rewards:nope'"):
        build_reward_terms(RewardConfig(functions=["boxed_math", "my_rewards:nope"]))
    with pytest.raises(ConfigError, match=r"reward.functions\[0\]: cannot import 'no_such_module:f'"):
        build_reward_terms(RewardConfig(functions=["no_such_module:f"]))
    with pytest.raises(ConfigError, match="not callable"):
        build_reward_terms(RewardConfig(functions=["my_rewards:not_callable"]))


def test_duplicate_names_get_distinct_metric_keys(user_module):
    names = [t.name for t in build_reward_terms(RewardConfig(functions=["boxed_math", "boxed_math", "my_rewards:brevity"]))]
    assert names == ["boxed_math", "boxed_math_1", "brevity"]


def test_a_hanging_verifier_is_killed_and_its_sample_counted_missing(tmp_path, monkeypatch):
    from rlvr.verifiers.pool import VerifierPool

    (tmp_path / "slow_verifiers.py").write_text("import time\n\ndef maybe_hang(c, a):\n    if c == 'hang':\n        time.sleep(600)\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with VerifierPool("slow_verifiers:maybe_hang", workers=2, timeout_s=1.0) as pool:
        term = RewardTerm("slow", 1.0, None, batched=False, pool=pool)
        t = term.score(["p"] * 3, ["ok", "hang", "ok"], [EXAMPLES[0]] * 3, [1, 1, 1])
    assert t.values == [1.0, None, 1.0] and t.timeouts == 1 and "timed out" in t.first_error


def test_reward_workers_build_a_pool_per_registered_verifier():
    from rlvr.reward import close_reward_terms

    terms = build_reward_terms(RewardConfig(workers=1, timeout_s=5.0))
    try:
        assert terms[0].pool is not None
        s = score_completions(terms, RewardConfig(), ["p", "p"], ["\\boxed{2}", "\\boxed{3}"], EXAMPLES, [3, 3], 8)
        assert s.total_B.tolist() == [1.0, 0.0] and s.metrics()["reward/boxed_math/timeouts"] == 0
    finally:
        close_reward_terms(terms)


def test_a_pooled_term_logs_its_verify_timing_and_rounds_add_up():
    from rlvr.reward import Scores, TermScores
    from rlvr.verifiers.pool import PoolTiming

    def scores(timing):
        return Scores(torch.zeros(2), {"boxed_math": TermScores([1.0, 0.0], pool=timing), "plain": TermScores([0.5, 0.5])})

    merged = Scores.merge([scores(PoolTiming(1.0, 2, 0.25)), scores(PoolTiming(3.0, 2, 0.75))])
    m = merged.metrics()
    assert (m["time/verify/boxed_math/seconds"], m["time/verify/boxed_math/items_per_s"], m["time/verify/boxed_math/slowest_item_s"]) == (4.0, 1.0, 0.75)
    assert not any(k.startswith("time/verify/plain") for k in m)  # scored in the training process: no pool, no time/verify/ keys
    assert list(m)[-3:] == ["time/verify/boxed_math/seconds", "time/verify/boxed_math/items_per_s", "time/verify/boxed_math/slowest_item_s"]


def test_a_pooled_term_with_no_rows_of_its_own_still_logs_its_verify_keys():
    class NoPool:  # a pool that must not be called: no row is this term's
        def score(self, *args):
            raise AssertionError("called")

    term = RewardTerm("code", 1.0, lambda c, a: 1.0, batched=False, pool=NoPool(), route_field="verifier")
    rows = [Example("p", "1", info={"verifier": "boxed_math"})] * 2
    t = term.score(["p"] * 2, ["a", "b"], rows, [1, 1])
    assert t.values == [None, None] and t.pool.items == 0


def test_numpy_and_bool_rewards_are_numbers():
    import numpy as np

    term = RewardTerm("np", 1.0, lambda c, a: {"f": np.float32(0.5), "i": np.int64(1), "b": np.bool_(True), "t": True}[c], batched=False)
    t = term.score([""] * 4, ["f", "i", "b", "t"], [EXAMPLES[0]] * 4, [1] * 4)
    assert t.values == [0.5, 1.0, 1.0, 1.0] and t.errors == 0


def test_reward_names_cannot_overwrite_the_steps_own_metrics(user_module, tmp_path, monkeypatch):
    (tmp_path / "clash.py").write_text("def mean(prompts, completions, **kw):\n    return [0.0] * len(completions)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [t.name for t in build_reward_terms(RewardConfig(functions=["boxed_math", "clash:mean"]))] == ["boxed_math", "mean_1"]
