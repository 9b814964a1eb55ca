"""The config tree: defaults, TOML files, dotted overrides, validation, save/load round trip."""

from __future__ import annotations

import dataclasses
import doctest
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlvr.config
import rlvr.config_paths
from rlvr.config import Config, ConfigError, field_help, flatten, load_config, save_config


def write(tmp_path, text: str, name: str = "run.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path



# ----------------------------------------------------------------------------- defaults


def test_defaults_validate_and_load_config_without_arguments_gives_defaults():
    cfg = Config()
    assert cfg.validate() is cfg
    assert load_config() == Config()
    assert load_config(overrides=[]) == Config()


@pytest.mark.parametrize("module", [rlvr.config, rlvr.config_paths])
def test_module_doctest_example_holds(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


# ----------------------------------------------------------------------------- TOML files


def test_file_overrides_nested_sections_and_keeps_other_defaults(tmp_path):
    path = write(
        tmp_path,
        """
[algo]
beta = 0.04
baseline = "leave_one_out"

[model]
path = "some/model"

[model.tiny]
hidden_size = 64
num_heads = 4

[run]
seed = 7
""",
    )
    cfg = load_config(path)
    assert cfg.algo.beta == 0.04
    assert cfg.algo.baseline == "leave_one_out"
    assert cfg.model.path == "some/model"
    assert cfg.model.tiny.hidden_size == 64
    assert cfg.model.tiny.num_heads == 4
    assert cfg.run.seed == 7
    # everything the file does not mention keeps its default
    default = Config()
    assert cfg.algo.kl_estimator == default.algo.kl_estimator
    assert cfg.model.tiny.num_layers == default.model.tiny.num_layers
    assert cfg.train == default.train
    assert cfg.rollout == default.rollout


def test_file_accepts_dotted_table_headers_and_inline_tables(tmp_path):
    path = write(tmp_path, 'model.tiny = { hidden_size = 64 }\nalgo.beta = 0.5\n')
    cfg = load_config(path)
    assert cfg.model.tiny.hidden_size == 64
    assert cfg.algo.beta == 0.5


def test_file_ints_widen_to_float_but_floats_do_not_narrow_to_int(tmp_path):
    cfg = load_config(write(tmp_path, "[train]\nlr = 1\n"))
    assert cfg.train.lr == 1.0 and isinstance(cfg.train.lr, float)
    with pytest.raises(ConfigError, match=r"rollout\.group_size"):
        load_config(write(tmp_path, "[rollout]\ngroup_size = 8.0\n", "f.toml"))


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("text", ["[algo\nbeta = 0.1\n", "[algo]\nbeta = \n", "[algo]\nbeta = 0.1\nbeta = 0.2\n", "x = 'unterminated\n"])
def test_invalid_toml_names_the_file(tmp_path, text):
    path = write(tmp_path, text, "broken.toml")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value)
    assert "TOML" in str(err.value)


@pytest.mark.parametrize(
    "text, field",
    [
        ("[algo]\nbetta = 0.04\n", "algo.betta"),
        ("[algoo]\nbeta = 0.04\n", "algoo"),
        ("[model.tiny]\nhidden = 64\n", "model.tiny.hidden"),
        ("seed = 3\n", "seed"),  # a real field name, but at the wrong level
    ],
)
def test_unknown_key_in_file_names_dotted_field_and_file(tmp_path, text, field):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message
    assert f"{field}:" in message


@pytest.mark.parametrize(
    "text, field",
    [
        ("[rollout]\ngroup_size = 2.5\n", "rollout.group_size"),
        ('[algo]\nbeta = "x"\n', "algo.beta"),
        ("[algo]\nbeta = { x = 1 }\n", "algo.beta"),  # a table where a number belongs
        ("[algo.beta]\nx = 1\n", "algo.beta"),
        ("[model]\ntiny = 64\n", "model.tiny"),  # a number where a table belongs
        ("algo = 3\n", "algo"),
        ("[model]\ntrust_remote_code = 1\n", "model.trust_remote_code"),  # int is not bool
        ("[run]\nseed = true\n", "run.seed"),  # bool is not int
        ("[algo]\nbeta = true\n", "algo.beta"),  # bool is not float
        ("[run]\ndevice = 0\n", "run.device"),
        ('[algo]\nestimator = "ppo"\n', "algo.estimator"),
        ('[algo]\nsurrogate = "ppo"\n', "algo.surrogate"),
        ('[algo]\nbaseline = 1\n', "algo.baseline"),
        ("[data]\nsystem_prompt = [\"a\"]\n", "data.system_prompt"),
    ],
)
def test_wrong_type_in_file_names_field_and_file(tmp_path, text, field):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value)
    assert f"{field}:" in str(err.value)


