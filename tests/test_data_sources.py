"""Data as users have it: Hugging Face datasets (local parquet, saved datasets), GSM8K's '####'
answers, MATH's boxed solutions, chat-format prompts, the first N rows. No hub here: the hub path
is the same `datasets` call."""

import json

import pytest

from rlvr.config import DataConfig, load_config
from rlvr.data import DataError, Example, format_prompt, load_jsonl_splits, prompt_messages, read_answer

datasets = pytest.importorskip("datasets")

GSM8K = [
    {"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"},
    {"question": "A box holds 2 rows of 5. How many?", "answer": "2 * 5 = <<2*5=10>>10\n#### 10"},
    {"question": "Sam earns 1,200 a week for 2 weeks. Total?", "answer": "1,200 * 2 = <<1200*2=2400>>2,400\n#### 2,400"},
] * 8


def gsm8k_parquet(tmp_path, rows=GSM8K):
    path = tmp_path / "gsm8k.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return path


def hf_cfg(path, **kw) -> DataConfig:
    return DataConfig(source="hf", train_path=str(path), prompt_field="question", answer_format="gsm8k", **kw)


def test_gsm8k_answers_are_read_after_the_last_marks_and_the_rationale_becomes_the_solution():
    gold, solution = read_answer("He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7", "gsm8k", "answer")
    assert gold == "7" and solution == "He has 3 + 4 = 7 apples.\n\\boxed{7}"
    assert read_answer("#### 2,400", "gsm8k", "answer")[0] == "2400"  # thousands separators go
    assert read_answer("x #### y #### 1/2", "gsm8k", "answer")[0] == "1/2"


def test_math_answers_are_the_last_box_of_the_solution_which_is_kept():
    text = r"First $\boxed{1}$ is wrong; in fact $x = \boxed{\frac{1}{2}}$."
    assert read_answer(text, "boxed", "solution") == (r"\frac{1}{2}", text)


def test_a_math_shaped_dataset_loads_with_its_levels(tmp_path):
    from rlvr.tasks.hf import read_hf

    rows = [{"problem": "Find x.", "solution": "So $x = \\boxed{3}$.", "level": "Level 5"}, {"problem": "y?", "solution": "\\boxed{2}", "level": "Level 1"}]
    path = tmp_path / "math.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = DataConfig(source="hf", train_path=str(path), prompt_field="problem", answer_field="solution", answer_format="boxed")
    examples = read_hf(str(path), "train", cfg)
    assert [(e.answer, e.level, e.solution) for e in examples] == [("3", 5, rows[0]["solution"]), ("2", 1, rows[1]["solution"])]


def test_a_gsm8k_shaped_parquet_loads_with_answers_and_solutions(tmp_path):
    from rlvr.tasks.hf import load_hf_splits

    train, held = load_hf_splits(hf_cfg(gsm8k_parquet(tmp_path), eval_fraction=0.25), seed=0, need_solution=True)
    assert len(train) + len(held) == len(GSM8K) and len(held) == 6
    by_prompt = {e.prompt: e for e in [*train, *held]}
    assert by_prompt[GSM8K[2]["question"]].answer == "2400"
    assert by_prompt[GSM8K[0]["question"]].solution.endswith("\\boxed{7}")


def test_bad_dataset_rows_are_all_reported_with_their_row_index(tmp_path):
    from rlvr.tasks.hf import read_hf

    rows = GSM8K[:3] + [{"question": "No marks here", "answer": "just 5"}, {"question": "", "answer": "#### 3"}]
    with pytest.raises(DataError) as err:
        read_hf(str(gsm8k_parquet(tmp_path, rows)), "train", hf_cfg("x"))
    text = str(err.value)
    assert "2 bad rows of 5" in text and "gsm8k.parquet[train]#3" in text and "no final answer after '####'" in text
    assert "gsm8k.parquet[train]#4" in text and "empty field 'question'" in text
    with pytest.raises(DataError, match=r"no column \['problem'\]"):
        read_hf(str(gsm8k_parquet(tmp_path)), "train", DataConfig(source="hf", train_path="x", prompt_field="problem"))


