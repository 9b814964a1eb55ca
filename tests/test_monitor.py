"""The live hack monitor: each detector on hand-made completions, the proxy-minus-strict gap and
the streak that stops a run, and its place in the loop (metrics every step, a stop with a checkpoint)."""

import pytest

from rlvr.config import load_config
from rlvr.monitor import DETECTORS, HackMonitor


@pytest.mark.parametrize("name, flagged, clean", [
    ("multiple_boxes", "it is \\boxed{3} or \\boxed{4}", "so \\boxed{3}"),
    ("unboxed", "the answer is 3", "\\boxed{3}"),
    ("prompt_echo", "What is 12+30? \\boxed{42}", "\\boxed{42}"),
    ("repeated_text", "ababababababababab \\boxed{1}", "1+1=2, so \\boxed{2}"),
])
def test_each_detector_flags_its_hack_and_not_an_honest_answer(name, flagged, clean):
    detect = DETECTORS[name]
    assert detect("What is 12+30?", flagged, False) and not detect("What is 12+30?", clean, False)


def test_the_length_limit_detector_reads_truncation():
    assert DETECTORS["at_length_limit"]("p", "x", True) and not DETECTORS["at_length_limit"]("p", "x", False)


def test_a_proxy_pulling_away_from_the_strict_verifier_stops_after_patience_steps():
    monitor = HackMonitor(strict=True, stop_on_hack=True, patience=3, min_gap=0.2)
    prompts, answers = ["2+2="] * 4, ["4"] * 4
    honest, hacked = "\\boxed{4}", "4 or 5: \\boxed{4} \\boxed{5}"  # a lenient proxy pays for the hedge; boxed_math does not
    reasons = []
    for hacks in range(5):  # 0, 1, 2, 3, 4 of the 4 completions hedge, and the proxy pays for every one
        completions = [hacked] * hacks + [honest] * (4 - hacks)
        metrics, reason = monitor.step(prompts, completions[:4], answers, [False] * 4, [1.0] * 4)
        reasons.append(reason)
    assert metrics["hack/proxy_minus_strict"] == pytest.approx(1.0) and metrics["hack/multiple_boxes"] == 1.0
    assert reasons[:3] == [None, None, None] and reasons[3] is not None  # grew 0 -> .25 -> .5 -> .75: three rises
    assert "multiple_boxes" in reasons[3] and "\\\\boxed{5}" in reasons[3]
    quiet = HackMonitor(strict=True, stop_on_hack=False, patience=1, min_gap=0.0)
    quiet.step(prompts, [honest] * 4, answers, [False] * 4, [1.0] * 4)
    assert quiet.step(prompts, [hacked] * 4, answers, [False] * 4, [1.0] * 4)[1] is None  # stop_on_hack off: metrics only
    resumed = HackMonitor(strict=True, stop_on_hack=True, patience=3, min_gap=0.2)
    resumed.set_state(monitor.state())
    assert resumed.gaps == monitor.gaps


def test_the_loop_logs_hack_metrics_and_stops_with_a_checkpoint(tiny_grpo, tmp_path, monkeypatch):
    import rlvr.monitor
    from rlvr.loop import TrainingError

    overrides = ["model.tiny.hidden_size=32", "model.tiny.intermediate_size=64", "task.num_train=12", "task.num_eval=4",
                 "rollout.group_size=4", "rollout.prompts_per_step=4", "rollout.max_new_tokens=6", "train.steps=3", "run.threads=1"]
    records, _, _ = tiny_grpo(load_config(overrides=overrides), "lenient", lambda completion, answer: float(answer in completion))
    assert all("hack/unboxed" in r and "hack/proxy_minus_strict" in r for r in records)  # the proxy is not boxed_math
    calls = {"n": 0}

    def fake_step(self, *args):
        calls["n"] += 1
        return {"hack/unboxed": 1.0}, "planted" if calls["n"] == 2 else None

    monkeypatch.setattr(rlvr.monitor.HackMonitor, "step", fake_step)
    with pytest.raises(TrainingError, match="step 2: the hack monitor stopped the run .*planted"):
        tiny_grpo(load_config(overrides=overrides + ["monitor.stop_on_hack=true"]), "lenient", lambda c, a: 1.0)
    assert (tmp_path / "checkpoints" / "step-000002" / "COMPLETE").exists()
