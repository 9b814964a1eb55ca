"""Thinking: chat-template variables, stop strings / top-k / min-p, the thinking and fused formats
of the lab task, mode_format, evaluation of thinking blocks, and budget forcing (cut at exactly B
thinking tokens, never in the answer, per-row budgets in one batch equal to one at a time)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import SOLVABLE
from rlvr.config import ConfigError, DataConfig, TaskConfig, TinyModelConfig, load_config, to_toml
from rlvr.data import format_prompt
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import decode_completions, encode_prompts, generate, sample_next
from rlvr.rollout.controls import ThinkingBudget, encode_stops, token_ids
from rlvr.sampling import Sampling
from rlvr.stages.evaluate import thinking_block
from rlvr.tasks.arithmetic import NO_THINK, THINK, make_splits, sft_targets
from rlvr.verifiers.format import mode_format, think_format
from warm_cli import run_rlvr

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ["static", "transformers"]


# ----------------------------------------------------------------------------- chat templates

QWEN3_STYLE = (  # as Qwen3's template does: enable_thinking = false puts an empty thinking block after the assistant tag
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)


def test_template_variables_reach_a_template_given_by_file(tmp_path):
    path = tmp_path / "qwen3.jinja"
    path.write_text(QWEN3_STYLE)
    tokenizer = build_char_tokenizer()  # has no template of its own: the file is used
    on = DataConfig(chat_template=str(path), chat_template_kwargs={"enable_thinking": True}, use_chat_template=True)
    off = DataConfig(chat_template=str(path), chat_template_kwargs={"enable_thinking": False}, use_chat_template=True)
    unset = DataConfig(chat_template=str(path), use_chat_template=True)
    assert format_prompt(tokenizer, "2+2=", on) == "<|user|>2+2=\n<|assistant|>"
    assert format_prompt(tokenizer, "2+2=", off) == "<|user|>2+2=\n<|assistant|><think>\n\n</think>\n\n"
    assert format_prompt(tokenizer, "2+2=", unset) == format_prompt(tokenizer, "2+2=", on)
    assert format_prompt(tokenizer, "2+2=", DataConfig(use_chat_template=False, chat_template=str(path))) == "2+2="


def test_template_variables_reach_the_tokenizers_own_template():
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = QWEN3_STYLE
    assert format_prompt(tokenizer, "1=", DataConfig(chat_template_kwargs={"enable_thinking": False}, use_chat_template=True)).endswith(
        "<think>\n\n</think>\n\n")


def test_template_variables_are_a_table_of_scalars_and_round_trip(tmp_path):
    cfg = load_config(overrides=['data.chat_template_kwargs={enable_thinking = false, effort = "high", stops = ["a", "b"]}'])
    assert cfg.data.chat_template_kwargs == {"enable_thinking": False, "effort": "high", "stops": ["a", "b"]}
    path = tmp_path / "c.toml"
    path.write_text(to_toml(cfg))
    assert load_config(path).data.chat_template_kwargs == cfg.data.chat_template_kwargs
    for bad, why in [("data.chat_template_kwargs=3", "expected a table"), ("data.chat_template_kwargs={a = {b = 1}}", "data.chat_template_kwargs.a"),
                     ("data.chat_template_kwargs={tokenize = true}", "set by rlvr itself"), ("data.chat_template=nope.jinja", "not a file")]:
        with pytest.raises(ConfigError, match=why):
            load_config(overrides=[bad])


# ----------------------------------------------------------------------------- generation controls


def test_top_k_and_min_p_keep_only_the_likely_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    g = torch.Generator().manual_seed(0)
    assert {int(sample_next(logits, 1.0, 1.0, g, top_k=2)) for _ in range(300)} == {0, 1}
    assert {int(sample_next(logits, 1.0, 1.0, g, min_p=0.5)) for _ in range(300)} == {0, 1}  # 0.15 < 0.5 * 0.5
    assert {int(sample_next(logits, 1.0, 1.0, g, min_p=0.25)) for _ in range(600)} == {0, 1, 2}
    assert {int(sample_next(logits, 1.0, 1.0, g, top_k=1)) for _ in range(50)} == {0}
    assert len({int(sample_next(logits, 1.0, 1.0, g)) for _ in range(600)}) == 4  # off: every token


@pytest.fixture(scope="module")
def thinker():
    tokenizer = build_char_tokenizer(thinking=True)
    model = build_tiny_model(tokenizer, TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64), 3)
    return model.eval(), tokenizer


@pytest.mark.parametrize("engine", ENGINES)
def test_a_stop_string_ends_a_row_and_stays_in_it(thinker, engine):
    model, tokenizer = thinker
    ids, mask = encode_prompts(tokenizer, ["1+2=", "3*3-1=", "7=", "9-8*7+6="], torch.device("cpu"))
    # sampled, with every row kept in the batch to the end: each step draws for all rows, so a row that
    # stops early leaves the others' draws as they were
    kw = dict(eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, compact=False, engine=engine)
    free = generate(model, ids, mask, Sampling(max_new_tokens=30), generator=torch.Generator().manual_seed(0), **kw)
    rows = [free.completion_ids_BT[r, : int(free.lengths_B[r])].tolist() for r in range(4)]
    stop_id = next(t for row in rows for t in row[2:] if t not in row[:1])  # a token some row writes after its first
    stop = tokenizer.convert_ids_to_tokens(stop_id)
    stopped = generate(model, ids, mask, Sampling(max_new_tokens=30, stop=(stop,)), generator=torch.Generator().manual_seed(0),
                       stops=encode_stops(tokenizer, [stop]), **kw)
    for r, row in enumerate(rows):
        got = stopped.completion_ids_BT[r, : int(stopped.lengths_B[r])].tolist()
        if stop_id in row:
            assert got == row[: row.index(stop_id) + 1] and not bool(stopped.truncated_B[r])  # up to and including the stop
        else:
            assert got == row
        assert stopped.completion_mask_BT[r].sum() == len(got)
    assert any(stop_id in row for row in rows)


@pytest.mark.parametrize("engine", ENGINES)
def test_stop_strings_of_several_tokens_with_compaction_end_every_row_at_its_first_stop(thinker, engine):
    model, tokenizer = thinker
    ids, mask = encode_prompts(tokenizer, ["1+2=", "3*3-1=", "7=", "9-8*7+6="], torch.device("cpu"))
    kw = dict(eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, group_size=8, engine=engine)
    stops = ["1", "23", "ab"]  # one token, and two of two
    out = generate(model, ids, mask, Sampling(max_new_tokens=40, stop=stops), generator=torch.Generator().manual_seed(1),
                   stops=encode_stops(tokenizer, stops), **kw)
    texts = decode_completions(tokenizer, out)
    ended = 0
    for text, truncated in zip(texts, out.truncated_B.tolist()):
        first = min((text.find(s) + len(s) for s in stops if s in text), default=None)
        if first is None:
            continue
        assert text[:first] == text and not truncated  # it ends right after its first stop string
        ended += 1
    assert ended > 0


# ----------------------------------------------------------------------------- budget forcing


def budget_for(tokenizer, budgets, opened=True, forced="</think>"):
    return ThinkingBudget(token_ids(tokenizer, "<think>"), token_ids(tokenizer, "</think>"), token_ids(tokenizer, forced),
                          torch.tensor(budgets), torch.tensor([opened] * len(budgets)))


def decode_with_budgets(model, tokenizer, prompts, budgets, engine, forced="</think>"):
    ids, mask = encode_prompts(tokenizer, prompts, torch.device("cpu"))
    return generate(model, ids, mask, Sampling(max_new_tokens=24, greedy=True), eos_id=tokenizer.eos_token_id,
                    pad_id=tokenizer.pad_token_id, engine=engine, thinking=budget_for(tokenizer, budgets, forced=forced))


PROMPTS = ["1+2=<think>", "9-8*7+6=<think>", "3=<think>", "4*4-2+1=<think>", "5-5=<think>", "7*2=<think>"]
BUDGETS = [0, 1, 3, 5, 8, -1]


@pytest.mark.parametrize("engine", ENGINES)
def test_budget_forcing_cuts_at_exactly_b_thinking_tokens_and_never_in_the_answer(thinker, engine):
    model, tokenizer = thinker
    close = tokenizer.convert_tokens_to_ids("</think>")
    free = decode_with_budgets(model, tokenizer, PROMPTS, [-1] * len(PROMPTS), engine)
    out = decode_with_budgets(model, tokenizer, PROMPTS, BUDGETS, engine)
    for row, budget in enumerate(BUDGETS):
        free_ids = free.completion_ids_BT[row, : int(free.lengths_B[row])].tolist()
        ids = out.completion_ids_BT[row, : int(out.lengths_B[row])].tolist()
        forced = out.forced_BT[row, : len(ids)].tolist()
        natural = free_ids.index(close) if close in free_ids else len(free_ids)  # thinking tokens the model writes unforced
        if budget < 0 or budget > natural:
            assert ids == free_ids and not any(forced)  # a budget it does not reach changes nothing
        else:
            assert ids[:budget] == free_ids[:budget]  # the same thoughts, up to the budget
            assert ids[budget] == close and forced == [i == budget for i in range(len(ids))]  # cut after exactly B, once; the answer is its own
    assert any(b >= 0 and out.forced_BT[r].any() for r, b in enumerate(BUDGETS))  # some rows were cut: the test is not vacuous


@pytest.mark.parametrize("engine", ENGINES)
def test_per_row_budgets_in_one_batch_equal_one_row_at_a_time(thinker, engine):
    model, tokenizer = thinker
    batch = decode_with_budgets(model, tokenizer, PROMPTS, BUDGETS, engine, forced="\n</think>\\boxed{")
    for row, (prompt, budget) in enumerate(zip(PROMPTS, BUDGETS)):
        alone = decode_with_budgets(model, tokenizer, [prompt], [budget], engine, forced="\n</think>\\boxed{")
        n = int(alone.lengths_B[0])
        assert batch.completion_ids_BT[row, :n].tolist() == alone.completion_ids_BT[0, :n].tolist() and int(batch.lengths_B[row]) == n
        assert batch.forced_BT[row, :n].tolist() == alone.forced_BT[0, :n].tolist()


def run_script(tokenizer, script: list[str], budget: int, opened: bool, forced: str = "</think>") -> tuple[list[str], list[bool]]:
    """The budget's steering on a scripted sampler (one row): at each step the script's next token is
    what the model 'sampled'; returns the tokens written and which were forced."""
    tb = budget_for(tokenizer, [budget], opened=opened, forced=forced)
    ids = [tokenizer.convert_tokens_to_ids(t) for t in script]
    tokens_BT, rows_A = torch.zeros((1, len(ids)), dtype=torch.long), torch.tensor([0])
    for t, sampled in enumerate(ids):
        next_A, forced_A = tb.steer(torch.tensor([sampled]), rows_A, t, len(ids))
        tokens_BT[0, t] = next_A[0]
        tb.observe(tokens_BT, rows_A, t, torch.tensor([True]), forced_A)
    return tokenizer.convert_ids_to_tokens(tokens_BT[0].tolist()), tb.forced_BT[0].tolist()


def test_a_block_the_completion_opens_is_counted_from_its_tag_and_the_answer_is_left_alone(thinker):
    _, tokenizer = thinker
    script = ["a", "b", "<think>", "x", "y", "z", "w", "</think>", "c", "<think>", "d"]
    written, forced = run_script(tokenizer, script, budget=2, opened=False)
    # two thoughts (x y), then the close is forced in place of z; what follows is the model's own
    assert written[:6] == ["a", "b", "<think>", "x", "y", "</think>"]
    assert written[6:9] == ["w", "</think>", "c"]  # after the block: not thoughts, nothing forced, whatever the tokens are
    # a second block after the budget is spent is closed at once
    assert written[9:] == ["<think>", "</think>"]
    assert [i for i, f in enumerate(forced) if f] == [5, 10]
    assert run_script(tokenizer, script, budget=10, opened=False) == (script, [False] * len(script))  # never reached


def test_a_closing_tag_of_several_tokens_the_model_is_writing_is_never_cut():
    tokenizer = build_char_tokenizer()  # no tag tokens: "</think>" is 8 characters, 8 tokens
    tags = list("</think>")
    script = ["a", "b", "c", *tags, "\\boxed{", "1", "}"]
    for budget in range(3, 3 + len(tags) + 2):  # from exactly the natural length to past the tag
        written, forced = run_script(tokenizer, script, budget=budget, opened=True)
        if budget == 3:
            assert written == ["a", "b", "c", *tags, "\\boxed{", "1", "}"] and forced[3:11] == [True] * 8  # cut at 3: the tag is forced
        else:
            assert written == script and not any(forced), budget  # its own tag, finished, and nothing counted past it
    written, forced = run_script(tokenizer, ["a", "<", "x", *"yzwvutsrq"], budget=3, opened=True)
    assert written[:3] == ["a", "<", "x"] and "".join(written[3:11]) == "</think>"  # a false start of the tag is thought like any other


def test_a_budget_counts_the_tokens_of_an_open_prompt_block_and_a_cue_is_forced_whole(thinker):
    _, tokenizer = thinker
    written, forced = run_script(tokenizer, ["x", "y", "z", "q", "r", "s", "t"], budget=1, opened=True, forced="!</think>\\boxed{")
    assert written[:4] == ["x", "!", "</think>", "\\boxed{"] and forced[:4] == [False, True, True, True] and not any(forced[4:])
    assert run_script(tokenizer, ["x", "y"], budget=0, opened=True)[0] == ["</think>", "y"]  # budget 0: close at once


# ----------------------------------------------------------------------------- formats, mode_format, thinking in evaluation


def test_the_fused_task_has_the_other_formats_problems_in_both_modes():
    plain_cfg = TaskConfig(num_train=300, num_eval=30)
    fused_cfg = TaskConfig(num_train=300, num_eval=30, format="fused")
    plain_train, plain_held = make_splits(plain_cfg, 0)
    train, held = make_splits(fused_cfg, 0)
    assert [e.info["expr"] for e in train] == [e.info["expr"] for e in plain_train]
    assert [e.info["expr"] for e in held] == [e.info["expr"] for e in plain_held for _ in range(2)]  # both modes side by side
    assert [e.info["mode"] for e in held] == [THINK, NO_THINK] * 30
    for e in train + held:
        assert e.prompt.endswith(" /think" if e.info["mode"] == THINK else " /no_think")
        assert mode_format(e.solution, e.answer, e.info["mode"]) == 1.0
        if e.info["mode"] == THINK:
            assert e.solution.startswith("<think>") and e.solution.endswith("</think>\\boxed{" + e.answer + "}") and think_format(e.solution) == 1.0
        else:
            assert e.solution == "<think></think>\\boxed{" + e.answer + "}"
    share = sum(e.info["mode"] == THINK for e in train) / len(train)
    assert 0.4 < share < 0.6
    targets = sft_targets(train, 16, 0.0, 0, "fused")  # the flag decides, not worked_fraction
    for _ in range(64):
        e, target = next(targets)
        assert target == e.solution


def test_mode_format_asks_for_what_the_switch_says():
    think, direct = "<think>1+2=3</think>\\boxed{3}", "<think></think>\\boxed{3}"
    assert mode_format(think, "3", "think") == 1.0 and mode_format(direct, "3", "think") == 0.0
    assert mode_format(direct, "3", "no_think") == 1.0 and mode_format(think, "3", "no_think") == 0.0
    for bad in ("\\boxed{3}", "<think></think>", "<think></think><think></think>\\boxed{3}", " <think>\n</think> "):
        assert mode_format(bad, "3", "no_think") == 0.0
    assert mode_format(think, "3", "other") is None


@pytest.mark.parametrize(
    "completion, block",
    [
        ("<think>7+6=13</think>\\boxed{13}", "7+6=13"),
        ("  <think>a</think> b", "a"),
        ("<think></think>\\boxed{13}", None),  # empty: a direct answer, not thinking
        ("<think>a</think>", None),  # no answer after it
        ("<think>a", None),  # never closed
        ("x<think>a</think>b", None),  # text before the block
        ("<think>a</think>b<think>c</think>d", None),  # two blocks
        ("a</think>b", None),
    ],
)
def test_a_thinking_block_is_well_formed_only_as_think_format_says(completion, block):
    assert thinking_block(completion, "<think>", "</think>") == block
    assert think_format(completion) == (1.0 if block is not None else 0.0)


def test_an_open_prompt_block_counts_as_opened():
    assert thinking_block("2+2=4</think>\\boxed{4}", "<think>", "</think>", opened=True) == "2+2=4"
    assert thinking_block("<think>2</think>\\boxed{4}", "<think>", "</think>", opened=True) is None


@pytest.fixture(scope="module")
def think_run(tmp_path_factory):
    """A finished toy lab run in the thinking format, rewarded for correctness and think_format."""
    from rlvr.metrics import Reporter
    from rlvr.pipeline import run

    run_dir = tmp_path_factory.mktemp("think") / "run"
    cfg = load_config(overrides=SOLVABLE + ["task.format=think", 'reward.functions=["boxed_math","think_format"]', "reward.correctness=boxed_math",
                                            f"run.output_dir={json.dumps(str(run_dir))}", "eval.max_new_tokens=16", "rollout.max_new_tokens=16"])
    run(cfg, Reporter(enabled=False), "lab")
    return run_dir


def test_evaluation_counts_malformed_blocks_and_measures_thinking(think_run):
    summary = json.loads((think_run / "summary.json").read_text())["eval"]["after_rl"]
    rows = [json.loads(line) for line in (think_run / "eval_after_rl.jsonl").read_text().splitlines()]
    well = [thinking_block(r["completion"], "<think>", "</think>") for r in rows]
    assert summary["well_formed"] == pytest.approx(sum(b is not None for b in well) / len(rows))
    assert summary["terms"]["think_format"]["greedy"] == pytest.approx(sum(think_format(r["completion"]) for r in rows) / len(rows))
    assert all(r["thinking"] == b for r, b in zip(rows, well))
    closed = [b for b in well if b is not None]
    if closed:
        from rlvr.models import load_tokenizer

        tok = load_tokenizer(str(think_run / "model"))
        assert summary["thinking_length"] == pytest.approx(sum(len(tok.encode(b, add_special_tokens=False)) for b in closed) / len(closed))


def rlvr(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    return run_rlvr(*args, env=env, cwd=ROOT)


def test_rlvr_eval_against_the_thinking_budget(think_run, tmp_path):
    out = tmp_path / "budget"
    done = rlvr("eval", str(think_run), "--thinking-budget", "0,2,4,64", "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    budgets = summary["budgets"]
    assert list(budgets) == ["none", "0", "2", "4", "64"]
    for name in ("0", "2", "4"):
        assert budgets[name]["budget"] == int(name)
        assert budgets[name]["thinking_length"] is None or budgets[name]["thinking_length"] <= int(name)
    assert budgets["64"]["accuracy"] == budgets["none"]["accuracy"]  # more budget than the model thinks: nothing changes
    assert (out / "thinking_budget.png").stat().st_size > 0 and (out / "eval_budget_2.jsonl").is_file()
    assert rlvr("eval", str(think_run), "--thinking-budget", "-1", "--out", str(tmp_path / "x")).returncode == 2
    mixed = rlvr("eval", str(think_run), "--thinking-budget", "2", "--compare", str(think_run), "--out", str(tmp_path / "y"))
    assert mixed.returncode == 2 and "--compare" in mixed.stderr


def test_the_forced_text_must_close_the_block():
    with pytest.raises(ConfigError, match="thinking.forced"):
        load_config(overrides=['thinking.forced="Now answer."'])
    assert load_config(overrides=['thinking.forced="Time is up.\\n</think>\\n"']).thinking.forced.endswith("</think>\n")


def test_sampled_evaluation_keeps_every_sample_within_the_budget(think_run):
    from rlvr.metrics import PhaseBar
    from rlvr.reward import RewardTerm
    from rlvr.sources import resolve_model
    from rlvr.stages.evaluate import evaluate
    from rlvr.verifiers.math import boxed_math

    source = resolve_model(str(think_run))
    model, tokenizer = source.load()
    cfg = load_config(overrides=SOLVABLE + ["task.format=think", "eval.samples=4", "thinking.budget=1", "eval.max_new_tokens=16"])
    _, held_out = make_splits(cfg.task, cfg.run.seed)
    term = RewardTerm("boxed_math", 1.0, boxed_math, batched=False, correctness=True)
    result = evaluate(model, tokenizer, held_out, cfg.data, cfg.eval, term, PhaseBar(None, None), cfg.eval.sampling(cfg.rollout.stop, cfg.thinking),
                      thinking=cfg.thinking)
    for row in result.sampled_rows + result.samples:
        block = thinking_block(row["completion"], "<think>", "</think>")
        assert block is None or len(tokenizer.encode(block, add_special_tokens=False)) <= 1
    assert result.budget == 1 and any(thinking_block(r["completion"], "<think>", "</think>") for r in result.sampled_rows)
