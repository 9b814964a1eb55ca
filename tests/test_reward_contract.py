"""The reward contract (issue 11, part 3): one resolver for training, the worker pool and the audit;
TRL's reward functions called as TRL calls them; per-item verifiers that see the row's fields;
registered verifiers from the user's own module; an explicit correctness term; preflight."""

from __future__ import annotations

import importlib
import json
import math
import shutil
import sys
import textwrap

import pytest

import rlvr.learner as learner_module
import rlvr.loop as loop
from rlvr.audit import audit_reward
from rlvr.config import ConfigError, RewardConfig, load_config
from rlvr.data import Example
from rlvr.learner import LocalLearner
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.reward import answer_check, build_reward_terms, close_reward_terms, correctness_term, score_completions
from rlvr.tasks.arithmetic import make_splits
from rlvr.verifiers.contract import is_batched, resolve_reward
from rlvr.verifiers.pool import resolve_verifier, score_all
from rlvr.verifiers.registry import VERIFIERS, register

USER_MODULE = '''
from rlvr.verifiers.registry import register

seen = []


def per_item(completion, answer):
    """The per-item function the old resolver called TRL-style: it came back missing in training."""
    return 1.0 if completion.strip().endswith(answer) else 0.0


def trl_style(prompts, completions, answer, **kwargs):
    return [1.0 if c.strip().endswith(a) else 0.0 for c, a in zip(completions, answer)]


def tagged(completion, answer, language, **rest):
    seen.append((language, sorted(rest)))
    return 1.0 if language == "fr" else 0.5


def strict(completion, answer, mode="exact"):
    return 1.0 if mode == "exact" else 0.25


def math_only(completion, answer, task):
    return None if task != "math" else (1.0 if completion == answer else 0.0)


def code_only(prompts, completions, task, **kwargs):  # written for chat-format completions, as TRL passes them
    return [None if t != "code" else float("def " in c[0]["content"]) for c, t in zip(completions, task)]


def fails_on_x(completion, answer):
    if completion == "x":
        raise RuntimeError("judge crashed")
    return None


def parity(completion, answer):
    return float(len(completion) % 2 == 0)


def always(completion, answer):
    return 1.0


@register("shout")
def shout(completion, answer):
    return 1.0 if completion == answer.upper() else 0.0
'''


