"""`rlvr recipe FILE`: several stages (sft, rl, rft, distill, eval) in order, each stage's model the
next one's input, every stage resumable, one summary table.

A recipe is a TOML file:

    [defaults]                 # settings every stage starts from: the tables of a config file
    eval.samples = 8

    [[stage]]
    name = "cold_start"        # unique; the stage's directory is NN-<name>
    kind = "sft"               # sft | rl | rft | distill | eval
    sft.steps = 3000           # any other keys: this stage's settings, over the defaults

    [[stage]]
    name = "final_rl"
    kind = "rl"
    reward.functions = ["boxed_math", "rlvr.tasks.arithmetic:worked_steps"]

Stage kinds, applied to the current model M (at first the recipe's starting model: model.path,
or the tiny lab model built into <out>/init):

    sft      SFT M (sft.steps on the data's solutions, or the lab's worked/bare mixture)
    rl       RL on M (train.steps under algo.*, reward.*)
    rft      sample M on the training prompts, keep the verified traces, SFT a fresh copy of
             `base` (default "start": the recipe's starting model, as DeepSeek-R1's stage 3 does)
    distill  the same with M as the teacher and `student` (a model, or tiny:key=value,...) as the
             fresh model; distill.kl_coef adds the teacher's token-level term
    eval     evaluate M under eval.* (optionally on `data`, a JSONL file); M is unchanged

Each stage runs in its own run directory (<out>/NN-<name>/, the layout of `rlvr train`) and
writes stage.json when it is done; <out>/report.html shows the stage table and links each
stage's own report.html. Running the recipe again with --resume <out> skips every done stage
and continues the first one that is not from its own checkpoints (RL and SFT at their last
checkpointed step), so a SIGKILL anywhere loses at most the steps since the last checkpoint.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from rlvr.checkpoint import fault_point, refuse_older_layout
from rlvr.commands.evaluate import evaluate_into
from rlvr.commands.rft import loadable_path, sft_on_traces, student_settings
from rlvr.config import Config, ConfigError, load_config, read_toml
from rlvr.config_paths import is_keyword, path_next_to, resolve_input_paths
from rlvr.files import atomic_write_text
from rlvr.metrics import NOT_TERMS, Reporter, read_jsonl_records
from rlvr.models import save_pretrained
from rlvr.pipeline import run as run_pipeline
from rlvr.reward import correctness_name
from rlvr.runtime import draw_report, new_run_dir, run_dir_name, tiny_lab_model
from rlvr.sources import resolve_model
from rlvr.stages.evaluate import percent, present_mean
from rlvr.tasks import task_for

STAGE_KEYS = {"name", "kind", "base", "student", "teacher", "data"}  # besides config tables
KIND_KEYS = {"rft": {"base"}, "distill": {"student", "teacher"}, "eval": {"data"}}
RECIPE_FILE, DONE = "recipe.toml", "stage.json"
RECIPE_HOME = "recipe_dir.txt"  # the recipe file's directory: relative paths in the copy still mean paths from there


@dataclass
class StageSpec:
    name: str
    kind: str
    settings: dict[str, Any]  # config tables over the defaults
    options: dict[str, str] = field(default_factory=dict)  # base / student / teacher / data


@dataclass
class Recipe:
    path: Path
    defaults: dict[str, Any]
    stages: list[StageSpec]


def load_recipe(path: str | Path, home: Path | None = None) -> Recipe:
    """Parse and check a recipe; ConfigError naming the file, the stage and the key. Relative
    paths in it (config settings and stage options) mean paths next to `home`, by default the
    file's directory (rlvr.config_paths); a resumed recipe's copy passes its original's."""
    path = Path(path)
    home = path.parent if home is None else home
    table = read_toml(path, "recipe file")
    unknown = set(table) - {"defaults", "stage", "description"}
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key(s) {sorted(unknown)}; a recipe has [defaults] and [[stage]] tables")
    stages_raw = table.get("stage")
    if not isinstance(stages_raw, list) or not stages_raw:
        raise ConfigError(f"{path}: no stages: add [[stage]] tables, each with a name and a kind ({', '.join(STAGE_KINDS)})")
    sections = {f.name for f in Config.__dataclass_fields__.values()}
    stages: list[StageSpec] = []
    for i, raw in enumerate(stages_raw, start=1):
        where = f"{path}: stage {i}"
        name, kind = raw.get("name"), raw.get("kind")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
            raise ConfigError(f"{where}: needs a name made of letters, digits and _ (got {name!r})")
        where = f"{path}: stage {i} ({name})"
        if name in sections:
            raise ConfigError(f"{where}: a stage cannot be named like the config section {name!r}")
        if any(s.name == name for s in stages):
            raise ConfigError(f"{where}: the name {name!r} is used by an earlier stage")
        if kind not in STAGE_KINDS:
            raise ConfigError(f"{where}: kind {kind!r} is not one of {list(STAGE_KINDS)}")
        options = {k: path_next_to(v, home, k) if isinstance(v, str) else v for k, v in raw.items() if k in STAGE_KEYS - {"name", "kind"}}
        for key, value in options.items():
            if key not in KIND_KEYS.get(kind, set()):
                raise ConfigError(f"{where}: {key!r} applies to stages of kind {[k for k, keys in KIND_KEYS.items() if key in keys]}, not {kind!r}")
            if not isinstance(value, str):
                raise ConfigError(f"{where}: {key} must be a string, got {value!r}")
        if kind == "distill" and "student" not in options:
            raise ConfigError(f"{where}: a distill stage needs a student (a model, or tiny:key=value,...)")
        settings = resolve_input_paths({k: v for k, v in raw.items() if k not in STAGE_KEYS}, home)
        for key in settings:
            if key not in sections:
                raise ConfigError(f"{where}: unknown key {key!r} (stage keys: {sorted(STAGE_KEYS)}; config sections: {sorted(sections)})")
        stages.append(StageSpec(name, kind, settings, options))
    defaults = table.get("defaults", {})
    if not isinstance(defaults, dict):
        raise ConfigError(f"{path}: [defaults] must be a table of config settings")
    recipe = Recipe(path, resolve_input_paths(defaults, home), stages)
    check_stages(recipe, [])
    return recipe


