"""Algorithm presets: each names an exact point in the settings space, and any setting refines it."""

import warnings

import pytest

from rlvr.config import ConfigDeprecationWarning, ConfigError, load_config, preset_names, save_config

# What each paper specifies (the preset files cite them); a change here must be deliberate.
EXPECTED = {
    "grpo": dict(baseline="group_mean", std_scale="group", ratio_level="token", clip_low=0.2, clip_high=0.2,
                 aggregation="seq_mean_token_mean", beta=0.04, kl_estimator="k3", kl_in="loss", dynamic_sampling=False),
    "rloo": dict(baseline="leave_one_out", std_scale="none", ratio_level="token", aggregation="constant", beta=0.05,
                 kl_estimator="k1", kl_in="reward", dynamic_sampling=False),
    "dr_grpo": dict(baseline="group_mean", std_scale="none", ratio_level="token", clip_low=0.2, clip_high=0.2,
                    aggregation="constant", beta=0.0, dynamic_sampling=False),
    "dapo": dict(baseline="group_mean", std_scale="group", ratio_level="token", clip_low=0.2, clip_high=0.28,
                 aggregation="token_mean", beta=0.0, dynamic_sampling=True),
    "gspo": dict(baseline="group_mean", std_scale="group", ratio_level="sequence", clip_low=3e-4, clip_high=4e-4,
                 aggregation="seq_mean_token_mean", beta=0.0, dynamic_sampling=False),
}


def test_every_named_preset_exists():
    assert preset_names() == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preset_sets_its_papers_values(name):
    algo = load_config(overrides=[f"algo.preset={name}"]).algo
    assert algo.preset == name
    for key, value in EXPECTED[name].items():
        assert getattr(algo, key) == value, f"{name}: algo.{key}"


def test_dapo_preset_turns_on_the_overlong_reward_term():
    cfg = load_config(overrides=["algo.preset=dapo"])
    assert cfg.reward.overlong_buffer_frac == 0.2 and cfg.reward.overlong_penalty == 1.0
    assert load_config().reward.overlong_buffer_frac == 0.0


@pytest.mark.parametrize("order", ["before", "after"])
def test_any_setting_refines_a_preset_wherever_it_is_given(order):
    overrides = ["algo.preset=dapo", "algo.clip_high=0.3"]
    cfg = load_config(overrides=overrides if order == "after" else overrides[::-1])
    assert cfg.algo.clip_high == 0.3 and cfg.algo.clip_low == 0.2 and cfg.algo.dynamic_sampling