@pytest.fixture
def user(tmp_path, monkeypatch):
    (tmp_path / "contract_user.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("contract_user", None)
    yield importlib.import_module("contract_user")
    VERIFIERS.pop("shout", None)
    sys.modules.pop("contract_user", None)


def rows(*answers, **fields):
    return [Example(f"q{i}", a, info=dict({k: v[i] for k, v in fields.items()})) for i, a in enumerate(answers)]


def score(cfg, completions, examples, lengths=None, **kw):
    terms = build_reward_terms(cfg)
    try:
        return score_completions(terms, cfg, [e.prompt for e in examples], completions, examples, lengths or [1] * len(completions), 8, **kw)
    finally:
        close_reward_terms(terms)


# ------------------------------------------------------------------ one resolver


@pytest.mark.parametrize("spec, batched", [("contract_user:per_item", False), ("contract_user:trl_style", True), ("boxed_math", False)])
def test_training_the_pool_and_the_audit_resolve_a_spec_the_same_way(user, spec, batched):
    assert resolve_reward(spec).batched is batched
    assert resolve_verifier(spec).batched is batched
    assert build_reward_terms(RewardConfig(functions=[spec]))[0].batched is batched
    assert audit_reward(spec, workers=1).batched is batched


@pytest.mark.parametrize("workers", [0, 1])
def test_a_per_item_function_named_by_import_path_is_scored_in_training(user, workers):
    # the bug of issue 11: it passed `rlvr audit-reward` and came back missing on every sample
    s = score(RewardConfig(functions=["contract_user:per_item"], workers=workers), ["so 2", "so 7"], rows("2", "6"))
    assert s.total_B.tolist() == [1.0, 0.0] and s.terms["per_item"].errors == 0


def _fn(text):
    namespace: dict = {}
    exec(textwrap.dedent(text), namespace)
    return namespace["f"]


@pytest.mark.parametrize("source, batched", [
    ("def f(completion, answer): ...", False),
    ("def f(c, a): ...", False),
    ("def f(completion, answer, **fields): ...", False),
    ("def f(*args): ...", False),
    ("async def f(completion, answer): ...", False),
    ("def f(prompts, completions, **kwargs): ...", True),
    ("def f(completions, solution, **kwargs): ...", True),  # trl.rewards.accuracy_reward
    ("def f(completion_ids, **kwargs): ...", True),  # trl's soft overlong punishment
    ("def f(**kwargs): ...", True),  # TRL calls by keyword only
    ("async def f(prompts, completions, **kwargs): ...", True),
    ("class F:\n    def __call__(self, completion_ids, **kwargs): ...\nf = F()", True),
    ("class F:\n    def __call__(self, completion, answer): ...\nf = F()", False),
])
def test_the_signature_decides_once(source, batched):
    assert is_batched(_fn(source)) is batched


def test_a_signature_that_is_neither_is_refused_naming_the_entry(user, tmp_path, monkeypatch):
    (tmp_path / "odd_rewards.py").write_text("def one_arg(completion):\n    return 1.0\n")
    sys.modules.pop("odd_rewards", None)
    with pytest.raises(ConfigError, match=r"reward.functions\[1\]: 'odd_rewards:one_arg' takes \(completion\): neither per item"):
        build_reward_terms(RewardConfig(functions=["boxed_math", "odd_rewards:one_arg"]))


# ------------------------------------------------------------------ TRL's own reward functions


def test_trl_think_format_reward_gets_chat_messages_when_the_prompt_was_templated():
    pytest.importorskip("trl")
    cfg = RewardConfig(functions=["trl.rewards:think_format_reward"])
    completions = ["<think>\nsteps\n</think>\n42", "42"]
    chat = score(cfg, completions, rows("42", "42"), prompt_messages=[[{"role": "user", "content": f"q{i}"}] for i in range(2)])
    assert chat.total_B.tolist() == [1.0, 0.0] and chat.terms["think_format_reward"].errors == 0
    # TRL reads completion[0]["content"]: given text (no chat template), it cannot run at all
    plain = score(cfg, completions, rows("42", "42"))
    assert plain.terms["think_format_reward"].errors == 2 and "TypeError" in plain.problems()


def test_trl_accuracy_reward_none_semantics_on_multi_task_rows(user):
    pytest.importorskip("trl")
    pytest.importorskip("math_verify")
    # math rows carry a LaTeX `solution` column; code rows none, so TRL's accuracy_reward returns
    # None there, and the code term returns None on math rows: each row is scored by its own term
    cfg = RewardConfig(functions=["trl.rewards:accuracy_reward", "contract_user:code_only"])
    examples = [
        Example("1/3?", "1/3", solution=r"\frac{1}{3}", info={"task": "math"}),
        Example("1/2?", "1/2", solution=r"\frac{1}{2}", info={"task": "math"}),
        Example("add", "{}", info={"task": "code"}),
        Example("add", "{}", info={"task": "code"}),
    ]
    completions = [r"\boxed{\frac{1}{3}}", r"\boxed{3}", "def add(a, b): return a + b", "no"]
    messages = [[{"role": "user", "content": e.prompt}] for e in examples]
    s = score(cfg, completions, examples, prompt_messages=messages)
    assert s.terms["accuracy_reward"].values == [1.0, 0.0, None, None]
    assert s.terms["code_only"].values == [None, None, 1.0, 0.0]
    assert s.total_B.tolist() == [1.0, 0.0, 1.0, 0.0]  # nothing missing: every row had its term
    assert not any(t.errors for t in s.terms.values())


def test_trl_soft_overlong_punishment_gets_completion_ids_and_agrees_with_ours(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    (tmp_path / "trl_terms.py").write_text(
        "from trl.rewards import get_soft_overlong_punishment\noverlong = get_soft_overlong_punishment(max_completion_len=8, soft_punish_cache=2)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    ids = [[5] * n for n in (5, 6, 7, 8)]  # EOS included, as TRL counts them
    lengths = [len(i) for i in ids]
    cfg = RewardConfig(functions=["trl_terms:overlong"])
    theirs = score(cfg, ["c"] * 4, rows(*"1234"), lengths, completion_ids=ids)
    ours = score(RewardConfig(functions=["think_format"], weights=[0.0], overlong_buffer_frac=0.25), ["c"] * 4, rows(*"1234"), lengths)
    # ("overlong" is the name of our own term, so TRL's is logged as overlong_0)
    assert theirs.terms["overlong_0"].values == ours.terms["overlong"].values == [0.0, 0.0, -0.5, -1.0]
    assert score(cfg, ["c"] * 4, rows(*"1234"), lengths).terms["overlong_0"].errors == 4  # without ids TRL's function cannot run


def test_dataset_columns_reach_a_batched_function_as_keywords_and_trl_names_are_not_taken_from_data(tmp_path, monkeypatch):
    (tmp_path / "columns_seen.py").write_text(textwrap.dedent('''
        calls = []
        def record(prompts, completions, **columns):
            calls.append(columns)
            return [0.0] * len(completions)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("columns_seen", None)
    examples = [Example("p0", "1", info={"prompt": "p0", "source": "a", "completion": "forged"}), Example("p1", "2", info={"difficulty": 3})]
    score(RewardConfig(functions=["columns_seen:record"]), ["x", "y"], examples, [2, 3])
    (columns,) = importlib.import_module("columns_seen").calls
    assert columns["answer"] == ["1", "2"] and columns["completion_lengths"] == [2, 3]
    assert columns["source"] == ["a", None] and columns["difficulty"] == [None, 3]
    assert not {"prompt", "completion"} & set(columns)


# ------------------------------------------------------------------ async


def test_async_functions_are_awaited_and_per_item_ones_run_concurrently(tmp_path, monkeypatch):
    (tmp_path / "async_rewards.py").write_text(textwrap.dedent('''
        import asyncio
        started = 0
        all_in = None

        async def judge(completion, answer, **fields):
            global started, all_in
            all_in = all_in or asyncio.Event()
            started += 1
            if started == fields["batch"]:
                all_in.set()
            await asyncio.wait_for(all_in.wait(), 5)  # a sequential caller would time out here
            return 1.0 if completion == answer else 0.0

        async def batched(prompts, completions, answer, **kwargs):
            await asyncio.sleep(0)
            return [1.0 if c == a else 0.0 for c, a in zip(completions, answer)]
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("async_rewards", None)
    examples = rows("1", "2", "3", batch=[3, 3, 3])
    s = score(RewardConfig(functions=["async_rewards:judge", "async_rewards:batched"]), ["1", "0", "3"], examples)
    assert s.terms["judge"].values == s.terms["batched"].values == [1.0, 0.0, 1.0]
    assert s.terms["judge"].errors == 0


# ------------------------------------------------------------------ per-item fields, gold as a JSON object


@pytest.mark.parametrize("workers", [0, 1])
def test_per_item_verifiers_see_the_rows_fields_but_never_their_settings(user, workers):
    examples = rows("1", "2", language=["fr", "en"], mode=["lenient", "lenient"])
    s = score(RewardConfig(functions=["contract_user:tagged", "contract_user:strict"], workers=workers), ["a", "b"], examples)
    assert s.terms["tagged"].values == [1.0, 0.5]
    assert s.terms["strict"].values == [1.0, 1.0]  # `mode` has a default: a setting, not a data field
    if workers == 0:
        assert user.seen == [("fr", ["level", "mode", "solution"]), ("en", ["level", "mode", "solution"])]


def test_python_codes_sandbox_setting_cannot_come_from_the_data():
    # python_code takes the row's fields (**fields: it reads entry_point, test_setup_code, ...) but
    # its settings have defaults, so none of them is ever filled from a row
    reward = resolve_reward("python_code")
    assert reward.item_kwargs({"sandbox": "none", "limits": None, "all_or_nothing": True, "entry_point": "f"}) == {"entry_point": "f"}


def test_python_code_gold_tests_as_a_json_object_in_the_data_file(tmp_path):
    from rlvr.config import DataConfig
    from rlvr.data import read_jsonl

    tests = {"asserts": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]}
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps({"prompt": "Write add.", "answer": tests}) + "\n")
    (example,) = read_jsonl(path, DataConfig(), answer_ok=answer_check(RewardConfig(functions=["python_code"])))
    program = "```python\ndef add(a, b):\n    return a + b\n```"
    if shutil.which("bwrap") is None:
        pytest.skip("scoring needs bubblewrap")
    s = score(RewardConfig(functions=["python_code"]), [program], [example])
    assert s.total_B.tolist() == [1.0]


# ------------------------------------------------------------------ None, errors and the pool


def test_an_error_makes_the_row_missing_even_where_another_term_scores_it(user):
    cfg = RewardConfig(functions=["contract_user:per_item", "contract_user:fails_on_x"])
    for workers in (0, 1):
        cfg.workers = workers
        s = score(cfg, ["x", "so 2"], rows("x", "2"))
        assert math.isnan(s.total_B[0]) and s.total_B[1] == 1.0  # row 1: fails_on_x said None, not applicable
        assert s.terms["fails_on_x"].errors == 1 and s.terms["fails_on_x"].failed == {0}


def test_the_pool_tells_a_none_from_an_error(user):
    result = score_all("contract_user:fails_on_x", ["x", "ok"], ["a", "a"], workers=1)
    assert result.scores == [None, None] and result.failed == [True, False] and result.errors == 1


# ------------------------------------------------------------------ registered verifiers from the user's module


def test_a_verifier_registered_by_the_users_module_is_usable_by_name(user):
    cfg = load_config(overrides=['reward.imports=["contract_user"]', 'reward.functions=["shout"]', "reward.workers=1"]).reward
    s = score(cfg, ["HI", "hi"], rows("hi", "hi"))  # the spawned worker imports contract_user too
    assert s.total_B.tolist() == [1.0, 0.0]
    sys.modules.pop("contract_user")
    importlib.import_module("contract_user")  # registering the same function again is harmless
    with pytest.raises(ValueError, match="'shout' is already registered to contract_user.shout"):
        register("shout")(lambda completion, answer: 1.0)


def test_an_unregistered_name_is_a_config_error_that_mentions_reward_imports():
    with pytest.raises(ConfigError, match=r"reward.functions\[0\].*'whisper'"):
        load_config(overrides=['reward.functions=["whisper"]'])
    with pytest.raises(ConfigError, match=r"reward.functions\[0\]: unknown verifier 'whisper'.*reward.imports"):
        build_reward_terms(RewardConfig(functions=["whisper"]))
    with pytest.raises(ConfigError, match=r"reward.imports\[0\]: cannot import 'no_such_pkg.rewards'"):
        build_reward_terms(RewardConfig(functions=["whisper"], imports=["no_such_pkg.rewards"]))


# ------------------------------------------------------------------ correctness


def test_the_correctness_term_is_named_not_positional():
    cfg = RewardConfig(functions=["think_format", "boxed_math"], weights=[0.1, 1.0], correctness="boxed_math")
    terms = build_reward_terms(cfg)
    assert correctness_term(terms).name == "boxed_math"
    s = score_completions(terms, cfg, ["p", "p"], ["<think>a</think> \\boxed{2}", "\\boxed{2}"], rows("2", "3"), [3, 3], 8)
    assert s.correct_B.tolist() == [1.0, 0.0] and s.total_B.tolist() == pytest.approx([1.1, 0.0])
    assert correctness_term(build_reward_terms(RewardConfig(functions=["think_format", "boxed_math"]))).name == "think_format"
    with pytest.raises(ConfigError, match=r"reward.correctness: 'boxed' is none of reward.functions"):
        load_config(overrides=['reward.functions=["think_format", "boxed_math"]', "reward.correctness=boxed"])


class Bar:
    def advance(self, info=""):
        pass


def tiny_setup(tmp_path, overrides):
    cfg = load_config(overrides=[
        "model.tiny.hidden_size=32", "model.tiny.num_layers=1", "model.tiny.intermediate_size=32", "task.num_train=50",
        "task.num_eval=8", "rollout.max_new_tokens=6", "rollout.group_size=2", "rollout.prompts_per_step=2",
        "train.micro_batch_size=4", "run.threads=1", "train.steps=1", *overrides,
    ])
    tokenizer = build_char_tokenizer()
    return cfg, tokenizer, build_tiny_model(tokenizer, cfg.model.tiny, seed=0), make_splits(cfg.task, 0)[0]


@pytest.mark.parametrize("correctness, informative", [("always", False), ("", True)])
def test_dynamic_sampling_reads_the_named_correctness_term_wherever_it_is(user, tmp_path, monkeypatch, correctness, informative):
    cfg, tok, model, train = tiny_setup(tmp_path, [
        # 2 prompts x 3 rounds of G = 4: under parity some group is mixed but for a ~1e-4 chance
        "algo.dynamic_sampling=true", "algo.max_sampling_rounds=3", "rollout.group_size=4",
        'reward.functions=["contract_user:parity", "contract_user:always"]',
        f"reward.correctness={correctness}",
    ])
    updates = []
    real_update = learner_module.rl_update
    monkeypatch.setattr(learner_module, "rl_update", lambda *a, **kw: updates.append(1) or real_update(*a, **kw))
    records = loop.rl_train(LocalLearner(model, tok, cfg), train, cfg, build_reward_terms(cfg.reward), tmp_path, Bar())
    # `always` gives every group one value: judged by it no group is informative, though the
    # parity term (first, the old positional correctness term) spreads them
    assert bool(updates) is informative
    assert (records[0]["sampling/groups_dropped"] == 6) is not informative


def test_the_loop_hands_batched_terms_chat_messages_and_completion_ids(tmp_path):
    cfg, tok, model, train = tiny_setup(tmp_path, ['data.system_prompt=Be brief.', 'data.use_chat_template=true'])
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    calls = []

    def recorder(prompts, completions, completion_ids, completion_lengths, **columns):
        calls.append((prompts, completions, completion_ids, completion_lengths, columns["answer"]))
        return [0.0] * len(completions)

    terms = build_reward_terms(cfg.reward)
    from rlvr.reward import RewardTerm

    terms.append(RewardTerm("recorder", 1.0, recorder, batched=True))
    loop.rl_train(LocalLearner(model, tok, cfg), train, cfg, terms, tmp_path, Bar())
    (prompts, completions, ids, lengths, answers) = calls[0]
    assert len(prompts) == len(completions) == len(ids) == 4
    assert all(p[0] == {"role": "system", "content": "Be brief."} and p[1]["role"] == "user" for p in prompts)
    assert all(c[0]["role"] == "assistant" and isinstance(c[0]["content"], str) for c in completions)
    assert [len(i) for i in ids] == lengths  # EOS included, padding not, as TRL passes them
    decoded = [tok.decode([t for t in i if t != tok.eos_token_id], skip_special_tokens=True) for i in ids]
    assert decoded == [c[0]["content"] for c in completions]


# ------------------------------------------------------------------ preflight


def test_python_code_without_bubblewrap_stops_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    monkeypatch.delenv("RLVR_CODE_SANDBOX", raising=False)
    with pytest.raises(ConfigError, match=r"reward.functions\[1\] = 'python_code' cannot run here: SandboxUnavailable: bubblewrap"):
        build_reward_terms(RewardConfig(functions=["think_format", "python_code"]))