def check_stages(recipe: Recipe, overrides: list[str]) -> None:
    """Everything about every stage that can be checked before anything runs: its settings (with
    the overrides, and what the recipe itself will set), its options, and that it trains something."""
    names = {s.name for s in recipe.stages}
    for text in overrides:
        first = text.split("=", 1)[0].strip()
        if first in names:
            raise ConfigError(f"override {text!r}: {first!r} is a stage; give one of its settings, e.g. {first}.train.steps=100")
    for stage in recipe.stages:
        where = f"{recipe.path}: stage {stage.name}"
        extra = []
        if stage.kind == "distill":  # run_stage names the teacher and the student
            extra.append(f"distill.teacher={json.dumps(stage.options.get('teacher', '<the current model>'))}")
            student = stage.options["student"]
            if is_keyword("student", student):
                extra += student_settings(student, Path())
            else:
                resolve_model(student, f"{where}: student")
        if stage.kind == "rft" and not is_keyword("base", stage.options.get("base", "start")):
            resolve_model(stage.options["base"], f"{where}: base")
        if "data" in stage.options and not Path(stage.options["data"]).is_file():
            raise ConfigError(f"{where}: data: {stage.options['data']} is not a file")
        cfg = stage_config(recipe, stage, overrides, extra)
        steps = {"sft": ("sft.steps", cfg.sft.steps), "rft": ("sft.steps", cfg.sft.steps), "distill": ("sft.steps", cfg.sft.steps),
                 "rl": ("train.steps", cfg.train.steps)}.get(stage.kind)
        if steps is not None and steps[1] == 0:
            raise ConfigError(f"{where}: {steps[0]} = 0, so this {stage.kind} stage would train nothing")


