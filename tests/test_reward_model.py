"""Sequence-classification reward models as reward terms (`reward_model:<where>`): resolution through
the reward contract (directory, hub id, run), scoring (padding and micro-batch size never change a
score, chat templates, truncation), refusals naming the entry, the learned-term marker and the
monitor's hack/<term>/wrong_over_right; then a tiny training run, `rlvr eval` and `rlvr audit-reward`
with a reward model the tests write themselves."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForSequenceClassification

from rlvr.config import ConfigError, RewardConfig, load_config, to_toml
from rlvr.models import build_char_tokenizer, build_tiny_model, save_pretrained
from rlvr.monitor import learned_term_metrics, wrong_over_right
from rlvr.reward import Scores, TermScores, build_reward_terms, correctness_name
from rlvr.verifiers.contract import resolve_reward
from rlvr.verifiers.math import boxed_math
from rlvr.verifiers.reward_model import input_text, score_texts

CHAT_TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}<eos>{% endfor %}"
TEXTS = ["1+1=\\boxed{2}", "7*8=56", "a", "(3+4)*2=\\boxed{14} because 3+4=7 and 7*2=14", "x=5\n\n", "99-98=1"]


def has_digit(completion: str, answer: str) -> float:
    """A dense stand-in verdict for an untrained policy (right when it writes a digit), named by
    import path in the training run below, so the verifier splits groups and wrong_over_right has pairs."""
    return float(any(ch.isdigit() for ch in completion))


def write_reward_model(directory: Path, *, num_labels: int = 1, seed: int = 0, chat_template: str | None = None,
                       padding_side: str = "right", max_positions: int = 256) -> Path:
    """A tiny Qwen3 sequence classifier on the lab's character tokenizer (pad token set), saved as a user's model directory."""
    tokenizer = build_char_tokenizer()
    if chat_template:
        tokenizer.chat_template = chat_template
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=16, max_position_embeddings=max_positions, num_labels=num_labels,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = Qwen3ForSequenceClassification(config)
    with torch.no_grad():
        model.score.weight.mul_(20.0)  # scores of order 1, so that they differ between texts
    save_pretrained(model, tokenizer, directory)
    settings = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**settings, "padding_side": padding_side}))
    return directory


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory) -> Path:
    return write_reward_model(tmp_path_factory.mktemp("rm") / "rm")


@pytest.fixture(scope="module")
def rm(rm_dir):
    return resolve_reward(f"reward_model:{rm_dir}", where="reward.functions[1]")


def close(a: list[float], b: list[float], scale: float = 1e-5) -> bool:
    """Equal within 1e-5 of the scores' scale: fp32 sums in another order (batch shape, AVX-512 or not) move the last bits."""
    tolerance = scale * max(1.0, *(abs(x) for x in a + b))
    return len(a) == len(b) and all(abs(x - y) <= tolerance for x, y in zip(a, b))


# ----------------------------------------------------------------------------- scoring