def test_preset_in_a_file_is_refined_by_the_file_and_the_command_line(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[algo]\npreset = "gspo"\nclip_high = 5e-4\n')
    cfg = load_config(path, ["algo.beta=0.01"])
    assert (cfg.algo.ratio_level, cfg.algo.clip_low, cfg.algo.clip_high, cfg.algo.beta) == ("sequence", 3e-4, 5e-4, 0.01)
    # the command line may swap the preset; the file's own settings still refine the new one
    cfg = load_config(path, ["algo.preset=dr_grpo"])
    assert (cfg.algo.std_scale, cfg.algo.aggregation, cfg.algo.clip_high) == ("none", "constant", 5e-4)


def test_saved_config_with_a_preset_reloads_identically(tmp_path):
    cfg = load_config(overrides=["algo.preset=rloo", "algo.clip_high=0.3"])
    save_config(cfg, tmp_path / "config.toml")
    assert load_config(tmp_path / "config.toml") == cfg


def test_a_preset_can_be_your_own_file(tmp_path):
    mine = tmp_path / "mine.toml"
    mine.write_text("[algo]\nbaseline = \"leave_one_out\"\ndual_clip = 3.0\n")
    cfg = load_config(overrides=[f"algo.preset={mine}"])
    assert cfg.algo.baseline == "leave_one_out" and cfg.algo.dual_clip == 3.0


def test_bad_presets_are_rejected_with_the_reason(tmp_path):
    with pytest.raises(ConfigError, match="unknown preset 'dapoo'.*dapo, dr_grpo"):
        load_config(overrides=["algo.preset=dapoo"])
    bad = tmp_path / "bad.toml"
    bad.write_text("[algo]\nclip_hgh = 0.3\n")
    with pytest.raises(ConfigError, match="clip_hgh.*did you mean algo.clip_high"):
        load_config(overrides=[f"algo.preset={bad}"])
    nested = tmp_path / "nested.toml"
    nested.write_text('[algo]\npreset = "dapo"\n')
    with pytest.raises(ConfigError, match="cannot name another preset"):
        load_config(overrides=[f"algo.preset={nested}"])


# ----------------------------------------------------------------------------- the old algo.estimator key

# (overrides, baseline, std_scale): what configs written before algo.baseline existed computed.
# estimator named a baseline, and through std_scale = "auto" (then the default) a std scaling;
# an explicit std_scale anywhere, the named presets' included, won over it.
OLD_SPELLINGS = [
    (["algo.estimator=grpo"], "group_mean", "group"),
    (["algo.estimator=dr_grpo"], "group_mean", "none"),
    (["algo.estimator=rloo"], "leave_one_out", "none"),
    (["algo.estimator=rloo", "algo.std_scale=group"], "leave_one_out", "group"),
    (["algo.std_scale=batch", "algo.estimator=dr_grpo"], "group_mean", "batch"),
    (["algo.estimator=dr_grpo", "algo.std_scale=auto"], "group_mean", "none"),
    (["algo.std_scale=auto"], "group_mean", "group"),
    (["algo.preset=grpo", "algo.estimator=dr_grpo"], "group_mean", "group"),  # the preset's std_scale = "group" stands
    (["algo.preset=dr_grpo", "algo.estimator=rloo"], "leave_one_out", "none"),
    (["algo.preset=dr_grpo", "algo.std_scale=auto"], "group_mean", "none"),
    (["algo.preset=gspo", "algo.estimator=rloo", "algo.std_scale=auto"], "leave_one_out", "none"),
    (["algo.estimator=rloo", "algo.baseline=group_mean"], "group_mean", "none"),  # a later setting refines it, as any
]


@pytest.mark.parametrize("overrides, baseline, std_scale", OLD_SPELLINGS)
def test_the_old_estimator_key_still_computes_what_it_did(overrides, baseline, std_scale):
    with pytest.warns(ConfigDeprecationWarning, match="deprecated"):
        algo = load_config(overrides=overrides).algo
    assert (algo.baseline, algo.std_scale) == (baseline, std_scale)


def test_an_old_run_config_loads_with_a_note_naming_the_file_and_the_new_keys(tmp_path):
    saved = tmp_path / "config.toml"  # as `rlvr lab` wrote it before: every algo field, std_scale "auto"
    saved.write_text('[algo]\npreset = ""\nestimator = "rloo"\nstd_scale = "auto"\nadv_eps = 0.0001\n')
    with pytest.warns(ConfigDeprecationWarning) as notes:
        cfg = load_config(saved)
    message = str(notes[0].message)
    assert f"{saved}: algo.estimator = 'rloo' is deprecated" in message
    assert "algo.baseline = 'leave_one_out'" in message and "algo.std_scale = 'none'" in message
    # saved again it is written in the new keys and reads back the same, silently
    save_config(cfg, tmp_path / "again.toml")
    assert "\nestimator" not in (tmp_path / "again.toml").read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_config(tmp_path / "again.toml") == cfg


def test_a_bad_old_estimator_names_the_field_and_the_values():
    with pytest.raises(ConfigError, match=r"algo.estimator: 'ppo' is not one of \['grpo', 'dr_grpo', 'rloo'\].*algo.baseline"):
        load_config(overrides=["algo.estimator=ppo"])