def stage_config(recipe: Recipe, stage: StageSpec, overrides: list[str], extra: list[str] = ()) -> Config:
    """Defaults <- the stage's settings <- command-line overrides (`key=value` for all stages,
    `<stage>.key=value` for one) <- what the recipe sets (model path, output directory)."""
    names = {s.name for s in recipe.stages}
    mine = [o.split(".", 1)[1] for o in overrides if o.split(".", 1)[0] == stage.name]
    common = [o for o in overrides if o.split("=", 1)[0].split(".", 1)[0] not in names]
    layers = [(f"{recipe.path} [defaults]: ", recipe.defaults), (f"{recipe.path} stage {stage.name}: ", stage.settings)]
    try:
        cfg = load_config(None, [*common, *mine, *extra], for_training=stage.kind != "eval", tables=layers)
        task_for(cfg)  # data.source's own rules (Config.validate cannot know the tasks, which read it)
        return cfg
    except ConfigError as err:
        raise ConfigError(f"stage {stage.name}: {err}") from None


# ----------------------------------------------------------------------------- running


def run_recipe(path: str | None, overrides: list[str], reporter: Reporter, *, out: str | None = None, resume: str | None = None) -> dict:
    """Run every stage not yet done, in order; returns the summary (one row per stage)."""
    # resolved: the paths recorded in every stage's config must not depend on how --resume spells the directory
    if resume:
        out_dir = Path(resume).resolve()
        if not (out_dir / RECIPE_FILE).is_file():
            raise ConfigError(f"--resume: {resume} holds no recipe ({RECIPE_FILE} is missing)")
        if path:
            raise ConfigError(f"--resume: the recipe is {out_dir / RECIPE_FILE}; give no recipe file with --resume")
        saved = json.loads((out_dir / "overrides.json").read_text()) if (out_dir / "overrides.json").is_file() else []
        overrides = [*saved, *overrides]  # later ones win; kept for the next resume too
        refuse_older_layout(out_dir, "--resume", needs=(RECIPE_HOME,))  # without it, the copy's relative paths mean nothing
        recipe = load_recipe(out_dir / RECIPE_FILE, Path((out_dir / RECIPE_HOME).read_text()))
        check_stages(recipe, overrides)
        atomic_write_text(out_dir / "overrides.json", json.dumps(overrides) + "\n")
    else:
        if not path:
            raise ConfigError("give a recipe file (or --resume DIR)")
        recipe = load_recipe(path)
        out_dir = Path(out or run_dir_name(f"recipe-{Path(path).stem}")).resolve()
        if (out_dir / RECIPE_FILE).exists():
            raise ConfigError(f"--out: {out_dir} already holds a recipe run; continue it with --resume {out_dir}, or choose another --out")
        check_stages(recipe, overrides)  # the overrides too are valid for every stage
        new_run_dir("recipe", out_dir)
        atomic_write_text(out_dir / "overrides.json", json.dumps(overrides) + "\n")
        atomic_write_text(out_dir / RECIPE_HOME, str(recipe.path.parent.resolve()))
        atomic_write_text(out_dir / RECIPE_FILE, recipe.path.read_text())  # last: its presence marks a started recipe
    start = starting_model(recipe, overrides, out_dir)
    current, rows = start, []
    for index, stage in enumerate(recipe.stages, start=1):
        stage_dir = out_dir / f"{index:02d}-{stage.name}"
        done = stage_dir / DONE
        if done.is_file():
            row = json.loads(done.read_text())
            reporter.print(f"stage {stage.name}: done ({stage_dir})")
        else:
            reporter.print(f"[bold]stage {index}/{len(recipe.stages)}: {stage.name}[/] ({stage.kind}) -> {stage_dir}")
            started = time.perf_counter()
            row = run_stage(recipe, stage, overrides, current, start, stage_dir, reporter)
            row["seconds"] = round(time.perf_counter() - started, 1)
            atomic_write_text(done, json.dumps(row, indent=2) + "\n")
            fault_point("recipe_stage_done")
            draw_report(out_dir, reporter)  # the stage table and plot, each stage linked to its own report
        current = row["model"]
        rows.append(row)
    summary = {"recipe": str(recipe.path), "out": str(out_dir), "starting_model": start, "stages": rows}
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    draw_report(out_dir, reporter)
    reporter.print(recipe_table(rows))
    terms = reward_terms_table(rows)
    if terms is not None:
        reporter.print(terms)
    return summary