# ----------------------------------------------------------------------------- overrides


def test_override_wins_over_file_and_file_wins_over_default(tmp_path):
    path = write(tmp_path, "[algo]\nbeta = 0.1\nclip_high = 0.28\n[rollout]\ngroup_size = 4\n")
    cfg = load_config(path, ["algo.beta=0.04", "model.tiny.hidden_size=64"])
    assert cfg.algo.beta == 0.04  # override beats file
    assert cfg.algo.clip_high == 0.28  # file beats default, untouched by overrides
    assert cfg.rollout.group_size == 4
    assert cfg.model.tiny.hidden_size == 64


def test_later_override_wins_over_earlier():
    assert load_config(overrides=["algo.beta=0.1", "algo.beta=0.2"]).algo.beta == 0.2


@pytest.mark.parametrize(
    "override, getter, expected",
    [
        ("algo.baseline=leave_one_out", lambda c: c.algo.baseline, "leave_one_out"),  # bare word
        ('algo.std_scale="none"', lambda c: c.algo.std_scale, "none"),  # quoted
        ("algo.surrogate=cispo", lambda c: c.algo.surrogate, "cispo"),
        ("run.device=cuda:1", lambda c: c.run.device, "cuda:1"),
        ("run.output_dir=runs/my run", lambda c: c.run.output_dir, "runs/my run"),
        ("data.system_prompt=a=b", lambda c: c.data.system_prompt, "a=b"),  # split at the first '='
        (" algo.beta = 0.04 ", lambda c: c.algo.beta, 0.04),
        ("algo.beta=1e-3", lambda c: c.algo.beta, 1e-3),
        ("model.trust_remote_code=true", lambda c: c.model.trust_remote_code, True),
        ("train.save_model=false", lambda c: c.train.save_model, False),
        ("rollout.group_size=4", lambda c: c.rollout.group_size, 4),
        ("model.tiny.num_layers=2", lambda c: c.model.tiny.num_layers, 2),
    ],
)
def test_override_values(override, getter, expected):
    value = getter(load_config(overrides=[override]))
    assert value == expected
    assert type(value) is type(expected)


def test_override_int_widens_to_float():
    cfg = load_config(overrides=["train.lr=1", "algo.beta=0"])
    assert cfg.train.lr == 1.0 and type(cfg.train.lr) is float
    assert cfg.algo.beta == 0.0 and type(cfg.algo.beta) is float


@pytest.mark.parametrize(
    "override, field",
    [
        ("rollout.group_size=2.0", "rollout.group_size"),  # float never narrows to int
        ("rollout.group_size=2.5", "rollout.group_size"),
        ("algo.beta=x", "algo.beta"),  # bare word: a string, not a number
        ('algo.beta="0.1"', "algo.beta"),
        ("train.save_model=yes", "train.save_model"),
        ("train.save_model=1", "train.save_model"),
        ("algo.estimator=ppo", "algo.estimator"),
        ("algo.baseline=median", "algo.baseline"),
        ("algo.aggregation=sum", "algo.aggregation"),
        ("algo.beta={x = 1}", "algo.beta"),  # a table where a scalar is expected
        ("algo.beta.x=1", "algo.beta"),
        ("algo=1", "algo"),
        ("algo.betta=0.04", "algo.betta"),  # unknown keys
        ("algoo.beta=0.04", "algoo"),
        ("model.tiny.hidden=64", "model.tiny.hidden"),
    ],
)
def test_bad_override_names_the_field(override, field):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=[override])
    assert f"{field}:" in str(err.value)


