"""On-policy against off-policy distillation of the RL'd lab model into a 1-layer student, seeds side by side.

    .venv/bin/python bench/on_policy_distill.py --teacher runs/opd/teacher --seeds 0 1 2 --on-steps 400

Per seed, each arm as a user types it (one after another, one thread each; the sampling of the
teacher's traces counts against off-policy distillation, the student's cold start against
on-policy):

  off      `rlvr distill --teacher T --student tiny:num_layers=1`: SFT on the teacher's verified traces;
  on       `rlvr distill --on-policy --teacher T --student tiny:num_layers=1 train.steps=N`: the student's
           own cold start (the teacher run's sft.*, on the task's data), then N steps in which the
           teacher grades every token the student samples (distill.on_policy_coef = 1, no verifier advantage);
  off+on   (with --then-on M) `rlvr distill --on-policy --teacher T --student <off's model> sft.steps=0 train.steps=M`:
           the off-policy student continued on-policy (--then-on-lr: at this train.lr).

Every arm is evaluated on the teacher run's held-out problems (greedy; pass@k and maj@k from
eval.samples = 8). The table gives each arm's mean and per-seed figures and wall seconds. An arm
with a result is not rerun.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def rlvr(args: list[str], out: Path, threads: int) -> float:
    """Run one arm unless its result exists; its wall seconds (kept in a marker file)."""
    marker = out / "bench_seconds.json"
    if marker.is_file():
        return json.loads(marker.read_text())["seconds"]
    started = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".log"), "w") as log:
        subprocess.run([sys.executable, "-m", "rlvr.cli", *args, f"run.threads={threads}", "--quiet"], check=True, stdout=log,
                       stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - started
    marker.write_text(json.dumps({"seconds": seconds}))
    print(f"{out.name}: {seconds:.0f} s", file=sys.stderr)
    return seconds


def student_figures(out: Path) -> dict:
    report = json.loads((out / "distill_report.json").read_text())
    e = report["models"]["fresh"]
    n = max(int(k.split("@")[1]) for k in e["sampled"] if k.startswith("pass@"))
    return {"greedy": e["accuracy"], "pass@1": e["sampled"]["pass@1"], f"pass@{n}": e["sampled"][f"pass@{n}"],
            f"maj@{n}": e["sampled"][f"maj@{n}"], "length": e["mean_length"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", type=Path, required=True, help="a finished lab run directory")
    parser.add_argument("--student", default="num_layers=1", help="model.tiny settings of the student, comma-separated")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--on-steps", type=int, default=400, help="RL steps of the on-policy arm (pick them for equal wall time)")
    parser.add_argument("--then-on", type=int, default=0, help="also continue the off-policy student on-policy for this many steps")
    parser.add_argument("--then-on-lr", type=float, default=0.0, help="train.lr of the off+on arm (0: the teacher run's)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("runs/opd"))
    parser.add_argument("overrides", nargs="*", help="dotted settings for every arm")
    args = parser.parse_args()
    student = f"tiny:{args.student}"
    common = ["eval.samples=8", *args.overrides]
    results: dict[str, list[tuple[int, dict, float]]] = {"off": [], "on": [], "off+on": []}
    for seed in args.seeds:
        base = [f"run.seed={seed}", *common]
        off = args.out / f"off-s{seed}"
        seconds = rlvr(["distill", "--teacher", str(args.teacher), "--student", student, *base, "--out", str(off)], off, args.threads)
        results["off"].append((seed, student_figures(off), seconds))
        on = args.out / f"on-s{seed}"
        seconds = rlvr(["distill", "--on-policy", "--teacher", str(args.teacher), "--student", student, f"train.steps={args.on_steps}",
                        *base, "--out", str(on)], on, args.threads)
        results["on"].append((seed, student_figures(on), seconds))
        if args.then_on:
            lr = [f"train.lr={args.then_on_lr}"] if args.then_on_lr else []
            both = args.out / (f"off+on-s{seed}" if not lr else f"offon-lr{args.then_on_lr:g}-s{seed}")
            seconds = rlvr(["distill", "--on-policy", "--teacher", str(args.teacher), "--student", str(off / "model"), "sft.steps=0",
                            f"train.steps={args.then_on}", *lr, *base, "--out", str(both)], both, args.threads)
            results["off+on"].append((seed, student_figures(both), seconds + results["off"][-1][2]))
    teacher = json.loads((args.teacher / "summary.json").read_text())["eval"]["after_rl"]
    print(f"teacher {args.teacher}: greedy {teacher['accuracy']:.1%}; student model.tiny {args.student}")
    keys = list(results["off"][0][1])
    print("| arm | " + " | ".join(keys) + " | wall s | per seed (greedy) |")
    print("|---" * (len(keys) + 3) + "|")
    for arm, rows in results.items():
        if not rows:
            continue
        cells = []
        for key in keys:
            values = [r[key] for _, r, _ in rows]
            spread = f" ± {statistics.stdev(values) * (1 if key == 'length' else 100):.1f}" if len(values) > 1 else ""
            mean = statistics.mean(values)
            cells.append(f"{mean:.1f}{spread}" if key == "length" else f"{mean:.1%}{spread}")
        seeds = ", ".join(f"s{s}: {r['greedy']:.1%}" for s, r, _ in rows)
        print(f"| {arm} | " + " | ".join(cells) + f" | {statistics.mean(s for _, _, s in rows):.0f} | {seeds} |")


if __name__ == "__main__":
    main()