def starting_model(recipe: Recipe, overrides: list[str], out_dir: Path) -> str:
    """The recipe's starting model: model.path, or the tiny lab model built from the seed into <out>/init."""
    cfg = stage_config(recipe, recipe.stages[0], overrides)
    if cfg.model.path:
        return cfg.model.path
    init = out_dir / "init"
    if not (init / "config.json").is_file():
        tmp = out_dir / ".init.tmp"
        save_pretrained(*tiny_lab_model(cfg), tmp)
        tmp.replace(init)
    return str(init)


def run_stage(recipe: Recipe, stage: StageSpec, overrides: list[str], current: str, start: str, stage_dir: Path, reporter: Reporter) -> dict:
    """Run one stage on the current model; returns its summary row (with `model`: its output model)."""
    return STAGE_KINDS[stage.kind](recipe, stage, overrides, current, start, stage_dir, reporter)


def _here(stage_dir: Path) -> list[str]:
    # the next stage loads this one's model/: it is always saved
    return [f"run.output_dir={json.dumps(str(stage_dir))}", "train.save_model=true"]


def _train_stage(recipe: Recipe, stage: StageSpec, overrides: list[str], current: str, start: str, stage_dir: Path, reporter: Reporter) -> dict:
    """sft or rl: `rlvr train` on the current model, SFT only or RL only."""
    only = ["train.steps=0"] if stage.kind == "sft" else ["sft.steps=0"]
    only += ["eval.before_rl=true", "eval.after_rl=true"]  # the stage table compares them
    cfg = stage_config(recipe, stage, overrides, [f"model.path={json.dumps(current)}", *_here(stage_dir), *only])
    summary = run_pipeline(cfg, reporter, "recipe", resume=(stage_dir / "config.toml").is_file())
    final = summary["eval"]["after_sft" if stage.kind == "sft" else "after_rl"]
    row = _row(stage, stage_dir / "model", final, stage_dir)
    if stage.kind == "rl":  # each reward term on the held-out problems, before and after this RL
        before = summary["eval"]["before_rl"]
        row["held_out_terms"] = {name: {"before": _samples_or_greedy(before, name), "after": _samples_or_greedy(final, name)}
                                 for name in final.get("terms", {})}
        mean = f"mean@{cfg.eval.samples}"
        row["held_out_terms"][correctness_name(cfg.reward)] = {"before": before["sampled"].get(mean, before["accuracy"]),
                                                       "after": final["sampled"].get(mean, final["accuracy"])}
    return row


def _traces_stage(recipe: Recipe, stage: StageSpec, overrides: list[str], current: str, start: str, stage_dir: Path, reporter: Reporter) -> dict:
    """rft or distill: the current model's (or `teacher`'s) verified traces SFT a fresh model."""
    stage_dir.mkdir(parents=True, exist_ok=True)
    teacher = stage.options.get("teacher", current)
    if stage.kind == "rft":
        base = stage.options.get("base", "start")
        fresh = [f"model.path={json.dumps(start if is_keyword('base', base) else loadable_path(resolve_model(base, 'base'), stage_dir / 'base'))}"]
        cfg = stage_config(recipe, stage, overrides, _here(stage_dir))
    else:
        fresh = student_settings(stage.options["student"], stage_dir / "student")
        cfg = stage_config(recipe, stage, overrides, [*_here(stage_dir), f"distill.teacher={json.dumps(teacher)}"])
    name = stage.options.get("base", "start") if stage.kind == "rft" else stage.options["student"]
    report = sft_on_traces(stage.kind, resolve_model(teacher, f"stage {stage.name}"), cfg, stage_dir, fresh, reporter, name, compare=False)
    row = _row(stage, stage_dir / "model", report["models"]["fresh"], stage_dir)
    row["traces"] = {k: report["traces"][k] for k in ("prompts", "sampled", "verified", "kept", "prompts_without_survivor")}
    return row


