"""reward.functions = ["judge"]: an LLM judge over an OpenAI-compatible endpoint (rlvr/verifiers/judge.py).

A fake judge server runs in a thread (http.server on 127.0.0.1, a free port) and answers
/v1/chat/completions by what the completion in the rendered rubric asks for: `say: <text>` replies
<text>, SLOW answers after the client's timeout (2.5 s; no other reply takes 1 s, even on a loaded
machine), BADJSON answers 200 with something that is not JSON, FLAKY fails with a 500 and RATED
with a 429 the first time they are asked, REFUSE gets a 400, WAIT holds the request long enough
for the server to count how many are in flight. What users depend on: the scores and the exact text
the judge saw; a failure is a counted missing reward and never a 0; the cache answers repeats,
within a run and after it; requests run `concurrency` at a time; retries only where a retry can help.
"""

from __future__ import annotations

import json
import math
import pickle
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from rlvr.config import ConfigError, JudgeConfig, RewardConfig, load_config, save_config
from rlvr.data import Example
from rlvr.reward import Scores, build_reward_terms, score_completions
from rlvr.verifiers import judge as judge_module
from rlvr.verifiers.contract import resolve_reward
from rlvr.verifiers.judge import Judge, ReplyCache, number, score_tag, yes_no

RUBRIC = "Question: {prompt}\nGold: {answer}\nLevel: {level}\nAnswer: {completion}\nScore it out of 10; a box looks like \\boxed{{}}."


