"""reward.functions = ["judge"] against a real OpenAI-compatible server: vLLM's, started by `rlvr serve`.

Run by `make test-vllm` in .venv-vllm (vLLM's CPU build); where vLLM cannot be imported it skips with
the reason. The judge is the lab's tiny model (random weights, a plain chat template added), so its
replies are junk: what is checked is the path, not the verdicts. Every request is answered; each row's
reply is either read as a score or counted as malformed, never a crash, never a refused request, and
never a 0 standing in for a missing score.
"""

from __future__ import annotations

import math

import pytest

from rlvr.rollout.vllm_sampler import vllm_unavailable

_WHY = vllm_unavailable()
pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.skipif(_WHY is not None, reason=f"vLLM unavailable: {_WHY}")]

TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # the tiny tokenizer has none; chat completions need one


@pytest.fixture(scope="module")
def judge_server(tmp_path_factory):
    from test_vllm_server import SHAPE, Served  # the vLLM tier's own way to start `rlvr serve`

    from rlvr.config import load_config
    from rlvr.models import save_pretrained
    from rlvr.runtime import tiny_lab_model

    root = tmp_path_factory.mktemp("judge")
    model, tokenizer = tiny_lab_model(load_config(overrides=[*SHAPE, "run.seed=0"]))
    tokenizer.chat_template = TEMPLATE
    save_pretrained(model, tokenizer, root / "tiny")
    served = Served(root / "tiny", root)
    served.start()
    yield served
    served.stop()


def test_a_judge_term_on_a_vllm_server_scores_or_counts_every_row(judge_server, tmp_path):
    from rlvr.config import JudgeConfig, RewardConfig
    from rlvr.data import Example
    from rlvr.reward import build_reward_terms, score_completions
    from rlvr.verifiers.judge import ReplyCache

    cfg = RewardConfig(functions=["boxed_math", "judge"], weights=[1.0, 0.5])
    cfg.judge = JudgeConfig(url=judge_server.url + "/v1", model=str(judge_server.model_dir), rubric="{prompt}{completion} score 0-9:",
                            scale=[0.0, 9.0], max_tokens=6, timeout_s=120.0, retries=1, cache=str(tmp_path / "replies.jsonl"))
    cfg.validate()
    terms = build_reward_terms(cfg)  # the preflight reaches the server
    examples = [Example("3+4=", "7"), Example("9-1=", "8"), Example("2*3=", "6"), Example("5+5=", "10")]
    completions = ["\\boxed{7}", "\\boxed{9}", "6", "\\boxed{10}"]
    scores = score_completions(terms, cfg, [e.prompt for e in examples], completions, examples, [4] * 4, 8)
    m = scores.metrics()
    print(f"\njudge on vLLM: {scores.terms['judge'].values} ({m['reward/judge/malformed']} malformed; first: {scores.terms['judge'].first_error})")
    assert m["reward/judge/calls"] == 4 and m["reward/judge/timeouts"] == 0 and m["reward/judge/retries"] == 0
    assert m["reward/judge/errors"] == m["reward/judge/malformed"]  # every failure is an unreadable reply, none a failed request
    strict = scores.terms["boxed_math"].values
    for judged, verdict, total in zip(scores.terms["judge"].values, strict, scores.total_B.tolist()):
        if judged is None:  # a reply the parser could not read: the row is missing, not boxed_math's score plus 0
            assert math.isnan(total)
        else:
            assert 0.0 <= judged <= 1.0 and total == pytest.approx(verdict + 0.5 * judged)
    # every request was answered with a chat completion: its text is in the cache, read or not
    replies = ReplyCache(cfg.judge.cache).replies
    assert len(replies) == 4 and all(isinstance(r, str) for r in replies.values())