def _eval_stage(recipe: Recipe, stage: StageSpec, overrides: list[str], current: str, start: str, stage_dir: Path, reporter: Reporter) -> dict:
    """eval: the current model evaluated, unchanged."""
    cfg = stage_config(recipe, stage, overrides, [f"model.path={json.dumps(current)}", *_here(stage_dir)])
    result = evaluate_into(resolve_model(current, f"stage {stage.name}"), cfg, stage.options.get("data"), stage_dir, reporter)
    return _row(stage, Path(current), result, stage_dir)


# What a [[stage]] of each kind runs: the current model in, its summary row (with `model`, the next
# stage's input) out. A new kind is one function here, its options in KIND_KEYS.
STAGE_KINDS = {"sft": _train_stage, "rl": _train_stage, "rft": _traces_stage, "distill": _traces_stage, "eval": _eval_stage}


def _row(stage: StageSpec, model: Path, final: dict, stage_dir: Path) -> dict:
    """A stage's line in the recipe table: its final held-out figures, and for RL each reward
    term's mean over the first and last tenth of its steps (a term rising shows here)."""
    row: dict[str, Any] = {
        "stage": stage.name, "kind": stage.kind, "dir": str(stage_dir), "model": str(model),
        "accuracy": final["accuracy"], "sampled": final.get("sampled", {}), "mean_length": final["mean_length"],
        "by_level": final.get("by_level", {}),
    }
    metrics = stage_dir / "metrics.jsonl"
    if stage.kind == "rl" and metrics.is_file():
        records = read_jsonl_records(metrics)
        tenth = max(1, len(records) // 10)
        terms = [k for k in records[0] if k.startswith("reward/") and k.count("/") == 1 and k not in NOT_TERMS - {"reward/mean"}]
        row["reward_terms"] = {
            k.split("/", 1)[1]: {"first": present_mean([r[k] for r in records[:tenth]]), "last": present_mean([r[k] for r in records[-tenth:]])}
            for k in terms
        }
    return row


def _samples_or_greedy(evaluation: dict, term: str) -> float | None:
    means = evaluation.get("terms", {}).get(term, {})
    return means.get("samples", means.get("greedy"))


def recipe_table(rows: list[dict]) -> Table:
    """One row per stage: held-out greedy accuracy, pass@1, pass@N and maj@N (N: the stage's
    eval.samples), mean length and wall time."""
    table = Table(title="recipe: held-out evaluation after each stage")
    for column in ("stage", "kind", "greedy", "N", "pass@1", "pass@N", "maj@N", "mean length", "seconds"):
        table.add_column(column, justify="left" if column in ("stage", "kind") else "right")
    for r in rows:
        ks = [int(n.split("@")[1]) for n in r["sampled"] if n.startswith("pass@")]
        n = max(ks, default=0)
        cells = [percent(r["sampled"].get(name)) for name in ("pass@1", f"pass@{n}", f"maj@{n}")] if n else ["", "", ""]
        table.add_row(r["stage"], r["kind"], f"{r['accuracy']:.1%}", str(n or ""), *cells, f"{r['mean_length']:.1f}", f"{r.get('seconds', 0):.0f}")
    return table


def reward_terms_table(rows: list[dict]) -> Table | None:
    """Each RL stage's reward terms: the training batches' mean over the first and the last tenth
    of its steps, and the mean on the held-out problems (over the samples when eval.samples > 0,
    else the greedy completions) before and after the stage."""
    table = Table(title="RL stages: reward terms in training (first -> last tenth of steps) and on held-out problems (before -> after)")
    for column in ("stage", "term", "train first", "train last", "held-out before", "held-out after"):
        table.add_column(column, justify="left" if column in ("stage", "term") else "right")
    for r in rows:
        held = r.get("held_out_terms", {})
        for name, v in r.get("reward_terms", {}).items():
            h = held.get(name, {})
            table.add_row(r["stage"], name, _num(v["first"]), _num(v["last"]), _num(h.get("before")), _num(h.get("after")))
    return table if table.row_count else None


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