def test_a_row_scores_the_same_alone_in_a_padded_batch_and_at_any_micro_batch_size(rm):
    model, tokenizer = rm.fn.loaded()
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    alone = [score_texts(model, tokenizer, [t], batch_size=1)[0] for t in TEXTS]
    # the same as the model's own forward on the unpadded row: logits[:, 0]
    ids = tokenizer(TEXTS[3], add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert close([alone[3]], [float(model(input_ids=ids).logits[0, 0])])
    assert len({round(s, 3) for s in alone}) == len(TEXTS)  # the texts really score differently
    for batch_size in (1, 2, 3, 16):
        assert close(score_texts(model, tokenizer, TEXTS, batch_size=batch_size), alone), batch_size
    # through the term, as training calls it (one TRL-batched call)
    values, errors = rm.call_batch(["" for _ in TEXTS], TEXTS, {"answer": ["0"] * len(TEXTS)})
    assert errors == [None] * len(TEXTS) and close(values, alone)


def test_a_tokenizer_that_pads_left_scores_as_one_that_pads_right(rm, tmp_path):
    left = resolve_reward(f"reward_model:{write_reward_model(tmp_path / 'left', padding_side='left')}")
    assert left.fn.loaded()[1].padding_side == "left"
    right_scores = rm.fn(prompts=[""] * len(TEXTS), completions=TEXTS)
    assert close(left.fn(prompts=[""] * len(TEXTS), completions=TEXTS), right_scores)
    alone = [left.fn(prompts=[""], completions=[t])[0] for t in TEXTS]
    assert close(alone, right_scores)


def test_chat_prompts_go_through_the_reward_models_chat_template(tmp_path, rm):
    chat = resolve_reward(f"reward_model:{write_reward_model(tmp_path / 'chat', chat_template=CHAT_TEMPLATE)}")
    model, tokenizer = chat.fn.loaded()
    prompts = [[{"role": "user", "content": "1+1="}], [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2*3="}]]
    completions = [[{"role": "assistant", "content": "\\boxed{2}"}], [{"role": "assistant", "content": "6"}]]
    assert input_text(tokenizer, prompts[0], completions[0]) == "<user>1+1=<eos><assistant>\\boxed{2}<eos>"
    expected = score_texts(model, tokenizer, ["<user>1+1=<eos><assistant>\\boxed{2}<eos>", "<system>be brief<eos><user>2*3=<eos><assistant>6<eos>"])
    assert close(chat.fn(prompts=prompts, completions=completions), expected)
    # no chat template: the messages' contents, one per line; text prompts: prompt + completion, as TRL
    plain_model, plain_tokenizer = rm.fn.loaded()
    assert input_text(plain_tokenizer, prompts[1], completions[1]) == "be brief\n2*3=\n6"
    assert close(rm.fn(prompts=prompts[1:], completions=completions[1:]), score_texts(plain_model, plain_tokenizer, ["be brief\n2*3=\n6"]))
    assert close(rm.fn(prompts=["2*3="], completions=["6"]), score_texts(plain_model, plain_tokenizer, ["2*3=6"]))


def test_a_long_row_keeps_its_last_tokens_instead_of_failing(tmp_path):
    short = write_reward_model(tmp_path / "short", max_positions=16)
    term = resolve_reward(f"reward_model:{short}")
    model, tokenizer = term.fn.loaded()
    long_text = "1+2+3+4+5+6+7+8+9=\\boxed{45}"  # 26 tokens, over the model's 16 positions
    (score,) = term.fn(prompts=[""], completions=[long_text])
    ids = tokenizer(long_text, add_special_tokens=False)["input_ids"]
    assert close([score], [float(model(input_ids=torch.tensor([ids[-16:]])).logits[0, 0])])
    capped = resolve_reward(f"reward_model:{short}", config=RewardConfig(model_max_length=5))
    assert close(capped.fn(prompts=[""], completions=[long_text]), score_texts(model, tokenizer, [tokenizer.decode(ids[-5:])]))


# ----------------------------------------------------------------------------- resolution and refusals


def test_the_entry_resolves_through_the_contract_with_its_knobs_and_pickles_as_its_spec(rm_dir):
    cfg = RewardConfig(functions=["boxed_math", f"reward_model:{rm_dir}"], weights=[1.0, 0.1], model_batch_size=3, model_max_length=64)
    cfg.validate()
    terms = build_reward_terms(cfg)
    assert [t.name for t in terms] == ["boxed_math", "reward_model"] and correctness_name(cfg) == "boxed_math"
    term = terms[1]
    assert term.batched and term.reward.learned and not terms[0].reward.learned
    assert (term.reward.fn.batch_size, term.reward.fn.max_length, term.reward.fn.source) == (3, 64, str(rm_dir))
    again = pickle.loads(pickle.dumps(term.reward))  # a worker gets the spec and the reward section, and resolves them itself
    assert again.spec == term.reward.spec and again.fn is not term.reward.fn and again.fn.batch_size == 3
    assert close(again.fn(prompts=[""] * 3, completions=TEXTS[:3]), term.reward.fn(prompts=[""] * 3, completions=TEXTS[:3]))
    assert RewardConfig(functions=[f"reward_model:{rm_dir}"], correctness="reward_model").validate() is None


def test_refusals_name_the_entry(tmp_path, rm_dir):
    two_labels = write_reward_model(tmp_path / "two", num_labels=2)
    causal = save_pretrained(build_tiny_model(build_char_tokenizer(), load_config().model.tiny, 0), build_char_tokenizer(), tmp_path / "lm")
    cases = {
        f"reward_model:{two_labels}": "num_labels = 2",
        f"reward_model:{tmp_path / 'nowhere'}": "does not exist",
        "reward_model:runs/none/such/model": "does not exist",
        f"reward_model:{causal}": "Qwen3ForCausalLM, not a sequence-classification reward model",
    }
    for spec, why in cases.items():
        with pytest.raises(ConfigError, match=r"reward\.functions\[1\]") as err:
            build_reward_terms(RewardConfig(functions=["boxed_math", spec]))
        assert why in str(err.value), (spec, str(err.value))
    for bad, key in (("reward_model:", "reward.functions"), ("reward_model:  ", "reward.functions")):
        with pytest.raises(ConfigError, match=key):
            RewardConfig(functions=["boxed_math", bad]).validate()
    for knob, value in (("model_batch_size", 0), ("model_max_length", -1), ("model_device", "tpu")):
        with pytest.raises(ConfigError, match=f"reward.{knob}"):
            RewardConfig(**{knob: value}).validate()


def test_a_hub_id_loads_from_the_hub_cache(tmp_path, monkeypatch, rm_dir, rm):
    """No hub here: the id is served from a cache laid out as huggingface_hub writes it (HF_HUB_OFFLINE is set)."""
    from huggingface_hub import constants

    snapshot = tmp_path / "hub" / "models--someone--tiny-rm" / "snapshots" / ("0" * 40)
    shutil.copytree(rm_dir, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    terms = build_reward_terms(RewardConfig(functions=["boxed_math", "reward_model:someone/tiny-rm"]))  # its preflight reads the config
    assert terms[1].reward.fn.source == "someone/tiny-rm"
    assert close(terms[1].reward.fn(prompts=[""] * 3, completions=TEXTS[:3]), rm.fn(prompts=[""] * 3, completions=TEXTS[:3]))
    with pytest.raises(ConfigError, match=r"reward\.functions\[1\] = 'reward_model:someone/absent' cannot run here"):
        build_reward_terms(RewardConfig(functions=["boxed_math", "reward_model:someone/absent"]))


def test_a_relative_model_in_a_config_file_is_read_next_to_the_file(tmp_path, rm_dir):
    shutil.copytree(rm_dir, tmp_path / "models" / "rm")
    (tmp_path / "run.toml").write_text('[reward]\nfunctions = ["boxed_math", "reward_model:models/rm"]\n')
    cfg = load_config(str(tmp_path / "run.toml"), for_training=False)
    assert cfg.reward.functions == ["boxed_math", f"reward_model:{tmp_path / 'models' / 'rm'}"]


def test_a_run_directory_names_its_model(tmp_path, rm_dir):
    run_dir = tmp_path / "rm_run"  # a run whose starting model is the reward model: runs/x@start resolves as `rlvr eval` does
    run_dir.mkdir()
    (run_dir / "config.toml").write_text(to_toml(load_config(overrides=[f"model.path={rm_dir}"], for_training=False)))
    term = resolve_reward(f"reward_model:{run_dir}@start")
    assert term.fn.source == str(rm_dir)
    with pytest.raises(ConfigError, match="@3 is one of .*checkpoints hold its causal LM policy"):
        resolve_reward(f"reward_model:{run_dir}@3", where="reward.functions[0]")


# ----------------------------------------------------------------------------- the monitor


def test_wrong_over_right_by_hand():
    # one group of 4: rows 0 and 3 wrong, 1 and 2 right. Pairs (wrong, right): (0,1) 0.9 > 0.1 -> 1; (0,2) 0.9 > 0.5 -> 1;
    # (3,1) 0.5 > 0.1 -> 1; (3,2) 0.5 = 0.5 -> 1/2. 3.5 of 4.
    assert wrong_over_right([0.0, 1.0, 1.0, 0.0], [0.9, 0.1, 0.5, 0.5]) == pytest.approx(0.875)
    # agreeing with the verifier: 0; two groups of 2, pairs within each only (across groups the learned term would disagree)
    assert wrong_over_right([0.0, 1.0, 0.0, 1.0], [5.0, 6.0, -3.0, -2.0], group_size=2) == 0.0
    assert wrong_over_right([0.0, 1.0, 0.0, 1.0], [5.0, 6.0, -3.0, -2.0]) == pytest.approx(0.25)  # one group: (0,3) 5 > -2
    # rows either term does not score are left out: (0,2) is the only pair
    assert wrong_over_right([0.0, None, 1.0, 1.0], [1.0, 9.0, 0.0, None]) == 1.0
    # partial credit: the lower verdict is the wrong one
    assert wrong_over_right([0.5, 1.0, 0.0], [2.0, 1.0, 0.0]) == pytest.approx(1 / 3)  # (0,1) 2 > 1; (2,0) 0 < 2; (2,1) 0 < 1
    # no pair: all right, all wrong, or nothing scored
    assert wrong_over_right([1.0, 1.0], [0.3, 0.2]) is None
    assert wrong_over_right([0.0, 0.0, 1.0, 1.0], [0.1, 0.2, 0.3, 0.4], group_size=2) is None
    assert wrong_over_right([], []) is None


def test_learned_term_metrics_read_the_step_scores(rm):
    def term(name, learned, correctness=False):
        return SimpleNamespace(name=name, correctness=correctness, reward=SimpleNamespace(learned=learned))

    scores = Scores(torch.zeros(4), {"boxed_math": TermScores([0.0, 1.0, 1.0, 0.0]), "reward_model": TermScores([0.9, 0.1, 0.5, 0.5]),
                                     "brevity": TermScores([0.0, 1.0, 1.0, 0.0])}, correct_B=torch.tensor([0.0, 1.0, 1.0, 0.0]))
    terms = [term("boxed_math", False, True), term("reward_model", True), term("brevity", False)]
    assert learned_term_metrics(scores, terms, 4) == {"hack/reward_model/wrong_over_right": pytest.approx(0.875)}
    # groups of 2: in (0,1) the pair (0,1) scores 1 (0.9 > 0.1), in (2,3) the pair (3,2) ties (0.5 = 0.5): 1.5 of 2
    assert learned_term_metrics(scores, terms, 2) == {"hack/reward_model/wrong_over_right": pytest.approx(0.75)}
    # the learned term judging correctness has no verifier to be compared with
    assert learned_term_metrics(scores, [term("reward_model", True, True), term("boxed_math", False)], 4) == {}


# ----------------------------------------------------------------------------- training, evaluation, audit (tiny, a few seconds)

TINY = [
    "model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.intermediate_size=64", "model.tiny.num_heads=2",
    "model.tiny.num_kv_heads=1", "task.num_train=50", "task.num_eval=8", "eval.max_new_tokens=10", "rollout.max_new_tokens=10",
    "rollout.group_size=4", "rollout.prompts_per_step=2", "train.micro_batch_size=8", "run.threads=1", "sft.steps=0", "train.steps=2",
    "train.lr=1e-3", "train.warmup_steps=1", "train.log_samples_every=1", "eval.before_rl=false", "run.report=false",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, rm_dir):
    """A 2-step RL run with reward.functions = [boxed_math, reward_model:<dir>] at weights [1.0, 0.1], and has_digit at weight 0
    as the correctness term (an untrained policy never gets boxed_math right, so the monitor would have no pairs to compare)."""
    from rlvr.metrics import Reporter
    from rlvr.pipeline import run

    run_dir = tmp_path_factory.mktemp("rm_train") / "run"
    functions = json.dumps(["boxed_math", f"reward_model:{rm_dir}", "test_reward_model:has_digit"])
    run(load_config(overrides=TINY + [f"reward.functions={functions}", "reward.weights=[1.0,0.1,0.0]", "reward.correctness=has_digit",
                                      f"run.output_dir={json.dumps(str(run_dir))}"]), Reporter(enabled=False), "train")
    return run_dir


@pytest.mark.integration
def test_training_logs_the_reward_models_scores_and_the_monitor_compares_it_with_the_verifier(trained, rm):
    from rlvr.metrics import read_jsonl_records

    model, tokenizer = rm.fn.loaded()
    records, samples = read_jsonl_records(trained / "metrics.jsonl"), read_jsonl_records(trained / "samples.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        rows = [s for s in samples if s["step"] == record["step"]]
        assert len(rows) == 8  # the whole batch (2 prompts x G = 4), in the order the terms scored it
        direct = score_texts(model, tokenizer, [r["prompt"] + r["completion"] for r in rows])
        assert close([r["reward"] for r in rows], [boxed_math(r["completion"], r["answer"]) + 0.1 * s for r, s in zip(rows, direct)])
        assert record["reward/reward_model"] == pytest.approx(sum(direct) / 8, abs=1e-5)
        assert record["reward/reward_model/missing"] == record["reward/reward_model/errors"] == 0
        verdicts = [has_digit(r["completion"], r["answer"]) for r in rows]
        expected = wrong_over_right(verdicts, direct, 4)
        got = record["hack/reward_model/wrong_over_right"]
        assert (got is None and expected is None) or got == pytest.approx(expected)
    assert any(r["hack/reward_model/wrong_over_right"] is not None for r in records)  # some group held a right and a wrong row
    assert len({round(s["reward"], 6) for s in samples}) > 4  # the model's scores vary across completions


@pytest.mark.integration
def test_rlvr_eval_reports_the_reward_models_mean(trained, rm, tmp_path):
    from rlvr.commands.evaluate import run_eval
    from rlvr.metrics import Reporter, read_jsonl_records

    summary = run_eval(str(trained), ["eval.samples=0"], Reporter(enabled=False), out=str(tmp_path / "eval"))
    rows = read_jsonl_records(tmp_path / "eval" / "eval_model.jsonl")
    model, tokenizer = rm.fn.loaded()
    direct = score_texts(model, tokenizer, [r["prompt"] + r["completion"] for r in rows])
    assert summary["models"]["model"]["terms"]["reward_model"]["greedy"] == pytest.approx(sum(direct) / len(direct), abs=1e-5)
    assert close([r["reward_model"] for r in rows], direct)


@pytest.mark.integration
def test_a_runs_policy_is_not_a_reward_model(trained):
    with pytest.raises(ConfigError, match=r"reward\.functions\[0\]: .*Qwen3ForCausalLM, not a sequence-classification"):
        resolve_reward(f"reward_model:{trained}", where="reward.functions[0]")
    with pytest.raises(ConfigError, match=r"reward\.functions\[0\]: .*checkpoints hold its causal LM policy"):
        resolve_reward(f"reward_model:{trained}@2", where="reward.functions[0]")


def test_the_audit_scores_each_probe_as_a_batch_of_one(rm):
    """What each audit worker does, in this process: the reward arrives pickled (its spec and settings), warms up (loads the
    model), and scores each probe as a batch of one; the scores are the model's own. The CLI run below spawns the workers."""
    from rlvr.audit import _NoneIsAnError, probes_for
    from rlvr.verifiers.contract import Item

    worker_side = pickle.loads(pickle.dumps(_NoneIsAnError(rm)))
    worker_side.warm_up()
    probes = probes_for("math")[:6]
    scores = [worker_side(p.completion, Item(p.answer, {"solution": p.answer, "level": None}, p.prompt)) for p in probes]
    model, tokenizer = rm.fn.loaded()
    assert close(scores, score_texts(model, tokenizer, [p.prompt + p.completion for p in probes]))


@pytest.mark.slow  # spawns a worker process (~10-20 s here); the test above is its in-process representative
@pytest.mark.integration
def test_audit_reward_runs_a_reward_model(rm_dir):
    """The audit calls the batched term one probe at a time in its worker processes (each loads the model once, in warm_up).
    A random reward model pays for hedges and wrong answers alike: the audit fails it (exit 1), and never for a bad argument (2)."""
    from typer.testing import CliRunner

    from rlvr.cli import app

    out = CliRunner().invoke(app, ["audit-reward", f"reward_model:{rm_dir}", "--workers", "1", "--timeout", "120"])
    assert out.exit_code == 1, out.output
    assert f"reward: reward_model:{rm_dir}  (batched, math probes)" in out.output
    assert "errors and timeouts" not in out.output and "false positives:" in out.output


@pytest.mark.parametrize("module", ["rlvr.verifiers.reward_model", "rlvr.monitor", "rlvr.config_paths"])
def test_module_doctest_examples_hold(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_an_empty_row_is_not_scored_and_a_long_setting_is_held_to_the_models_positions(rm):
    model, tokenizer = rm.fn.loaded()
    scores = score_texts(model, tokenizer, ["", "1+1=2"], max_length=10**6)  # above the model's 256 positions: clamped, no index error
    assert scores[0] is None and isinstance(scores[1], float)
    assert score_texts(model, tokenizer, ["9" * 600], max_length=10**6)[0] == pytest.approx(score_texts(model, tokenizer, ["9" * 600])[0])
