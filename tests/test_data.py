"""JSONL sources: reading and validating lines, held-out splits, prompt formatting."""

from __future__ import annotations

import json

import pytest

from rlvr.config import DataConfig
from rlvr.data import DataError, Example, format_prompt, load_jsonl_splits, read_jsonl
from rlvr.models import build_char_tokenizer


def write_lines(path, lines: list[str]):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def rec(**fields) -> str:
    return json.dumps(fields)


GOOD = rec(prompt="What is 2+2?", answer="4")


# ----------------------------------------------------------------------------- read_jsonl


def test_reads_default_fields_in_file_order(tmp_path):
    path = write_lines(
        tmp_path / "d.jsonl",
        [
            rec(prompt="p1", answer="a1", solution="s1", level=2),
            rec(prompt="p2", answer="a2"),
            rec(prompt="p3", answer="a3", level="3", extra={"k": [1]}),
        ],
    )
    examples = read_jsonl(path, DataConfig())
    assert [(e.prompt, e.answer, e.solution, e.level) for e in examples] == [
        ("p1", "a1", "s1", 2),
        ("p2", "a2", None, None),
        ("p3", "a3", None, 3),
    ]
    assert all(isinstance(e, Example) for e in examples)
    assert examples[2].info["extra"] == {"k": [1]}  # the whole record stays available


def test_configurable_field_names(tmp_path):
    cfg = DataConfig(prompt_field="question", answer_field="final", solution_field="work", level_field="difficulty")
    path = write_lines(
        tmp_path / "d.jsonl",
        [
            # the default names are present too, as decoys: they must be ignored
            rec(question="Q1", final="7", work="3+4=7", difficulty=1, prompt="decoy", answer="decoy", level="x"),
            rec(question="Q2", final="8"),
        ],
    )
    examples = read_jsonl(path, cfg, need_solution=False)
    assert [(e.prompt, e.answer, e.solution, e.level) for e in examples] == [("Q1", "7", "3+4=7", 1), ("Q2", "8", None, None)]


def test_configured_prompt_field_missing_is_an_error_even_if_default_field_present(tmp_path):
    cfg = DataConfig(prompt_field="question")
    path = write_lines(tmp_path / "d.jsonl", [GOOD])
    with pytest.raises(DataError, match="question"):
        read_jsonl(path, cfg)


@pytest.mark.parametrize("answer, expected", [(42, "42"), (-3, "-3"), (2.5, "2.5"), (0, "0"), ("0", "0"), ("1/2", "1/2")])
def test_number_answers_become_strings(tmp_path, answer, expected):
    path = write_lines(tmp_path / "d.jsonl", [rec(prompt="p", answer=answer)])
    (example,) = read_jsonl(path, DataConfig())
    assert example.answer == expected
    assert isinstance(example.answer, str)


def test_a_json_object_answer_becomes_its_json_text_for_the_verifier_to_judge(tmp_path):
    # python_code's gold tests may be written as an object in the data file (issue 11); whether
    # an object can be a gold answer is the verifier's call (answer_ok), not the reader's
    tests = {"asserts": ["assert add(2, 3) == 5"], "setup": "x = 'é'"}
    path = write_lines(tmp_path / "d.jsonl", [rec(prompt="p", answer=tests)])
    (example,) = read_jsonl(path, DataConfig())
    assert json.loads(example.answer) == tests and example.info["answer"] == tests
    from rlvr.config import RewardConfig
    from rlvr.reward import answer_check

    python_code_check = answer_check(RewardConfig(functions=["python_code"]))
    assert read_jsonl(path, DataConfig(), answer_ok=python_code_check)[0].answer == example.answer
    # so may a list (MBPP's test_list): its JSON text, for the verifier to judge
    listed = write_lines(tmp_path / "list.jsonl", [rec(prompt="p", answer=["assert add(2, 3) == 5"])])
    assert json.loads(read_jsonl(listed, DataConfig(), answer_ok=python_code_check)[0].answer) == ["assert add(2, 3) == 5"]
    bad = write_lines(tmp_path / "bad.jsonl", [rec(prompt="p", answer={"assert": ["add(2, 3) == 5"]})])
    with pytest.raises(DataError, match=r"bad\.jsonl:1: field 'answer' = .* is not a python_code tests spec: code tests must be a dict"):
        read_jsonl(bad, DataConfig(), answer_ok=python_code_check)