class FakeJudge(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.bodies: list[dict] = []  # every request's JSON body, in arrival order
        self.headers_seen: list[dict] = []
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0  # WAIT requests being answered
        self.asked: dict[str, int] = {}  # FLAKY: how often each text was asked
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"

    def reset(self) -> None:
        with self.lock:
            self.bodies.clear()
            self.headers_seen.clear()
            self.most_in_flight = 0


class Handler(BaseHTTPRequestHandler):
    server: FakeJudge

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # the preflight's GET /models: any answer will do
        self._send(404, b'{"error": "no such route"}')

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        s = self.server
        with s.lock:
            s.bodies.append(body)
            s.headers_seen.append(dict(self.headers))
            text = body["messages"][-1]["content"]
            waits = "WAIT" in text  # counted apart: a SLOW request of an earlier test may still be sleeping here
            s.in_flight += waits
            s.most_in_flight = max(s.most_in_flight, s.in_flight)
            s.asked[text] = s.asked.get(text, 0) + 1
            times_asked = s.asked[text]
        try:
            status, payload = self._answer(text, times_asked)
        finally:
            with s.lock:  # before the reply goes out: the client sends its next request as soon as it has one
                s.in_flight -= waits
        self._send(status, payload)

    def _answer(self, text: str, times_asked: int) -> tuple[int, bytes]:
        if self.path != "/v1/chat/completions":
            return 404, b"{}"
        if "SLOW" in text:
            time.sleep(2.5)
        if "WAIT" in text:
            time.sleep(0.5)
        if "BADJSON" in text:
            return 200, b'{"choices": [{"message": '
        if "REFUSE" in text:
            return 400, b'{"error": "bad request"}'
        if "FLAKY" in text and times_asked == 1:
            return 500, b'{"error": "try again"}'
        if "RATED" in text and times_asked == 1:
            return 429, b'{"error": "slow down"}'
        said = re.search(r"say: (.*)", text)
        reply = said.group(1) if said else "Score: 9/10"
        message = {"role": "assistant", "content": reply}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return 200, json.dumps({"id": "x", "object": "chat.completion", "choices": [choice]}).encode()

    def _send(self, status: int, payload: bytes) -> None:
        try:
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", "0")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (SLOW)
            pass


@pytest.fixture(scope="module")
def server():
    fake = FakeJudge()
    thread = threading.Thread(target=fake.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.shutdown()
    fake.server_close()


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch, server):
    """A proxy from the environment has no business between the test and its server on 127.0.0.1."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    server.reset()


def settings(server, **kw) -> JudgeConfig:
    base = dict(url=server.url, model="judge-7b", rubric=RUBRIC, parser="number", scale=[0.0, 10.0], timeout_s=5.0, retries=0)
    return JudgeConfig(**{**base, **kw})


def ask(judge: Judge, completions: list[str], prompts: list[str] | None = None) -> list:
    n = len(completions)
    return judge(prompts=prompts or ["What is 6*7?"] * n, completions=completions, answer=["42"] * n, level=[3] * n,
                 completion_lengths=[5] * n)


def missing(value) -> bool:
    return isinstance(value, Exception)


# ----------------------------------------------------------------------------- parsers, by hand


@pytest.mark.parametrize("reply, expected", [
    ("Score: 7/10", 7.0), ("7.5", 7.5), ("7", 7.0), ("I'd give it 3 out of 5.", 3.0), ("Score: 8.", 8.0),
    ("Step 1 is right, step 2 wrong. Final score: 4", 4.0),  # the last number: ask for the score last
    ("-2", -2.0), (".5", 0.5), ("10/10", 10.0), ("gpt4 says nothing", None), ("", None), ("no score here", None),
])
def test_the_number_parser(reply, expected):
    assert number(reply) == expected


@pytest.mark.parametrize("reply, expected", [
    ("yes", 1.0), ("Yes", 1.0), ("YES.", 1.0), ("No.", 0.0), ("no", 0.0), ("**Yes**, the answer is right; no errors.", 1.0),
    ("The steps check out. Verdict: yes", 1.0), ("It is wrong, so: No", 0.0), ("nothing", None), ("", None), ("Not sure.", None),
])
def test_the_yes_no_parser(reply, expected):
    assert yes_no(reply) == expected


@pytest.mark.parametrize("reply, expected", [
    ("<score>0.8</score>", 0.8), ("Good. <SCORE> 7 </SCORE>", 7.0), ("<score>2</score> on second thought <score>9</score>", 9.0),
    ("<score>high</score>", None), ("<score>7/10</score>", None), ("score: 7", None), ("", None),
])
def test_the_score_tag_parser(reply, expected):
    assert score_tag(reply) == expected


# ----------------------------------------------------------------------------- scores and what the server saw


def test_scores_and_the_rubric_the_server_received(server):
    judge = Judge(settings(server, max_tokens=64))
    values = ask(judge, ["say: Score: 7/10", "say: 10", "say: I'd say 2.5 out of 10."], prompts=["What is 6*7?", "Q2", "Q3"])
    assert values == pytest.approx([0.7, 1.0, 0.25])
    first = next(b for b in server.bodies if "Score: 7/10" in b["messages"][0]["content"])
    assert first["messages"] == [{"role": "user", "content": (
        "Question: What is 6*7?\nGold: 42\nLevel: 3\nAnswer: say: Score: 7/10\nScore it out of 10; a box looks like \\boxed{}.")}]
    assert (first["model"], first["max_tokens"], first["temperature"]) == ("judge-7b", 64, 0.0)
    assert judge.take_counts() == {"cache_hits": 0, "calls": 3, "retries": 0, "malformed": 0}
    assert judge.take_counts() == {"cache_hits": 0, "calls": 0, "retries": 0, "malformed": 0}  # a take resets them


def test_chat_prompts_and_completions_are_read_as_their_messages(server):
    judge = Judge(settings(server, rubric="{prompt} || {completion}"))
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "6*7?"}]
    (value,) = judge(prompts=[prompt], completions=[[{"role": "assistant", "content": "say: 6"}]], answer=["42"])
    assert value == pytest.approx(0.6)
    assert server.bodies[0]["messages"][0]["content"] == "Be brief.\n\n6*7? || say: 6"


def test_a_batchs_identical_rows_are_asked_once(server):
    judge = Judge(settings(server))
    assert ask(judge, ["say: 3"] * 4 + ["say: 5"]) == pytest.approx([0.3] * 4 + [0.5])
    assert len(server.bodies) == 2
    assert judge.take_counts() == {"cache_hits": 3, "calls": 2, "retries": 0, "malformed": 0}


def test_the_api_key_travels_as_a_bearer_token_and_never_in_the_config(server, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sk-test-123")
    judge = Judge(settings(server, api_key_env="JUDGE_KEY"))
    judge.preflight()
    ask(judge, ["say: 1"])
    assert server.headers_seen[-1]["Authorization"] == "Bearer sk-test-123"
    monkeypatch.delenv("JUDGE_KEY")
    with pytest.raises(ValueError, match=r"reward.judge.api_key_env: \$JUDGE_KEY is not set"):
        judge.preflight()
    with pytest.raises(ConfigError, match="reward.judge.api_key_env: 'sk-live-abc'"):
        JudgeConfig(api_key_env="sk-live-abc").validate()


# ----------------------------------------------------------------------------- the cache


def test_the_cache_answers_repeats_and_outlives_the_judge(server, tmp_path):
    path = tmp_path / "judge_cache.jsonl"
    judge = Judge(settings(server, cache=str(path)))
    assert ask(judge, ["say: 4", "say: 6"]) == pytest.approx([0.4, 0.6])
    assert len(server.bodies) == 2 and judge.take_counts()["calls"] == 2
    assert ask(judge, ["say: 6", "say: 4"]) == pytest.approx([0.6, 0.4])
    assert len(server.bodies) == 2  # the server saw nothing new
    assert judge.take_counts() == {"cache_hits": 2, "calls": 0, "retries": 0, "malformed": 0}
    # a new judge (a resumed run) reads the file; a line torn by a crash is skipped, and the next line starts on its own
    with open(path, "a") as f:
        f.write('{"key": "torn mid-wri')
    again = Judge(settings(server, cache=str(path)))
    assert ask(again, ["say: 4"]) == pytest.approx([0.4]) and len(server.bodies) == 2
    assert ask(again, ["say: 8"]) == pytest.approx([0.8]) and len(server.bodies) == 3
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[-1])["reply"] == "8"
    assert len(ReplyCache(str(path)).replies) == 3
    # the key is the request (model, messages, sampling), so another model or temperature asks again
    other = Judge(settings(server, cache=str(path), temperature=0.7))
    ask(other, ["say: 4"])
    assert len(server.bodies) == 4


def test_a_malformed_reply_is_not_asked_again_but_re_read_by_a_new_parser(server, tmp_path):
    """The cache keeps the reply text: a parser that can read it later scores it without a request."""
    path = str(tmp_path / "cache.jsonl")
    (value,) = ask(Judge(settings(server, cache=path, parser="score_tag", scale=[])), ["say: 7"])
    assert missing(value)
    (value,) = ask(Judge(settings(server, cache=path)), ["say: 7"])
    assert value == pytest.approx(0.7) and len(server.bodies) == 1


# ----------------------------------------------------------------------------- failures: counted, missing, never 0


def test_failures_are_counted_missing_rewards_never_zeros(server):
    judge = Judge(settings(server, timeout_s=1.0, retries=0))
    values = ask(judge, ["say: 7", "SLOW", "BADJSON", "say: I cannot judge this", "say: 12", "REFUSE"])
    assert values[0] == pytest.approx(0.7)
    assert all(missing(v) for v in values[1:])
    assert isinstance(values[1], TimeoutError) and "within 1 s" in str(values[1])
    assert "not JSON" in str(values[2]) and "cannot read a score" in str(values[3])
    assert "outside reward.judge.scale [0, 10]" in str(values[4]) and "HTTP 400" in str(values[5])
    assert judge.take_counts() == {"cache_hits": 0, "calls": 6, "retries": 0, "malformed": 3}


def test_retries_on_a_5xx_and_on_timeouts_never_on_a_4xx(server):
    judge = Judge(settings(server, retries=2), backoff_s=0.01)
    assert ask(judge, ["FLAKY one", "RATED one"]) == pytest.approx([0.9, 0.9])  # a 500 or a 429, then the answer
    assert judge.take_counts() == {"cache_hits": 0, "calls": 2, "retries": 2, "malformed": 0}
    (value,) = ask(judge, ["REFUSE"])
    assert "HTTP 400" in str(value) and judge.take_counts()["retries"] == 0
    slow = Judge(settings(server, timeout_s=0.5, retries=1), backoff_s=0.01)
    (value,) = ask(slow, ["SLOW again"])
    assert isinstance(value, TimeoutError) and "1 tries again failed too" in str(value)
    assert slow.take_counts()["retries"] == 1


def test_a_connection_failure_after_retries_is_an_error_and_the_preflight_refuses_it(server):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    judge = Judge(settings(server, url=f"http://127.0.0.1:{port}/v1", retries=1), backoff_s=0.01)
    (value,) = ask(judge, ["say: 1"])
    assert missing(value) and not isinstance(value, TimeoutError) and "ConnectionRefusedError" in str(value)
    assert judge.take_counts() == {"cache_hits": 0, "calls": 1, "retries": 1, "malformed": 0}
    with pytest.raises(ConnectionError, match=f"nothing answers at reward.judge.url = http://127.0.0.1:{port}/v1"):
        judge.preflight()


def test_requests_run_concurrency_at_a_time(server):
    judge = Judge(settings(server, concurrency=3))
    t0 = time.perf_counter()
    assert ask(judge, [f"WAIT {i} say: {i}" for i in range(6)]) == pytest.approx([i / 10 for i in range(6)])
    assert server.most_in_flight == 3  # never more; and three at once, not one after another
    assert time.perf_counter() - t0 < 6 * 0.5


# ----------------------------------------------------------------------------- through the reward terms


def judge_config(server, **judge) -> RewardConfig:
    cfg = RewardConfig(functions=["boxed_math", "judge"], weights=[1.0, 0.5])
    cfg.judge = settings(server, timeout_s=1.0, **judge)
    cfg.validate()
    return cfg


EXAMPLES = [Example("What is 6*7?", "42", level=1, info={"topic": "times"}) for _ in range(4)]


def test_end_to_end_with_boxed_math_a_failure_is_nan_and_counted(server):
    cfg = judge_config(server, rubric="{topic}: {completion}")
    terms = build_reward_terms(cfg)  # the preflight reaches the server
    completions = ["\\boxed{42} say: 8", "\\boxed{41} say: 2", "\\boxed{42} SLOW", "\\boxed{42} BADJSON"]
    s = score_completions(terms, cfg, [e.prompt for e in EXAMPLES], completions, EXAMPLES, [9] * 4, 16)
    assert s.total_B[:2].tolist() == pytest.approx([1.0 + 0.5 * 0.8, 0.0 + 0.5 * 0.2])
    assert torch.isnan(s.total_B[2:]).all()  # boxed_math scored them, but the judge failed: missing, never 1.0 + 0
    assert s.correct_B.tolist() == [1.0, 0.0, 1.0, 1.0]  # correctness stays boxed_math's
    m = s.metrics()
    assert m["reward/judge"] == pytest.approx(0.5) and m["reward/judge/missing"] == 2
    assert (m["reward/judge/errors"], m["reward/judge/timeouts"]) == (1, 1)
    assert {k: m[f"reward/judge/{k}"] for k in ("cache_hits", "calls", "retries", "malformed")} == \
        {"cache_hits": 0, "calls": 4, "retries": 0, "malformed": 1}
    assert "times: \\boxed{42} say: 8" in {b["messages"][0]["content"] for b in server.bodies}
    assert "reward/boxed_math/calls" not in m  # only a term that counts something logs counters
    # a step's rounds: the counters add up
    again = score_completions(terms, cfg, [e.prompt for e in EXAMPLES], completions[:2], EXAMPLES[:2], [9] * 2, 16)
    merged = Scores.merge([s, again]).metrics()
    assert (merged["reward/judge/calls"], merged["reward/judge/cache_hits"], merged["reward/judge/timeouts"]) == (6, 0, 1)


def test_a_judge_entry_needs_its_settings_and_says_which(server, tmp_path):
    with pytest.raises(ConfigError, match=r"^reward.judge.url: is needed by reward.functions\[1\] = 'judge'"):
        load_config(overrides=['reward.functions=["boxed_math", "judge"]'])
    with pytest.raises(ConfigError, match=r"^reward.judge.rubric: is needed by reward.functions\[0\]"):
        load_config(overrides=["reward.functions=judge", f"reward.judge.url={server.url}", "reward.judge.model=m"])
    with pytest.raises(ConfigError, match=r"reward.judge.scale: \[3.0\]"):
        load_config(overrides=["reward.judge.scale=[3]"])
    with pytest.raises(ConfigError, match=r"reward.judge.parser: 'regex' is neither a built-in parser"):
        load_config(overrides=["reward.judge.parser=regex"])
    for rubric, why in [("Rate {completion} {}", r"'\{\}' at character 18 is no placeholder"),
                        ("Rate {completion.text}", "is no placeholder"), ("Rate it {prompt}", "never shows the judge the completion"),
                        ("missing_rubric.txt", "neither a template .* nor a file that can be read")]:
        with pytest.raises(ConfigError, match=f"^reward.judge.rubric: .*{why}"):
            build_reward_terms(judge_config(server, rubric=rubric))
    with pytest.raises(ConfigError, match="reward.judge.parser: cannot import 'nosuchmodule:f'"):
        build_reward_terms(judge_config(server, parser="nosuchmodule:f"))
    with pytest.raises(ConfigError, match="reward.judge.url: 'localhost:8000' is not an http"):
        build_reward_terms(judge_config(server, url="localhost:8000"))


def test_a_placeholder_no_data_row_has_fails_the_batch_naming_it(server):
    cfg = judge_config(server, rubric="{difficulty}: {completion}")
    terms = build_reward_terms(cfg)
    s = score_completions(terms, cfg, [e.prompt for e in EXAMPLES], ["\\boxed{42}"] * 4, EXAMPLES, [9] * 4, 16)
    assert torch.isnan(s.total_B).all() and s.metrics()["reward/judge/errors"] == 4
    assert "reward.judge.rubric: {difficulty} is no field of the data rows (fields: answer, completion, completion_lengths, level, " \
           "prompt, solution, topic)" in s.problems()
    assert server.bodies == []


def test_a_config_file_with_a_judge_table_loads_round_trips_and_reads_its_rubric_next_to_it(server, tmp_path):
    (tmp_path / "rubric.txt").write_text("Grade {completion} against {answer}.\nReply yes or no.")
    (tmp_path / "run.toml").write_text(
        '[reward]\nfunctions = ["boxed_math", "judge"]\nweights = [1.0, 0.2]\n\n'
        f'[reward.judge]\nurl = "{server.url}"\nmodel = "judge-7b"\nrubric = "rubric.txt"\nparser = "yes_no"\nconcurrency = 2\n')
    cfg = load_config(tmp_path / "run.toml")
    assert cfg.reward.judge.rubric == str(tmp_path / "rubric.txt") and cfg.reward.judge.concurrency == 2
    save_config(cfg, tmp_path / "saved.toml")
    assert "[reward.judge]" in (tmp_path / "saved.toml").read_text()
    assert load_config(tmp_path / "saved.toml") == cfg
    assert load_config(tmp_path / "run.toml", overrides=["reward.judge.temperature=0.5"]).reward.judge.temperature == 0.5
    reward = resolve_reward("judge", config=cfg.reward)
    assert reward.batched and reward.learned and reward.name == "judge"
    assert reward.fn.template == "Grade {completion} against {answer}.\nReply yes or no."
    (value,) = reward.fn(prompts=["q"], completions=["say: Yes."], answer=["42"])
    assert value == 1.0


def test_the_judge_travels_to_a_worker_as_its_spec_and_settings(server):
    """Ray's reward workers and the audit's pool get the Reward pickled: they rebuild the same judge."""
    cfg = judge_config(server, parser="score_tag", scale=[0, 1], concurrency=5)
    reward = resolve_reward("judge", config=cfg)
    copy = pickle.loads(pickle.dumps(reward))
    assert copy.fn is not reward.fn and copy.fn.settings == reward.fn.settings and copy.learned
    # the pool's protocol: one row, a batch of one; a failure raises (the pool counts it)
    from rlvr.verifiers.contract import Item

    assert copy("say: <score>0.25</score>", Item("42", {"level": 1, "topic": "t"}, "q")) == 0.25
    with pytest.raises(ValueError, match="MalformedReply"):
        copy("say: 0.25", Item("42", {"level": 1}, "q"))


def test_the_audit_takes_the_judge_settings_from_a_config(server, tmp_path):
    from rlvr.audit import replay_samples

    rows = [{"step": 1, "prompt": "6*7?", "completion": c, "answer": "42"} for c in ("\\boxed{42} say: 10", "\\boxed{41} say: 10")]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = judge_config(server, rubric="{prompt} (gold: {answer}) {completion}")  # a logged sample has no level
    total, disagree = replay_samples("judge", tmp_path, config=cfg)
    assert total == 2 and [d["completion"] for d in disagree] == ["\\boxed{41} say: 10"]  # the judge rewards the wrong answer
    with pytest.raises(ConfigError, match="reward.judge.url: is needed by audit-reward SPEC = 'judge'.*--config"):
        replay_samples("judge", tmp_path)


@pytest.mark.integration  # the CLI, and the audit's worker processes
def test_audit_reward_takes_the_judge_from_a_config_file(server, tmp_path):
    """`rlvr audit-reward judge --config FILE`: each probe a batch of one, in the pool's workers, through the
    judge the file sets. This fake judge rewards everything, as a lenient judge would: the audit says so."""
    from typer.testing import CliRunner

    from rlvr.cli import app

    (tmp_path / "judge.toml").write_text(f'[reward.judge]\nurl = "{server.url}"\nmodel = "judge-7b"\nrubric = "Rate: {{completion}}"\n'
                                         'scale = [0, 10]\n')
    out = CliRunner().invoke(app, ["audit-reward", "judge", "--config", str(tmp_path / "judge.toml"), "--domain", "format",
                                   "--workers", "1"])
    assert out.exit_code == 1, out.output
    assert "controls rewarded: 1/1" in out.output and "missing_block: " in out.output and "(scored 0.9)" in out.output
    assert len(server.bodies) == 8 and all(b["messages"][0]["content"].startswith("Rate: ") for b in server.bodies)
    out = CliRunner().invoke(app, ["audit-reward", "judge", "--domain", "format", "--workers", "1"])
    assert out.exit_code == 2 and "reward.judge.url: is needed by audit-reward = 'judge'" in out.output


def test_module_doctest_examples_hold():
    import doctest

    assert doctest.testmod(judge_module).failed == 0


def test_a_server_that_stops_answering_costs_one_waves_timeouts_not_the_batchs(server):
    """After `concurrency` rows timed out on every try, the rest of the batch is not asked: missing, counted as timeouts."""
    judge = Judge(settings(server, timeout_s=0.3, retries=0, concurrency=2))
    t0 = time.perf_counter()
    values = ask(judge, [f"SLOW {i}" for i in range(8)])
    assert all(isinstance(v, TimeoutError) for v in values)
    assert sum("not asked" in str(v) for v in values) >= 4
    assert time.perf_counter() - t0 < 8 * 0.3  # not one timeout per row


def test_a_cache_that_cannot_be_written_keeps_the_replies_in_memory(server, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    judge = Judge(settings(server, cache=str(blocker / "cache.jsonl")))  # a directory under a file: every append fails
    with pytest.warns(UserWarning, match="kept in memory"):
        assert ask(judge, ["say: 6"]) == [pytest.approx(0.6)]
    server.reset()
    assert ask(judge, ["say: 6"]) == [pytest.approx(0.6)] and not server.bodies  # answered from memory
