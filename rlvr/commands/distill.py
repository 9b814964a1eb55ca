"""`rlvr distill --on-policy`: the student samples, the teacher grades every token it wrote.

    rlvr distill --on-policy --teacher runs/a --student tiny:num_layers=1
    rlvr distill --on-policy --teacher runs/a --student path/to/small-model sft.steps=0 train.steps=500

The off-policy form (`rlvr distill` without the flag, rlvr/commands/rft.py) fine-tunes the student
on the teacher's verified traces: the student imitates states the teacher reached, never its own
mistakes. Here the student runs the RL loop on the teacher run's task and settings, and each
token it samples gets the advantage coef x (log pi_teacher - log pi_student) of that token
(`distill.on_policy_coef`, rlvr.algorithms.distillation_advantages): a dense, per-token signal on
the student's own distribution that descends KL(student || teacher). With
`distill.verifier_advantage` > 0 the verifier's group advantage joins it; by default (0) the
verifier only measures.

The student gets the teacher run's cold start settings (`sft.*`: its own SFT on the task's data
before distillation; `sft.steps=0` distills from the student as it is). The teacher is then
evaluated on the same held-out problems and settings, and `distill_report.json` holds both, as
the off-policy form writes it. Rerun with the same --out to continue a stopped run.
"""

from __future__ import annotations

import json

from rlvr.commands.evaluate import eval_config, evaluate_source
from rlvr.commands.rft import models_table, student_settings
from rlvr.config import ConfigError, with_overrides
from rlvr.files import atomic_write_text
from rlvr.metrics import Reporter
from rlvr.pipeline import run as run_pipeline
from rlvr.reward import build_reward_terms, close_reward_terms
from rlvr.runtime import new_run_dir
from rlvr.sources import resolve_model
from rlvr.stages.evaluate import write_eval
from rlvr.tasks import load_splits


def run_on_policy_distill(teacher_spec: str, student: str, overrides: list[str], reporter: Reporter, *, out: str | None = None) -> dict:
    """The student (a model, a run point, or `tiny[:key=value,...]`) trained by RL on the teacher's per-token
    log-probs of its own samples, under the teacher run's settings (or the defaults, for a teacher that is a
    model) and `overrides`; then both evaluated side by side."""
    teacher = resolve_model(teacher_spec, "--teacher")
    out_dir = new_run_dir("distill", out).resolve()  # resolved: the paths its config records must not depend on how a rerun spells --out
    # The teacher run's algorithm settings come along; those that would drop or blur the teacher's per-token signal are
    # set to what carries it (a DAPO run's dynamic sampling, GSPO's sequence ratio, KL in the reward); an override wins.
    carried = ["algo.dynamic_sampling=false", 'algo.ratio_level="token"', 'algo.kl_in="loss"']
    base = eval_config(teacher, None, [f"distill.teacher={json.dumps(teacher_spec)}", "distill.on_policy_coef=1.0",
                                       "distill.verifier_advantage=0.0", *carried, *overrides])
    if base.train.steps == 0:
        raise ConfigError("train.steps: is 0 (the teacher's config trained no RL), but the RL loop is how on-policy distillation "
                          "trains; give its length, e.g. train.steps=250")
    if base.distill.on_policy_coef == 0:
        raise ConfigError("distill.on_policy_coef: is 0, so the teacher would teach nothing; drop the override or run `rlvr train`")
    cfg = with_overrides(base, [f"run.output_dir={json.dumps(str(out_dir))}", "train.save_model=true", "eval.after_rl=true",
                                *student_settings(student, out_dir / "student")])
    summary = run_pipeline(cfg, reporter, "distill", resume=(out_dir / "config.toml").is_file())
    held_out = load_splits(cfg)[1]
    terms = build_reward_terms(cfg.reward)
    try:  # the same problems, settings and seed as the student's evaluation
        result = evaluate_source(teacher, cfg, held_out, terms, reporter, "source")
    finally:
        close_reward_terms(terms)
    write_eval(out_dir, "source", result)
    student_eval = summary["eval"]["after_rl"]
    final = {"kind": "distill", "mode": "on_policy", "coef": cfg.distill.on_policy_coef, "verifier_advantage": cfg.distill.verifier_advantage,
             "models": {"source": {"name": "teacher", "source": teacher.description, **result.summary()},
                        "fresh": {"name": "ON-POLICY DISTILL model", "source": f"{student} taught on-policy by {teacher_spec} "
                                  f"({summary['rl_steps']} RL steps; {out_dir / 'model'})", **student_eval}}}
    atomic_write_text(out_dir / "distill_report.json", json.dumps(final, indent=2) + "\n")
    reporter.print(models_table(final["models"]))
    return final