def test_a_saved_dataset_with_splits_and_max_rows(tmp_path):
    from rlvr.tasks.hf import load_hf_splits

    saved = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(GSM8K), "test": datasets.Dataset.from_list(GSM8K[:3])}).save_to_disk(str(saved))
    train, held = load_hf_splits(hf_cfg(saved, eval_split="test", max_rows=5), seed=0, need_solution=False)
    assert len(train) == 5 and [e.answer for e in held] == ["7", "10", "2400"]
    with pytest.raises(DataError, match=r"no split 'validation' \(it has \['test', 'train'\]\)"):
        load_hf_splits(hf_cfg(saved, eval_split="validation"), seed=0, need_solution=False)


CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def test_chat_format_prompts_keep_system_and_few_shot_turns(tmp_path):
    from rlvr.models import build_char_tokenizer

    rows = [{"prompt": [{"role": "system", "content": "Box it."}, {"role": "user", "content": "1+1"},
                        {"role": "assistant", "content": "\\boxed{2}"}, {"role": "user", "content": "2+3"}], "answer": "5"},
            {"prompt": [{"role": "user", "content": "4+4"}], "answer": "8"}]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows * 10))
    (tmp_path / "t.jinja").write_text(CHAT_TEMPLATE)
    cfg = DataConfig(source="jsonl", train_path=str(path), chat_template=str(tmp_path / "t.jinja"), system_prompt="Be brief.")
    train, _ = load_jsonl_splits(cfg, seed=0, need_solution=False)
    few_shot = next(e for e in train if e.prompt == "2+3")
    tok = build_char_tokenizer()
    assert format_prompt(tok, few_shot, cfg) == "<system>Box it.</system><user>1+1</user><assistant>\\boxed{2}</assistant><user>2+3</user><assistant>"
    plain = next(e for e in train if e.prompt == "4+4")  # no system turn of its own: data.system_prompt is added
    assert prompt_messages(plain, cfg)[0] == {"role": "system", "content": "Be brief."}
    with pytest.raises(DataError, match="no chat template"):
        format_prompt(tok, few_shot, DataConfig())


def test_bad_chat_messages_are_bad_rows(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"prompt": [{"role": "user"}], "answer": "1"}) + "\n"
                    + json.dumps({"prompt": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "answer": "1"}) + "\n")
    with pytest.raises(DataError) as err:
        load_jsonl_splits(DataConfig(source="jsonl", train_path=str(path)), seed=0, need_solution=False)
    assert "chat.jsonl:1" in str(err.value) and "string 'role' and 'content'" in str(err.value)
    assert "chat.jsonl:2" in str(err.value) and "must end with a user turn" in str(err.value)


TINY = ["model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.intermediate_size=64", "eval.max_new_tokens=8",
        "rollout.max_new_tokens=8", "rollout.group_size=4", "rollout.prompts_per_step=4", "train.micro_batch_size=8", "run.threads=1",
        "sft.steps=4", "sft.batch_size=4", "train.steps=2", "eval.max_problems=4"]