def test_non_ascii_text_is_read_as_utf8(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes('{"prompt": "Combien font 3×4 ? — café", "answer": "12"}\n'.encode("utf-8"))
    (example,) = read_jsonl(path, DataConfig())
    assert example.prompt == "Combien font 3×4 ? — café"


BAD_LINES = [
    ("invalid json", '{"prompt": "p", "answer": }', "JSON"),
    ("truncated json", '{"prompt": "p", "answer": "1"', "JSON"),
    ("array", '["p", "1"]', "object"),
    ("string", '"just text"', "object"),
    ("number", "42", "object"),
    ("missing prompt", rec(answer="1"), "prompt"),
    ("missing answer", rec(prompt="p"), "answer"),
    ("null answer", rec(prompt="p", answer=None), "answer"),
    ("empty prompt", rec(prompt="", answer="1"), "prompt"),
    ("blank prompt", rec(prompt="  \n ", answer="1"), "prompt"),
    ("empty answer", rec(prompt="p", answer=""), "answer"),
    ("word level", rec(prompt="p", answer="1", level="hard"), "level"),
    ("float level", rec(prompt="p", answer="1", level=2.5), "level"),
    ("bool level", rec(prompt="p", answer="1", level=True), "level"),
    ("list prompt", rec(prompt=["p"], answer="1"), "prompt"),
    ("bool answer", rec(prompt="p", answer=True), "answer"),
    ("list solution", rec(prompt="p", answer="1", solution=["a"]), "solution"),
]


@pytest.mark.parametrize("label, bad, word", BAD_LINES, ids=[b[0] for b in BAD_LINES])
def test_bad_line_names_file_and_line(tmp_path, label, bad, word):
    # lines 2 and 4 are blank (one only whitespace): they count in the numbering but are skipped
    path = write_lines(tmp_path / "bad.jsonl", [GOOD, "", GOOD, "   \t", GOOD, bad, GOOD])
    with pytest.raises(DataError) as err:
        read_jsonl(path, DataConfig())
    message = str(err.value)
    assert f"{path}:6:" in message
    assert word in message


def test_bad_first_line_is_line_one(tmp_path):
    path = write_lines(tmp_path / "bad.jsonl", ["not json", GOOD])
    with pytest.raises(DataError, match=r"bad\.jsonl:1:"):
        read_jsonl(path, DataConfig())


def test_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("\n" + GOOD + "\n\n  \n" + rec(prompt="q", answer="5") + "\n\n", encoding="utf-8")
    assert [e.prompt for e in read_jsonl(path, DataConfig())] == ["What is 2+2?", "q"]


def test_last_line_without_newline_is_read(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(GOOD + "\n" + rec(prompt="last", answer="1"), encoding="utf-8")
    assert [e.prompt for e in read_jsonl(path, DataConfig())] == ["What is 2+2?", "last"]


@pytest.mark.parametrize("level", ["--3", "\u00b2"])
def test_odd_level_strings_raise_data_error(tmp_path, level):
    path = write_lines(tmp_path / "bad.jsonl", [GOOD, rec(prompt="p", answer="1", level=level)])
    with pytest.raises(DataError, match=r"bad\.jsonl:2:"):
        read_jsonl(path, DataConfig())


def test_non_utf8_line_raises_data_error_with_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes((GOOD + "\n").encode() + '{"prompt": "café", "answer": "1"}\n'.encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1\.jsonl:2"):
        read_jsonl(path, DataConfig())


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nope.jsonl"
    with pytest.raises(DataError) as err:
        read_jsonl(path, DataConfig())
    assert str(path) in str(err.value)


def test_directory_is_not_a_file(tmp_path):
    with pytest.raises(DataError) as err:
        read_jsonl(tmp_path, DataConfig())
    assert str(tmp_path) in str(err.value)


@pytest.mark.parametrize("content", ["", "\n\n", "  \n\t\n"])
def test_file_without_examples_is_an_error(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_jsonl(path, DataConfig())
    assert str(path) in str(err.value)


def test_need_solution_requires_the_solution_field(tmp_path):
    cfg = DataConfig(solution_field="work")
    path = write_lines(tmp_path / "d.jsonl", [rec(prompt="p", answer="1", work="1"), rec(prompt="q", answer="2")])
    with pytest.raises(DataError) as err:
        read_jsonl(path, cfg, need_solution=True)
    assert f"{path}:2:" in str(err.value) and "work" in str(err.value)
    # without need_solution the same file is fine, and a present solution is kept
    examples = read_jsonl(path, cfg, need_solution=False)
    assert [e.solution for e in examples] == ["1", None]


def test_need_solution_rejects_empty_solution(tmp_path):
    path = write_lines(tmp_path / "d.jsonl", [rec(prompt="p", answer="1", solution=" ")])
    with pytest.raises(DataError, match=r"d\.jsonl:1:.*solution"):
        read_jsonl(path, DataConfig(), need_solution=True)


# ----------------------------------------------------------------------------- splits


def numbered_file(path, n: int):
    return write_lines(path, [rec(prompt=f"problem {i}", answer=str(i)) for i in range(n)])


def test_held_out_fraction_is_deterministic_disjoint_and_complete(tmp_path):
    path = numbered_file(tmp_path / "train.jsonl", 40)
    cfg = DataConfig(source="jsonl", train_path=str(path), eval_fraction=0.25)
    train, held = load_jsonl_splits(cfg, seed=3, need_solution=False)
    assert len(held) == 10 and len(train) == 30
    prompts_train = {e.prompt for e in train}
    prompts_held = {e.prompt for e in held}
    assert not prompts_train & prompts_held
    assert prompts_train | prompts_held == {f"problem {i}" for i in range(40)}
    # same seed, same split (and same order); another seed, another split
    train2, held2 = load_jsonl_splits(cfg, seed=3, need_solution=False)
    assert (train2, held2) == (train, held)
    other = {e.prompt for e in load_jsonl_splits(cfg, seed=4, need_solution=False)[1]}
    assert other != prompts_held
    # train keeps file order
    assert [int(e.answer) for e in train] == sorted(int(e.answer) for e in train)


def test_small_file_still_holds_out_one(tmp_path):
    path = numbered_file(tmp_path / "train.jsonl", 5)
    cfg = DataConfig(source="jsonl", train_path=str(path), eval_fraction=0.05)
    train, held = load_jsonl_splits(cfg, seed=0, need_solution=False)
    assert len(held) == 1 and len(train) == 4


def test_single_example_cannot_be_split(tmp_path):
    path = numbered_file(tmp_path / "train.jsonl", 1)
    cfg = DataConfig(source="jsonl", train_path=str(path))
    with pytest.raises(DataError, match="train.jsonl"):
        load_jsonl_splits(cfg, seed=0, need_solution=False)


def test_eval_path_is_used_when_given(tmp_path):
    train_path = numbered_file(tmp_path / "train.jsonl", 8)
    eval_path = write_lines(tmp_path / "eval.jsonl", [rec(prompt="held 1", answer="1"), rec(prompt="held 2", answer="2")])
    cfg = DataConfig(source="jsonl", train_path=str(train_path), eval_path=str(eval_path))
    train, held = load_jsonl_splits(cfg, seed=0, need_solution=False)
    assert [e.prompt for e in train] == [f"problem {i}" for i in range(8)]  # nothing held out of train
    assert [e.prompt for e in held] == ["held 1", "held 2"]


def test_need_solution_applies_to_train_not_eval(tmp_path):
    train_path = write_lines(tmp_path / "train.jsonl", [rec(prompt="p", answer="1", solution="1")] * 3)
    eval_path = write_lines(tmp_path / "eval.jsonl", [rec(prompt="q", answer="2")])
    cfg = DataConfig(source="jsonl", train_path=str(train_path), eval_path=str(eval_path))
    train, held = load_jsonl_splits(cfg, seed=0, need_solution=True)
    assert len(train) == 3 and held[0].solution is None
    cfg_missing = DataConfig(source="jsonl", train_path=str(eval_path), eval_path=str(train_path))
    with pytest.raises(DataError, match=r"eval\.jsonl:1:"):
        load_jsonl_splits(cfg_missing, seed=0, need_solution=True)


def test_bad_eval_file_names_the_eval_file(tmp_path):
    train_path = numbered_file(tmp_path / "train.jsonl", 4)
    eval_path = write_lines(tmp_path / "eval.jsonl", [GOOD, "{oops"])
    cfg = DataConfig(source="jsonl", train_path=str(train_path), eval_path=str(eval_path))
    with pytest.raises(DataError, match=r"eval\.jsonl:2:"):
        load_jsonl_splits(cfg, seed=0, need_solution=False)


# ----------------------------------------------------------------------------- prompts

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def chat_tokenizer():
    tok = build_char_tokenizer()
    tok.chat_template = TEMPLATE
    return tok


def test_chat_template_with_system_prompt(chat_tokenizer):
    cfg = DataConfig(system_prompt="Put the answer in \\boxed{}.", use_chat_template=True)
    text = format_prompt(chat_tokenizer, "2+3*4=", cfg)
    assert text == "<|system|>Put the answer in \\boxed{}.\n<|user|>2+3*4=\n<|assistant|>"


def test_chat_template_without_system_prompt(chat_tokenizer):
    text = format_prompt(chat_tokenizer, "2+3*4=", DataConfig(use_chat_template=True))
    assert text == "<|user|>2+3*4=\n<|assistant|>"


def test_raw_prompt_when_chat_template_disabled(chat_tokenizer):
    cfg = DataConfig(use_chat_template=False, system_prompt="ignored")
    assert format_prompt(chat_tokenizer, "2+3*4=", cfg) == "2+3*4="
    # the default, as in TRL: a string prompt is used as written, so an already formatted prompt is not templated twice
    formatted = "<|user|>What is 77+9?\n<|assistant|>"
    assert format_prompt(chat_tokenizer, formatted, DataConfig()) == formatted


def test_raw_prompt_when_tokenizer_has_no_template():
    tok = build_char_tokenizer()
    assert not getattr(tok, "chat_template", None)
    assert format_prompt(tok, "7-1=", DataConfig(system_prompt="sys")) == "7-1="


# ----------------------------------------------------------------------------- every problem at once


BAD_FILE = [
    rec(id=1, prompt="1+1?", answer="2"),
    rec(id=2, prompt="  ", answer="3"),
    rec(id=1, prompt="dup", answer="4"),
    "not json",
    rec(id=4, prompt="x", answer="\\frac{1}{"),
    rec(id=5, prompt="x", answer=True),  # a list or object would be structured tests (python_code), a bool is nothing
    rec(id=6, question="x", answer="5"),
    rec(id=7, prompt="ok", answer="7"),
    rec(id=8, prompt="x"),
]


def boxed_math_answer_ok(answer: str) -> bool:
    from rlvr.data import boxed
    from rlvr.verifiers.math import boxed_math

    return boxed_math(boxed(answer), answer) == 1.0


def test_every_bad_row_is_reported_with_line_field_and_a_count_per_kind(tmp_path):
    path = write_lines(tmp_path / "bad.jsonl", BAD_FILE)
    with pytest.raises(DataError) as err:
        read_jsonl(path, DataConfig(), answer_ok=boxed_math_answer_ok)
    text = str(err.value)
    assert text.startswith(f"{path}: 7 bad rows of 9 (")
    counts = text.split("\n  ")[0]
    for count in ["1 empty field 'prompt'", "1 duplicate 'id'", "1 invalid JSON", "1 unparseable field 'answer'",
                  "1 wrong type of field 'answer'", "1 missing field 'prompt'", "1 missing field 'answer'"]:
        assert count in counts, count
    for line in [f"{path}:2: field 'prompt' is empty", f"{path}:3: id 1 already on line 1", f"{path}:4: invalid JSON",
                 f"{path}:5: field 'answer' = '\\\\frac{{1}}{{' cannot be matched", f"{path}:6: field 'answer' must be a string, number, JSON object or array",
                 f"{path}:7: missing field 'prompt'", f"{path}:9: missing field 'answer'"]:
        assert line in text, line
    assert "data.skip_bad_rows" in text


def test_skip_bad_rows_keeps_the_good_ones_and_reports_what_it_skipped(tmp_path):
    path = write_lines(tmp_path / "bad.jsonl", BAD_FILE)
    skipped = []
    examples = read_jsonl(path, DataConfig(skip_bad_rows=True), answer_ok=boxed_math_answer_ok, skipped=skipped)
    assert [e.prompt for e in examples] == ["1+1?", "ok"]
    assert [p.where for p in skipped] == [f"{path}:{n}" for n in (2, 3, 4, 5, 6, 7, 9)]


def test_only_bad_rows_is_still_an_error(tmp_path):
    path = write_lines(tmp_path / "bad.jsonl", ["not json", rec(prompt="")])
    with pytest.raises(DataError, match=r"no examples \(2 bad rows skipped\)"):
        read_jsonl(path, DataConfig(skip_bad_rows=True))


def test_ids_are_optional_and_any_json_value(tmp_path):
    path = write_lines(tmp_path / "ok.jsonl", [rec(prompt="a", answer="1"), rec(prompt="b", answer="2"), rec(id="x", prompt="c", answer="3"),
                                               rec(id=["x"], prompt="d", answer="4")])
    assert len(read_jsonl(path, DataConfig())) == 4