@pytest.mark.parametrize("override", ["algo.beta", "=1", "algo..beta=1", ".beta=1", "algo.=1"])
def test_malformed_override_raises_config_error(override):
    with pytest.raises(ConfigError, match="override"):
        load_config(overrides=[override])


def test_unknown_override_after_valid_file_does_not_blame_the_file(tmp_path):
    path = write(tmp_path, "[algo]\nbeta = 0.1\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["algo.betta=1"])
    assert "algo.betta" in str(err.value)


# ----------------------------------------------------------------------------- ranges


@pytest.mark.parametrize(
    "override, field",
    [
        ("rollout.group_size=1", "rollout.group_size"),
        ("rollout.group_size=0", "rollout.group_size"),
        ("rollout.top_p=0", "rollout.top_p"),
        ("rollout.top_p=1.01", "rollout.top_p"),
        ("rollout.temperature=0", "rollout.temperature"),
        ("rollout.max_new_tokens=0", "rollout.max_new_tokens"),
        ("sft.worked_fraction=1.5", "sft.worked_fraction"),
        ("sft.worked_fraction=-0.1", "sft.worked_fraction"),
        ("sft.steps=-1", "sft.steps"),
        ("algo.beta=-0.01", "algo.beta"),
        ("algo.clip_low=1.0", "algo.clip_low"),
        ("algo.num_iterations=0", "algo.num_iterations"),
        ("train.lr=0", "train.lr"),
        ("train.micro_batch_size=0", "train.micro_batch_size"),
        ("data.eval_fraction=0", "data.eval_fraction"),
        ("data.eval_fraction=1", "data.eval_fraction"),
        ("eval.max_problems=-1", "eval.max_problems"),
        ("run.threads=-1", "run.threads"),
        ("task.operators=+/", "task.operators"),
        ("task.prompt_template=no placeholder", "task.prompt_template"),
        ("model.tiny.hidden_size=30", "model.tiny.num_heads"),  # 4 heads do not divide 30
        ("model.tiny.num_kv_heads=3", "model.tiny.num_kv_heads"),
        ('reward.functions=["nope"]', "reward.functions[0]"),
        ("reward.weights=[1.0, 2.0]", "reward.weights"),
        ("algo.dual_clip=0.5", "algo.dual_clip"),
        ("algo.max_sampling_rounds=0", "algo.max_sampling_rounds"),
        ("reward.overlong_buffer_frac=1.5", "reward.overlong_buffer_frac"),
        ("data.source=jsonl", "data.train_path"),  # jsonl needs a train file
    ],
)
def test_out_of_range_values_name_the_field(override, field):
    with pytest.raises(ConfigError) as err:
        load_checked([override])
    assert str(err.value).startswith(f"{field}:")


def load_checked(overrides: list[str]) -> Config:
    """A config as every command loads one: validated, then its task's own rules (rlvr.tasks.task_for)."""
    from rlvr.tasks import task_for

    cfg = load_config(overrides=overrides)
    task_for(cfg)
    return cfg


def test_out_of_range_value_from_file_is_rejected(tmp_path):
    path = write(tmp_path, "[task]\nmin_ops = 3\nmax_ops = 2\n")
    with pytest.raises(ConfigError, match=r"task\.min_ops"):
        load_config(path)


@pytest.mark.parametrize(
    "override",
    ["rollout.group_size=2", "rollout.top_p=1.0", "rollout.top_p=0.01", "sft.worked_fraction=0", "sft.worked_fraction=1", "sft.steps=0", "algo.beta=0", "algo.clip_low=0"],
)
def test_boundary_values_that_are_allowed(override):
    load_config(overrides=[override])  # must not raise


# ----------------------------------------------------------------------------- save / load


def nondefault_config() -> Config:
    cfg = Config()
    cfg.run.output_dir = "runs/with space"
    cfg.run.seed = 11
    cfg.run.dtype = "bfloat16"
    cfg.run.autocast = "bfloat16"
    cfg.model.lora_rank = 8
    cfg.sft.steps = 0
    cfg.model.path = "C:\\models\\qwen"
    cfg.model.tiny.hidden_size = 64
    cfg.model.gradient_checkpointing = True
    cfg.data.system_prompt = 'Think step by step.\nPut the answer in "\\boxed{}".\tThanks \\n not a newline'
    cfg.data.use_chat_template = False
    cfg.task.prompt_template = 'Q: "{expr}"\\\nA:'
    cfg.task.operators = "+*"
    cfg.sft.worked_fraction = 1.0
    cfg.algo.baseline = "leave_one_out"
    cfg.algo.std_scale = "batch"
    cfg.algo.surrogate = "cispo"
    cfg.algo.beta = 0.04
    cfg.algo.adv_eps = 1e-8
    cfg.train.lr = 1e-6
    cfg.train.save_model = False
    cfg.eval.max_problems = 5
    return cfg.validate()


def test_save_then_load_round_trips_every_field(tmp_path):
    cfg = nondefault_config()
    path = tmp_path / "sub" / "config.toml"
    save_config(cfg, path)
    again = load_config(path)
    assert again == cfg
    assert flatten(again) == flatten(cfg)
    assert [type(v) for v in flatten(again).values()] == [type(v) for v in flatten(cfg).values()]


def test_saved_file_is_plain_toml_with_every_section(tmp_path):
    path = tmp_path / "config.toml"
    save_config(nondefault_config(), path)
    table = tomllib.loads(path.read_text(encoding="utf-8"))
    assert table["algo"]["beta"] == 0.04
    assert table["model"]["tiny"]["hidden_size"] == 64
    assert set(table) == {f.name for f in dataclasses.fields(Config)}


def test_save_overwrites_an_existing_file(tmp_path):
    path = tmp_path / "config.toml"
    save_config(nondefault_config(), path)
    save_config(Config(), path)
    assert load_config(path) == Config()
    assert [p.name for p in tmp_path.iterdir()] == ["config.toml"]  # no temp files left behind


# Text from the Basic Multilingual Plane (minus surrogates): quotes, backslashes, control
# characters, newlines, accented and CJK letters.
BMP_TEXT = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(system=BMP_TEXT, suffix=BMP_TEXT)
def test_round_trip_of_arbitrary_strings(tmp_path_factory, system, suffix):
    cfg = Config()
    cfg.data.system_prompt = system
    cfg.task.prompt_template = "{expr}" + suffix
    path = tmp_path_factory.mktemp("rt") / "config.toml"
    save_config(cfg, path)
    assert load_config(path) == cfg


def test_round_trip_of_characters_outside_the_bmp(tmp_path):
    cfg = Config()
    cfg.data.system_prompt = "Answer in \\boxed{} \U0001F600 \U0001D465"
    path = tmp_path / "config.toml"
    save_config(cfg, path)
    assert load_config(path) == cfg


# ----------------------------------------------------------------------------- field_help


def test_field_help_lists_every_leaf_with_help_and_true_default():
    rows = field_help()
    names = [name for name, _, _ in rows]
    expected = flatten(Config())
    assert len(names) == len(set(names))
    assert set(names) == set(expected)
    for name, default, help_text in rows:
        assert help_text.strip(), f"{name} has no help text"
        # the default column is TOML that parses back to the real default
        assert tomllib.loads(f"v = {default}")["v"] == expected[name], name
    # every listed name is accepted as an override with its default value
    assert load_config(overrides=[f"{n}={d}" for n, d, _ in rows]) == Config()


# ----------------------------------------------------------------------------- choices from the registries

REGISTRY_FIELDS = {  # config field -> the registry its values come from
    "algo.baseline": "BASELINES", "algo.std_scale": "STD_SCALES", "algo.surrogate": "SURROGATES",
    "algo.ratio_level": "RATIO_LEVELS", "algo.aggregation": "AGGREGATIONS", "algo.kl_estimator": "KL_ESTIMATORS",
}


@pytest.mark.parametrize("name, registry", sorted(REGISTRY_FIELDS.items()))
def test_a_choice_accepts_exactly_its_registrys_names_and_lists_them(name, registry):
    import rlvr.algorithms

    names = list(getattr(rlvr.algorithms, registry))
    assert len(names) >= 2
    for value in names:
        assert flatten(load_config(overrides=[f"{name}={value}"]))[name] == value
    with pytest.raises(ConfigError) as err:
        load_config(overrides=[f"{name}=nonesuch"])
    assert str(err.value) == f"{name}: 'nonesuch' is not one of {names}"
    # `rlvr config` lists each value with the first line of its function's docstring
    (help_text,) = [h for n, _, h in field_help() if n == name]
    for value in names:
        assert f"{value}: " in help_text


def test_a_newly_registered_surrogate_is_a_valid_config_value_without_editing_the_config(monkeypatch):
    from rlvr.algorithms import SURROGATES

    def unclipped(logp_BT, ratio_BT, adv_B1, *, clip_low, clip_high):
        """-rho A, no clip."""
        return -(ratio_BT * adv_B1), ratio_BT != ratio_BT

    monkeypatch.setitem(SURROGATES._items, "unclipped", unclipped)
    monkeypatch.setitem(SURROGATES._traits, "unclipped", {})
    assert load_config(overrides=["algo.surrogate=unclipped"]).algo.surrogate == "unclipped"
    assert "unclipped: -rho A, no clip" in dict((n, h) for n, _, h in field_help())["algo.surrogate"]
    with pytest.raises(ConfigError, match=r"algo.dual_clip: .*'unclipped' does not support it \(those that do: \['ppo_clip'\]\)"):
        load_config(overrides=["algo.surrogate=unclipped", "algo.dual_clip=3.0"])


def test_a_choice_set_from_python_is_checked_when_validated():
    cfg = Config()
    cfg.algo.surrogate = "ppo"
    with pytest.raises(ConfigError, match=r"algo.surrogate: 'ppo' is not one of \['ppo_clip', 'cispo'\]"):
        cfg.validate()


def test_every_registered_choice_is_documented():
    from pathlib import Path

    import rlvr.algorithms

    doc = (Path(__file__).parent.parent / "docs" / "algorithms.md").read_text()
    for name, registry in REGISTRY_FIELDS.items():
        assert f"`{name}`" in doc, name
        for value in getattr(rlvr.algorithms, registry):
            assert f"`{value}`" in doc, f"{name} = {value} is not in docs/algorithms.md"


def test_bare_word_override_of_a_string_field_stays_the_text_typed():
    # TOML would read these as a date and a boolean; the field is a string, so the text is kept.
    cfg = load_config(overrides=["run.output_dir=2024-01-01", "data.system_prompt=true"])
    assert cfg.run.output_dir == "2024-01-01" and cfg.data.system_prompt == "true"


@pytest.mark.parametrize(
    "overrides, field, why",
    [
        (["sft.save_model=true", "sft.steps=0"], "sft.save_model", "no SFT model to save"),
        (["data.train_path=train.jsonl"], "data.train_path", "set data.source = 'jsonl'"),
        (["checkpoint.auto_resume=true"], "checkpoint.auto_resume", "needs a fixed run.output_dir"),
        (["rollout.max_new_tokens=120"], "model.tiny.max_positions", "needs 132"),
        (["eval.max_new_tokens=200", "model.tiny.max_positions=150"], "model.tiny.max_positions", "needs 212"),
        (["run.dtype=bfloat16"], "run.dtype", "run.autocast=bfloat16"),  # full bf16 weights lose AdamW updates
        (["run.dtype=bfloat16", "model.lora_rank=8"], "run.dtype", "sft.steps=0"),  # SFT still trains full weights
    ],
)
def test_contradictory_settings_are_rejected_with_the_reason(overrides, field, why):
    with pytest.raises(ConfigError) as err:
        load_checked(overrides)
    assert str(err.value).startswith(f"{field}:") and why in str(err.value)


def test_contradiction_checks_leave_consistent_settings_alone():
    load_config(overrides=["checkpoint.auto_resume=true", "run.output_dir=runs/x"])
    load_config(overrides=["rollout.max_new_tokens=116"])  # 12-token prompt + 116 = 128 fits exactly
    load_config(overrides=["model.path=some/model", "rollout.max_new_tokens=4096"])  # a real model's context is its own


def test_unknown_keys_suggest_the_nearest_name(tmp_path):
    with pytest.raises(ConfigError, match=r"algo.clip_hgh: unknown key \(did you mean algo.clip_high\?\)"):
        load_config(overrides=["algo.clip_hgh=0.3"])
    path = write(tmp_path, "[rollout]\ngroup_sise = 4\n")
    with pytest.raises(ConfigError, match=r"group_sise: unknown key \(did you mean rollout.group_size\?\)"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"reward.verifier: unknown key; it is now reward.functions"):
        load_config(overrides=["reward.verifier=boxed_math"])


def test_a_finished_runs_config_loads_for_export_even_where_training_is_refused():
    """Runs made before the bf16-weights check still export (exporting trains nothing)."""
    with pytest.raises(ConfigError, match="run.dtype"):
        load_config(overrides=["run.dtype=bfloat16"])
    assert load_config(overrides=["run.dtype=bfloat16"], for_training=False).run.dtype == "bfloat16"


def test_the_ray_backend_refuses_one_shared_sampling_stream_and_checks_its_fields():
    with pytest.raises(ConfigError, match="rollout.seeding"):
        load_config(overrides=["distributed.backend=ray", "rollout.seeding=stream"])
    load_config(overrides=["distributed.backend=ray"])  # 'auto' seeds per group there
    with pytest.raises(ConfigError, match="distributed.resources"):
        load_config(overrides=["distributed.resources={rollout = -1}"])
    with pytest.raises(ConfigError, match="distributed.rollout_workers"):
        load_config(overrides=["distributed.rollout_workers=0"])


@pytest.mark.parametrize("override", ["distributed.mode=async", "distributed.max_staleness=0", "distributed.rollout_workers=4"])
def test_the_local_backend_refuses_the_settings_only_ray_workers_act_on(override):
    """Before, they were silently ignored (and --dry-run said ok)."""
    name = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^{name}: .*only Ray's rollout workers do; the local backend"):
        load_config(overrides=[override])
    load_config(overrides=[override, "distributed.backend=ray"])
    load_config(overrides=[override], for_training=False)  # a finished run's config still reads
    load_config(overrides=["distributed.reward_workers=3", "distributed.cpus_per_worker=2"])  # resources: harmless, left alone


@pytest.mark.integration  # a fresh interpreter importing torch and rlvr: ~9 s, out of make test-fast
def test_the_local_backend_never_imports_ray():
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from rlvr.config import load_config\n"
        "from rlvr.distributed import make_learner\n"
        "from rlvr.models import build_char_tokenizer, build_tiny_model\n"
        "import rlvr.cli, rlvr.pipeline\n"
        "cfg = load_config(overrides=['model.tiny.hidden_size=16', 'model.tiny.intermediate_size=32'])\n"
        "tok = build_char_tokenizer()\n"
        "learner = make_learner(build_tiny_model(tok, cfg.model.tiny, 0), tok, cfg)\n"
        "assert type(learner).__name__ == 'LocalLearner'\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


# ----------------------------------------------------------------------------- relative paths in a file


def test_relative_paths_in_a_config_file_mean_paths_next_to_it_from_any_working_directory(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "train.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
    (project / "chat.jinja").write_text("{{ messages }}")
    (project / "teacher_run").mkdir()
    path = write(project, '[model]\npath = "Qwen/Qwen2.5-1.5B"\n'  # a hub id: nothing of that name next to the file
                          '[data]\nsource = "jsonl"\ntrain_path = "data/train.jsonl"\nchat_template = "chat.jinja"\n'
                          'mix = [{source = "jsonl", train_path = "data/train.jsonl"}]\n'
                          '[distill]\nteacher = "teacher_run@50"\n[run]\noutput_dir = "runs/x"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(path)
    assert cfg.data.train_path == str(project / "data" / "train.jsonl")
    assert cfg.data.mix[0]["train_path"] == str(project / "data" / "train.jsonl")
    assert cfg.data.chat_template == str(project / "chat.jinja")
    assert cfg.distill.teacher == f"{project / 'teacher_run'}@50"  # a run point: the run resolved, the point kept
    assert cfg.model.path == "Qwen/Qwen2.5-1.5B"  # left to the hub client
    assert cfg.run.output_dir == "runs/x"  # outputs go under the working directory, as the default's do
    # a relative path to the file itself works too, and the saved config is absolute: it reads back the same anywhere
    monkeypatch.chdir(tmp_path)
    assert load_config("project/run.toml") == cfg
    save_config(cfg, elsewhere / "saved.toml")
    assert load_config(elsewhere / "saved.toml") == cfg


def test_command_line_paths_mean_paths_from_the_working_directory_and_are_saved_absolute(tmp_path, monkeypatch):
    (tmp_path / "train.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
    path = write(tmp_path, '[data]\nsource = "jsonl"\n')
    monkeypatch.chdir(tmp_path.parent)
    cfg = load_config(path, ["data.train_path=train.jsonl"])  # exists next to the file, but the shell means the cwd
    assert cfg.data.train_path == "train.jsonl"
    here = tmp_path / "here"
    for name in ("sft", "grpo"):  # a model directory here; a directory named like a preset
        (here / name).mkdir(parents=True)
    monkeypatch.chdir(here)
    cfg = load_config(None, ["model.path=sft", "algo.preset=grpo", 'data.mix=[{source = "jsonl", train_path = "sft"}]'])
    assert cfg.model.path == cfg.data.mix[0]["train_path"] == str(here / "sft")
    assert cfg.algo.preset == "grpo"  # a named preset, not a path
    assert load_config(None, ["model.path=Qwen/Qwen2.5-1.5B"]).model.path == "Qwen/Qwen2.5-1.5B"  # a hub id: as written
    run = tmp_path / "run"
    (run / "sft").mkdir(parents=True)  # the run's own sft/ would shadow a relative model.path = "sft"
    save_config(cfg, run / "config.toml")
    monkeypatch.chdir(run)
    assert load_config(run / "config.toml") == cfg  # the saved config reads back the same from anywhere
    missing = load_config(write(tmp_path, '[data]\nsource = "jsonl"\ntrain_path = "absent.jsonl"\n', "b.toml"))
    assert missing.data.train_path == "absent.jsonl"  # nothing next to the file: as written (reported missing when read)


def test_a_resume_with_another_number_of_learner_ranks_is_refused_with_the_reason():
    from rlvr.runtime import changes_breaking_resume

    ranks = lambda w: load_config(overrides=["distributed.backend=ray", f"distributed.learner_workers={w}"])  # noqa: E731
    said = changes_breaking_resume(ranks(2), ranks(4))
    assert len(said) == 1 and said[0].startswith("distributed.learner_workers: 2 -> 4 (") and "rlvr export" in said[0]
    assert changes_breaking_resume(ranks(2), ranks(2)) == []
    assert changes_breaking_resume(ranks(0), ranks(2)) == ["distributed.learner_workers: 0 -> 2"]  # from the driver's learner: no shards to load


def test_learner_resources_name_only_custom_resources():
    load_config(overrides=["distributed.backend=ray", "distributed.learner_resources={learner = 1}"])
    with pytest.raises(ConfigError, match=r"distributed.learner_resources: \['GPU'\] are set by cpus_per_learner and gpus_per_learner"):
        load_config(overrides=["distributed.backend=ray", "distributed.learner_resources={GPU = 1}"])
    with pytest.raises(ConfigError, match="distributed.learner_resources: amounts must be numbers >= 0"):
        load_config(overrides=["distributed.backend=ray", "distributed.learner_resources={learner = -1}"])