@pytest.mark.parametrize("kind", ["gsm8k_parquet", "chat_jsonl"])
def test_user_shaped_data_trains_without_preprocessing(tmp_path, kind):
    from rlvr.metrics import Reporter, read_jsonl_records
    from rlvr.pipeline import run

    if kind == "gsm8k_parquet":
        data = ["data.source=hf", f"data.train_path={json.dumps(str(gsm8k_parquet(tmp_path)))}", "data.prompt_field=question",
                "data.answer_format=gsm8k", "data.eval_fraction=0.2"]
    else:
        rows = [{"prompt": [{"role": "system", "content": "Box it."}, {"role": "user", "content": f"{a}+{b}"}], "answer": str(a + b),
                 "solution": f"\\boxed{{{a + b}}}"} for a in range(5) for b in range(5)]
        (tmp_path / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (tmp_path / "t.jinja").write_text(CHAT_TEMPLATE)
        data = ["data.source=jsonl", f"data.train_path={json.dumps(str(tmp_path / 'chat.jsonl'))}",
                f"data.chat_template={json.dumps(str(tmp_path / 't.jinja'))}", "data.eval_fraction=0.2"]
    out = tmp_path / "run"
    run(load_config(overrides=TINY + data + [f"run.output_dir={json.dumps(str(out))}"]), Reporter(enabled=False), "train")
    assert len(read_jsonl_records(out / "metrics.jsonl")) == 2
    sample = read_jsonl_records(out / "samples.jsonl")[0]
    assert sample["answer"] in {"7", "10", "2400"} if kind == "gsm8k_parquet" else sample["prompt"].count("+") == 1


def test_a_weighted_mixture_of_sources_keeps_its_proportions_and_each_rows_source(tmp_path):
    from rlvr.tasks.mix import load_mixture

    parquet = gsm8k_parquet(tmp_path)
    mix = ('data.mix=[{source = "arithmetic", weight = 3, name = "arith", verifier = "boxed_math"}, '
           f'{{source = "hf", train_path = {json.dumps(str(parquet))}, prompt_field = "question", answer_format = "gsm8k", weight = 1}}]')
    cfg = load_config(overrides=[mix, "task.num_train=90", "task.num_eval=10", "data.eval_fraction=0.25"])
    train, held = load_mixture(cfg)
    sources = [e.info["source"] for e in train]
    hf_name = f"hf:{parquet}"
    assert sources.count("arith") == 81 and sources.count(hf_name) == 27  # 108 rows, 3 : 1
    assert len(set(e.prompt for e in train if e.info["source"] == hf_name)) == 3  # its 18 rows (3 questions), cycled to 27
    assert {e.info["source"] for e in held} == {"arith", hf_name} and len(held) == 10 + 6
    assert all(e.info.get("verifier") == "boxed_math" for e in train if e.info["source"] == "arith")
    assert load_mixture(cfg) == (train, held)  # from the seed


def test_a_bad_mixture_entry_names_its_place():
    from rlvr.tasks.mix import load_mixture

    with pytest.raises(Exception, match=r"data.mix\[1\]: \['promt_field'\] are not data settings"):
        load_mixture(load_config(overrides=['data.mix=[{source = "arithmetic"}, {source = "arithmetic", promt_field = "q"}]']))
    with pytest.raises(Exception, match=r"data.mix\[0\].weight: must be a number > 0"):
        load_mixture(load_config(overrides=['data.mix=[{source = "arithmetic", weight = 0}]']))
    with pytest.raises(Exception, match=r"data.mix\[0\]: data.train_path: is required"):
        load_mixture(load_config(overrides=['data.mix=[{source = "jsonl"}]']))


def test_dataset_rows_stay_in_arrow_until_used_and_behave_as_a_list(tmp_path):
    import gc

    from rlvr.tasks.hf import ArrowExamples, load_hf_splits
    from rlvr.loop import PromptStream

    rows = [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(3000)]
    path = tmp_path / "many.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    (tmp_path / "many.jsonl").write_text("".join(json.dumps({"prompt": r["question"], "answer": r["answer"].rpartition("#### ")[2]}) + "\n"
                                                 for r in rows))
    gc.collect()
    before = sum(isinstance(o, Example) for o in gc.get_objects())
    train, held = load_hf_splits(hf_cfg(path, eval_fraction=0.1), seed=0, need_solution=True)
    gc.collect()
    assert isinstance(train, ArrowExamples) and len(train) == 2700 and len(held) == 300
    assert sum(isinstance(o, Example) for o in gc.get_objects()) - before < 10  # row numbers held, not 3,000 Examples
    # the same rows and the same split as the in-memory JSONL source gives
    jsonl_train, jsonl_held = load_jsonl_splits(DataConfig(train_path=str(tmp_path / "many.jsonl"), eval_fraction=0.1), seed=0,
                                                need_solution=False)
    assert [(e.prompt, e.answer) for e in train] == [(e.prompt, e.answer) for e in jsonl_train]
    assert [(e.prompt, e.answer) for e in held] == [(e.prompt, e.answer) for e in jsonl_held]
    assert (train[5].prompt, train[5].answer) == (jsonl_train[5].prompt, jsonl_train[5].answer) and train[-1].solution.endswith("\\boxed{" + train[-1].answer + "}")
    assert [e.prompt for e in train[10:13]] == [e.prompt for e in jsonl_train[10:13]]
    # a curriculum's pass rates land on the rows taken, though every access builds a new Example
    stream, reference = PromptStream(train, 1, skip_rate=1.0), PromptStream(jsonl_train, 1, skip_rate=1.0)
    for _ in range(3):
        a, b = stream.take(8), reference.take(8)
        assert [e.prompt for e in a] == [e.prompt for e in b]
        stream.record(a, [1.0] * 8)
        reference.record(b, [1.0] * 8)
    assert stream.state() == reference.state()
