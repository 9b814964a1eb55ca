"""`rlvr doctor`: each planted symptom is found, citing its metric and steps, and the lab's own
healthy run (tests/data/lab_run_metrics.jsonl: the metrics of a full `rlvr lab` run, 61.8% -> 79.3%
held-out, kept to the keys the doctor reads) raises no alarm."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.config import load_config
from rlvr.doctor import diagnose
from rlvr.metrics import read_jsonl_records

LAB_RUN = Path(__file__).parent / "data" / "lab_run_metrics.jsonl"


def healthy(n: int = 40) -> list[dict]:
    """A run that learns: reward up, some groups all-equal, entropy easing, nothing truncated."""
    return [{"step": s, "reward/mean": 0.3 + 0.4 * s / n, "reward/frac_groups_all_equal": 0.4, "rollout/entropy": 0.5 - 0.2 * s / n,
             "rollout/mean_length": 20.0, "rollout/truncated_frac": 0.0, "loss/ratio_max": 1.0, "rollout/logp_mismatch_max": 1e-5}
            for s in range(1, n + 1)]


def planted(key: str, value) -> list[dict]:
    records = healthy()
    for r in records:
        r[key] = value(r["step"]) if callable(value) else value
    return records


def symptoms(records, cfg=None) -> list[str]:
    return [v.symptom for v in diagnose(records, cfg)]


def test_the_lab_run_and_a_healthy_run_raise_no_alarm():
    assert symptoms(read_jsonl_records(LAB_RUN), load_config()) == []
    assert symptoms(healthy(), load_config()) == []


@pytest.mark.parametrize("key, value, symptom, cited", [
    ("reward/mean", 0.0, "reward flat at zero", "steps 21-40"),
    ("reward/frac_groups_all_equal", 0.9, "most groups all-equal", "averaged 0.90"),
    ("rollout/truncated_frac", 0.35, "many truncated completions", "averaged 0.35"),
    ("loss/ratio_max", lambda s: 40.0 if s % 10 == 0 else 1.0, "importance-ratio spikes", "steps 10, 20, 30, 40"),
    ("rollout/logp_mismatch_max", lambda s: 0.9 if s % 3 == 0 else 0.0, "sampler and learner disagree on log-probs", "steps 3, 6, 9"),
])
def test_each_planted_symptom_is_found_with_its_evidence(key, value, symptom, cited):
    verdicts = diagnose(planted(key, value), load_config())
    assert [v.symptom for v in verdicts] == [symptom]
    assert key in verdicts[0].evidence and cited in verdicts[0].evidence


def test_a_proxy_pulling_away_from_the_strict_verifier_is_named_with_its_pattern():
    hacked = planted("hack/proxy_minus_strict", lambda s: 0.05 if s <= 10 else 0.5)
    for r in hacked:
        r["hack/unboxed"], r["hack/multiple_boxes"] = (0.0, 0.0) if r["step"] <= 10 else (0.9, 0.1)
    verdicts = diagnose(hacked, load_config())
    assert [v.symptom for v in verdicts] == ["the trained reward pulls away from the strict verifier (reward hacking)"]
    assert "0.05 (steps 1-10) -> 0.50 (steps 31-40)" in verdicts[0].evidence and "hack/unboxed (90%" in verdicts[0].evidence
    assert symptoms(planted("hack/proxy_minus_strict", 0.4)) == []  # a lenient but stable proxy: a gap, no trend


def test_entropy_collapse_and_length_drift_need_their_context():
    collapsing = planted("rollout/entropy", lambda s: 1.0 if s <= 10 else 0.1)
    for r in collapsing:
        r["reward/mean"] = 0.5  # flat
    assert symptoms(collapsing) == ["entropy collapsing while reward is flat"]
    learning = planted("rollout/entropy", lambda s: 1.0 if s <= 10 else 0.1)  # the same collapse while reward climbs
    assert symptoms(learning) == []
    longer = planted("rollout/mean_length", lambda s: 10.0 if s <= 10 else 30.0)
    assert symptoms(longer, load_config(overrides=["algo.aggregation=seq_mean_token_mean"])) == [
        "length drifting under a length-biased aggregation"]
    assert symptoms(longer, load_config(overrides=["algo.aggregation=constant"])) == []  # Dr. GRPO already


def test_rlvr_doctor_reads_a_run_directory(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in planted("rollout/truncated_frac", 0.5)))
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "doctor", str(run)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "many truncated completions" in done.stderr and "max_new_tokens" in done.stderr
    missing = subprocess.run([sys.executable, "-m", "rlvr.cli", "doctor", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "metrics.jsonl" in missing.stderr
