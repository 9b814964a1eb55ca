"""`rlvr doctor RUN_DIR`: a finished (or running) run's metrics mapped to the known failure modes
of RLVR and the patch each one has, every verdict citing the metric and the steps that show it.

Each rule is a pure function of the step records (metrics.jsonl) and the run's config, compares
the first and last parts of the run (quarters, or the second half) and fires only past a margin,
so noise does not raise an alarm: it is tested on a planted symptom each and stays quiet on the
lab's own healthy run (tests/test_doctor.py). The thresholds are stated in each rule.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

from rlvr.config import Config

MIN_STEPS = 8  # fewer steps than this say nothing about a trend
PROXY_GAP_RISE = 0.15  # proxy-minus-strict up this much (first quarter -> last): the noise of a stable proxy is ~0.05


@dataclass(frozen=True)
class Verdict:
    symptom: str
    evidence: str  # the metric, its values and the steps
    patch: str  # what the field found fixes it, and the setting to try


def _values(records: list[dict], key: str, part: slice) -> list[float]:
    return [float(r[key]) for r in records[part] if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]


def _mean(records: list[dict], key: str, part: slice) -> float | None:
    values = _values(records, key, part)
    return statistics.fmean(values) if values else None


def _steps(records: list[dict], part: slice) -> str:
    chosen = records[part]
    return f"steps {chosen[0]['step']}-{chosen[-1]['step']}" if chosen else "no steps"


def _quarters(n: int) -> tuple[slice, slice, slice]:
    q = max(1, n // 4)
    return slice(0, q), slice(n - q, n), slice(n // 2, n)


def reward_flat_at_zero(records: list[dict], cfg: Config | None) -> Verdict | None:
    """Reward below 0.01 over the second half: nothing is ever rewarded, so nothing is learned."""
    _, _, late = _quarters(len(records))
    mean = _mean(records, "reward/mean", late)
    if mean is None or mean >= 0.01:
        return None
    return Verdict("reward flat at zero", f"reward/mean averaged {mean:.3f} over {_steps(records, late)}",
                   "the policy never produces a rewarded answer: a cold start (sft.steps) that teaches the answer format, or "
                   "check the format the verifier expects (e.g. \\boxed{}) against samples.jsonl")


def groups_all_equal(records: list[dict], cfg: Config | None) -> Verdict | None:
    """Three groups in four (or more) all-equal over the second half: most of each batch has no signal."""
    _, _, late = _quarters(len(records))
    mean = _mean(records, "reward/frac_groups_all_equal", late)
    if mean is None or mean < 0.75:
        return None
    on = cfg is not None and cfg.algo.dynamic_sampling
    return Verdict("most groups all-equal", f"reward/frac_groups_all_equal averaged {mean:.2f} over {_steps(records, late)}",
                   ("dynamic sampling is on: pass over solved problems too (data.skip_solved_rate = 1.0)" if on else
                    "DAPO's dynamic sampling (algo.dynamic_sampling = true) fills the batch with groups that teach; a curriculum "
                    "(data.skip_solved_rate = 1.0) stops sampling what every sample solves"))


def entropy_collapse(records: list[dict], cfg: Config | None) -> Verdict | None:
    """Sampling entropy down by 70% or more from the first quarter to the last while the reward
    rose by less than 0.02: the policy is narrowing without getting better."""
    first, last, _ = _quarters(len(records))
    h0, h1 = _mean(records, "rollout/entropy", first), _mean(records, "rollout/entropy", last)
    r0, r1 = _mean(records, "reward/mean", first), _mean(records, "reward/mean", last)
    if None in (h0, h1, r0, r1) or h0 <= 0 or h1 > 0.3 * h0 or r1 - r0 >= 0.02:
        return None
    return Verdict("entropy collapsing while reward is flat",
                   f"rollout/entropy {h0:.3f} ({_steps(records, first)}) -> {h1:.3f} ({_steps(records, last)}); reward/mean "
                   f"{r0:.3f} -> {r1:.3f}",
                   "clip-higher (DAPO): a larger upper clip lets unlikely tokens gain probability (algo.clip_high = 0.28); or "
                   "adaptive entropy control (Skywork-OR1), an entropy bonus that acts only while entropy is below a target "
                   "(algo.entropy_adaptive = true, algo.entropy_target = the entropy to hold)")


def length_drift(records: list[dict], cfg: Config | None) -> Verdict | None:
    """Completions 1.5x longer by the last quarter under a per-sequence mean (which weighs a long
    wrong answer's tokens less, so length is not penalised where it should be)."""
    if cfg is None or cfg.algo.aggregation != "seq_mean_token_mean":
        return None
    first, last, _ = _quarters(len(records))
    l0, l1 = _mean(records, "rollout/mean_length", first), _mean(records, "rollout/mean_length", last)
    if None in (l0, l1) or l0 <= 0 or l1 < 1.5 * l0:
        return None
    return Verdict("length drifting under a length-biased aggregation",
                   f"rollout/mean_length {l0:.1f} ({_steps(records, first)}) -> {l1:.1f} ({_steps(records, last)}) with "
                   "algo.aggregation = seq_mean_token_mean",
                   "Dr. GRPO removes the length bias: algo.aggregation = constant and algo.std_scale = none (algo.preset = dr_grpo)")


def ratio_spikes(records: list[dict], cfg: Config | None) -> Verdict | None:
    """An importance ratio above 10 in at least 3 steps: token-level ratios over long completions
    blow up (one token can dominate the update)."""
    spikes = [r["step"] for r in records if isinstance(r.get("loss/ratio_max"), (int, float)) and r["loss/ratio_max"] > 10]
    if len(spikes) < 3:
        return None
    worst = max(r["loss/ratio_max"] for r in records if r["step"] in spikes)
    return Verdict("importance-ratio spikes", f"loss/ratio_max > 10 at steps {_list(spikes)} (largest {worst:.1f})",
                   "one ratio per sequence (GSPO: algo.preset = gspo, or algo.ratio_level = sequence), or a dual clip (algo.dual_clip = 3)")


def logp_mismatch(records: list[dict], cfg: Config | None) -> Verdict | None:
    """The sampler's log-probs more than 0.5 nats from the learner's in a tenth of the steps or more."""
    off = [r["step"] for r in records if isinstance(r.get("rollout/logp_mismatch_max"), (int, float)) and r["rollout/logp_mismatch_max"] > 0.5]
    if len(off) < max(3, len(records) // 10):
        return None
    on = cfg is not None and cfg.algo.tis_cap > 0
    return Verdict("sampler and learner disagree on log-probs", f"rollout/logp_mismatch_max > 0.5 at steps {_list(off)}",
                   "truncated importance sampling against the sampler's log-probs corrects for it" +
                   (" (algo.tis_cap is on: lower max_staleness, or look for a numerics difference)" if on else " (algo.tis_cap = 2)"))


def truncation(records: list[dict], cfg: Config | None) -> Verdict | None:
    """A fifth or more of the completions cut at max_new_tokens over the second half."""
    _, _, late = _quarters(len(records))
    mean = _mean(records, "rollout/truncated_frac", late)
    if mean is None or mean < 0.2:
        return None
    return Verdict("many truncated completions", f"rollout/truncated_frac averaged {mean:.2f} over {_steps(records, late)}",
                   "a larger budget (rollout.max_new_tokens), DAPO's overlong shaping (reward.overlong_buffer_frac = 0.2) or "
                   "leaving truncated completions out of the loss (algo.mask_truncated = true)")


def proxy_pulls_away(records: list[dict], cfg: Config | None) -> Verdict | None:
    """The trained reward's lead over the strict verifier (hack/proxy_minus_strict, logged when the
    trained reward is not boxed_math) up by PROXY_GAP_RISE or more from the first quarter to the last: the
    policy is learning what the reward pays for and the strict verifier refuses."""
    first, last, _ = _quarters(len(records))
    g0, g1 = _mean(records, "hack/proxy_minus_strict", first), _mean(records, "hack/proxy_minus_strict", last)
    if None in (g0, g1) or g1 - g0 < PROXY_GAP_RISE:
        return None
    detectors = {k: _mean(records, k, last) for k in sorted({k for r in records[last] for k in r}) if k.startswith("hack/") and
                 k not in ("hack/proxy_minus_strict", "hack/proxy_minus_strict_growth", "hack/flagged")
                 and not k.endswith("/wrong_over_right")}  # a learned term's ranking against the verifier, not a share flagged
    worst = max(detectors, key=lambda k: detectors[k] or 0.0, default=None)
    seen = f"; the most flagged pattern is {worst} ({detectors[worst]:.0%} of the last quarter's completions)" if worst and detectors[worst] else ""
    return Verdict("the trained reward pulls away from the strict verifier (reward hacking)",
                   f"hack/proxy_minus_strict {g0:.2f} ({_steps(records, first)}) -> {g1:.2f} ({_steps(records, last)}){seen}",
                   "audit the reward on the run's own completions (rlvr audit-reward SPEC --samples RUN_DIR), train on the strict "
                   "verifier (reward.functions = [\"boxed_math\"]), and let the monitor stop such a run early (monitor.stop_on_hack = true)")


RULES: list[Callable[[list[dict], Config | None], Verdict | None]] = [
    reward_flat_at_zero, groups_all_equal, entropy_collapse, length_drift, ratio_spikes, logp_mismatch, truncation, proxy_pulls_away,
]


def diagnose(records: list[dict], cfg: Config | None = None) -> list[Verdict]:
    """Every rule's verdict on the run (none for a run shorter than MIN_STEPS steps)."""
    if len(records) < MIN_STEPS:
        return []
    return [v for rule in RULES if (v := rule(records, cfg)) is not None]


def _list(steps: list[int], show: int = 6) -> str:
    head = ", ".join(map(str, steps[:show]))
    return head + (f" and {len(steps) - show} more" if len(steps) > show else "")
