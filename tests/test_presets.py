"""Algorithm presets: each names an exact point in the settings space, and any setting refines it."""

import pytest

from rlvr.config import ConfigError, load_config, preset_names, save_config

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


# ----------------------------------------------------------------------------- the old spellings


@pytest.mark.parametrize("override, error", [
    ("algo.estimator=rloo", r"algo.estimator: unknown key"),  # now algo.baseline with algo.std_scale
    ("algo.std_scale=auto", r"algo.std_scale: 'auto' is not one of"),
])
def test_the_old_algo_spellings_are_refused_as_any_unknown_setting(override, error):
    with pytest.raises(ConfigError, match=error):
        load_config(overrides=[override])
