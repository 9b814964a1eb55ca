"""`rlvr rft` and `rlvr distill`: a model's verified completions become a fresh model's SFT data.

    rlvr rft runs/a                                  the RL policy's traces SFT the run's starting model
    rlvr distill --teacher runs/a --student tiny:num_layers=1
    rlvr distill --teacher runs/a --student path/to/small-model --kl-coef 0.5

Both do the same three things in one directory (--out), each resumable:

1. rejection sampling (`rlvr.stages.rejection`): rft.samples completions per training prompt
   from the source (rft: the RL policy; distill: the teacher), the verified ones kept, deduplicated,
   at most rft.max_per_prompt per prompt -> traces.jsonl, held_out.jsonl, traces_report.json;
2. SFT of a fresh model on traces.jsonl, through the same pipeline as `rlvr train` (config.toml,
   sft_metrics.jsonl, eval_after_sft*.jsonl, model/, summary.json in --out). rft's fresh model is
   the source run's *starting* model, not its policy (DeepSeek-R1's stage 3 fine-tunes the base
   model); distill's is the student. With distill.kl_coef > 0 the student also matches the
   teacher's distribution at every trace token;
3. the source, and for rft the model RL started from, evaluated on the same held-out problems
   with the same settings, and the side-by-side report rft_report.json.

No survivor at all stops with the count (exit 1); nothing is trained on an empty set.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from rich.table import Table

from rlvr.checkpoint import PHASE_PREFIX, is_complete, refuse_older_layout
from rlvr.commands.evaluate import eval_config, evaluate_source
from rlvr.config import Config, ConfigError, to_toml, with_overrides
from rlvr.config_paths import is_keyword
from rlvr.errors import RunStopped
from rlvr.files import atomic_write_text
from rlvr.metrics import Reporter
from rlvr.models import resolve_device, save_pretrained
from rlvr.pipeline import run as run_pipeline
from rlvr.reward import build_reward_terms, close_reward_terms, correctness_term, other_terms
from rlvr.runtime import apply_run_settings, check_engine, data_fingerprint, forward_precision, new_run_dir
from rlvr.sources import ModelSource, resolve_model
from rlvr.rollout.multiturn import ToolSettings
from rlvr.stages.evaluate import EvalResult, key_figures, percent, write_eval
from rlvr.stages.rejection import as_data_row, choose_prompts, rejection_sample
from rlvr.tasks import load_splits

TRACES, HELD_OUT, TRACES_REPORT = "traces.jsonl", "held_out.jsonl", "traces_report.json"


class NoSurvivors(RunStopped):
    """Rejection sampling kept nothing: there is no data to fine-tune on."""


def run_rft(source_spec: str, overrides: list[str], reporter: Reporter, *, base: str | None = None, out: str | None = None) -> dict:
    """Rejection-sampling fine-tuning: the source's verified traces SFT a fresh copy of `base`
    (default: the source run's starting model)."""
    source = resolve_model(source_spec, "rft source")
    cfg = eval_config(source, None, overrides)
    if base is None:
        if source.run_dir is None or source.run_config is None:
            raise ConfigError(f"--base: {source_spec} is a model, not a run, so it has no starting model; name the model to fine-tune with --base")
        base = f"{source.run_dir}@start"
    out_dir = new_run_dir("rft", out).resolve()  # resolved: the paths its config records must not depend on how a rerun spells --out
    fresh = loadable_path(resolve_model(base, "--base"), out_dir / "base")
    return sft_on_traces("rft", source, cfg, out_dir, [f"model.path={json.dumps(fresh)}"], reporter, base)


def run_distill(teacher_spec: str, student: str, overrides: list[str], reporter: Reporter, *, out: str | None = None) -> dict:
    """Distillation: the teacher's verified traces SFT the student (a model, or `tiny[:key=value,...]`,
    a fresh tiny model of that shape), with the token-level KL term when distill.kl_coef > 0."""
    teacher = resolve_model(teacher_spec, "--teacher")
    out_dir = new_run_dir("distill", out).resolve()  # resolved, as in run_rft
    cfg = eval_config(teacher, None, [f"distill.teacher={json.dumps(teacher_spec)}", *overrides])
    return sft_on_traces("distill", teacher, cfg, out_dir, student_settings(student, out_dir / "student"), reporter, student)


def student_settings(student: str, where: Path) -> list[str]:
    """The overrides that make `student` the fresh model: `tiny[:key=value,...]` a new tiny model of
    that shape (model.tiny.*), anything else a model or run point (written out to `where` if it is
    a checkpoint)."""
    if is_keyword("student", student):
        return ['model.path=""', *(f"model.tiny.{item.strip()}" for item in student[5:].split(",") if item.strip())]
    return [f"model.path={json.dumps(loadable_path(resolve_model(student, 'student'), where))}"]


def loadable_path(source: ModelSource, where: Path) -> str:
    """A directory (or hub id) the SFT run can load as model.path: checkpoint weights are written out once."""
    if source.checkpoint is None:
        return source.skeleton
    if not (where / "config.json").is_file():
        model, tokenizer = source.load()
        tmp = where.with_name(f".{where.name}.tmp")
        save_pretrained(model, tokenizer, tmp)
        tmp.replace(where)
    return str(where)


def sft_on_traces(kind: str, source: ModelSource, cfg: Config, out_dir: Path, model_settings: list[str], reporter: Reporter,
                  fresh_spec: str, compare: bool = True) -> dict:
    """Rejection-sample `source` under cfg.rft, then SFT the fresh model that `model_settings`
    name (model.path / model.tiny.*) on the traces in `out_dir`, and report; with `compare` the
    source (and for rft the model RL started from) are evaluated beside it. Resumable in out_dir."""
    sft_cfg = _sft_config(cfg, out_dir, model_settings)  # a bad SFT setting stops here, before any sampling
    train, held_out = load_splits(cfg)
    check_engine(cfg)
    terms = build_reward_terms(cfg.reward)
    try:
        report = _traces(source, cfg, train, held_out, out_dir, terms, reporter)
        resume = (out_dir / "config.toml").is_file()
        summary = run_pipeline(sft_cfg, reporter, kind, resume=resume)
        evals = {"fresh": summary["eval"]["after_sft"]}
        compared = [("source", source)] if compare else []
        if compare and kind == "rft" and source.run_dir is not None:
            start = _rl_start(source)
            if start is not None:
                compared.insert(0, ("rl_start", start))
        results: dict[str, EvalResult] = {}
        for label, model_source in compared:  # the same problems, settings and seed as the fresh model's evaluation
            results[label] = evaluate_source(model_source, sft_cfg, held_out, terms, reporter, label)
            write_eval(out_dir, label, results[label])
        evals.update({label: r.summary() for label, r in results.items()})
    finally:
        close_reward_terms(terms)
    names = {"rl_start": "RL start", "source": "RL policy" if kind == "rft" else "teacher", "fresh": f"{kind.upper()} model"}
    sources = {label: s.description for label, s in compared}
    sources["fresh"] = f"{fresh_spec} SFT'd on {report['kept']} verified traces ({out_dir / 'model'})"
    final = {"kind": kind, "traces": report, "models": {label: {"name": names[label], "source": sources[label], **evals[label]}
                                                     for label in [*(lbl for lbl, _ in compared), "fresh"]}}
    atomic_write_text(out_dir / f"{kind}_report.json", json.dumps(final, indent=2) + "\n")
    reporter.print(traces_table(report))
    reporter.print(models_table(final["models"]))
    return final


def _traces(source: ModelSource, cfg: Config, train, held_out, out_dir: Path, terms, reporter: Reporter) -> dict:
    """traces.jsonl and held_out.jsonl (written once; a rerun reuses them if made with the same settings)."""
    settings = {"source": source.identity, "rft": dict(cfg.rft.__dict__), "max_new_tokens": cfg.rollout.max_new_tokens, "seed": cfg.run.seed,
                "reward": to_toml(cfg.reward), "problems": data_fingerprint(train), "held_out": data_fingerprint(held_out),
                "stop": list(cfg.rollout.stop), "chat_template_kwargs": dict(cfg.data.chat_template_kwargs),
                "chat_template": hashlib.sha256(Path(cfg.data.chat_template).read_bytes()).hexdigest()[:16] if cfg.data.chat_template else ""}
    done = out_dir / TRACES_REPORT
    if done.is_file():
        report = json.loads(done.read_text())
        if report.get("settings") != settings:
            raise ConfigError(f"--out: {out_dir} holds traces made with other settings ({report.get('settings')}); choose another --out")
        reporter.print(f"reusing {report['kept']} traces in {out_dir / TRACES}")
        return report
    apply_run_settings(cfg)
    device = resolve_device(cfg.run.device)
    model, tokenizer = source.load(cfg.run.dtype, str(device))
    prompts = choose_prompts(train, cfg.rft.prompts, cfg.run.seed)
    total = -(-len(prompts) // max(1, cfg.rft.batch_size // cfg.rft.samples))
    with forward_precision(cfg, device), reporter.phase("sample", total) as bar:
        traces = rejection_sample(model, tokenizer, prompts, cfg.data, cfg.rft, cfg.rft.sampling(cfg.rollout.max_new_tokens, cfg.rollout.stop),
                                  correctness_term(terms), bar, source=source.spec, seed=cfg.run.seed, engine=cfg.rollout.engine,
                                  others=other_terms(terms), tools=ToolSettings.from_config(cfg.rollout))
    report = {**traces.report, "settings": settings}
    if not traces.rows:
        raise NoSurvivors(
            f"{source.description}: no verified completion among {report['sampled']} sampled ({report['samples_per_prompt']} for each of "
            f"{report['prompts']} prompts; {report['verified']} verified, {report['verified_but_cut']} of them cut at max_new_tokens): "
            "nothing to fine-tune on. Sample more (rft.samples), at another temperature, or from a stronger model"
        )
    atomic_write_text(out_dir / TRACES, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in traces.rows))
    atomic_write_text(out_dir / HELD_OUT, "".join(json.dumps(as_data_row(e, cfg.data), ensure_ascii=False) + "\n" for e in held_out))
    atomic_write_text(done, json.dumps(report, indent=2) + "\n")  # last: its presence means the traces are complete
    return report


def _sft_config(cfg: Config, out_dir: Path, model_settings: list[str]) -> Config:
    """The SFT run: the same settings, trained on the traces, evaluated on the same held-out problems, no RL."""
    if cfg.sft.steps == 0:
        raise ConfigError(
            "sft.steps: is 0 (the source's config trained no SFT), but fine-tuning on the verified traces is what this command "
            "does; give the SFT length, e.g. sft.steps=3000"
        )
    paths = [f"data.train_path={json.dumps(str(out_dir / TRACES))}", f"data.eval_path={json.dumps(str(out_dir / HELD_OUT))}",
             f"run.output_dir={json.dumps(str(out_dir))}"]
    # several traces of one problem share its id; the traces train SFT only; the next stage needs model/
    return with_overrides(cfg, ["data.source=jsonl", "data.mix=[]", "data.answer_format=plain", "data.max_rows=0", "eval.before_rl=true", *paths, 'data.id_field=""', "train.steps=0", "train.save_model=true", *model_settings])


def _rl_start(source: ModelSource) -> ModelSource | None:
    """The model a run's RL started from: after its cold-start SFT, else its starting model."""
    assert source.run_dir is not None and source.run_config is not None
    refuse_older_layout(source.run_dir, "rft source")  # an older rlvr's stage-sft would send it to @start, silently
    if is_complete(source.run_dir / "checkpoints" / f"{PHASE_PREFIX}sft"):
        return resolve_model(f"{source.run_dir}@sft")
    return resolve_model(f"{source.run_dir}@start") if source.run_config.train.steps else None


def traces_table(report: dict) -> Table:
    table = Table(title=f"rejection sampling: {report['samples_per_prompt']} samples per prompt from {report['source']}")
    for column in ("level", "prompts", "sampled", "verified", "distinct", "kept", "no survivor"):
        table.add_column(column, justify="right")
    rows = [(level, c) for level, c in report["by_level"].items()] + [("all", report)]
    for level, c in rows:
        table.add_row(level, str(c["prompts"]), str(c["sampled"]), f"{c['verified']} ({c['verified'] / max(c['sampled'], 1):.0%})",
                      str(c["distinct_verified"]), str(c["kept"]), str(c["prompts_without_survivor"]))
    return table


def models_table(models: dict[str, dict]) -> Table:
    table = Table(title="held-out evaluation, same problems and settings")
    table.add_column("model")
    table.add_column("greedy", justify="right")
    figures = key_figures(name for m in models.values() for name in m["sampled"])
    for name in figures:
        table.add_column(name, justify="right")
    table.add_column("mean length", justify="right")
    for m in models.values():
        table.add_row(m["name"], f"{m['accuracy']:.1%}", *[percent(m["sampled"].get(n)) for n in figures],
                      f"{m['mean_length']:.1f}")
    return table
