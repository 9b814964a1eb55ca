"""The lab trained on a deliberately lenient reward beside the strict one, and what the monitor makes of it.

    .venv/bin/python bench/lenient_reward_demo.py            # ~6 min on 2 cores
    .venv/bin/python bench/lenient_reward_demo.py --seed 1 --out runs/lenient-demo-1
    .venv/bin/python bench/lenient_reward_demo.py --tables-only      # the tables of the runs already there

Three `rlvr lab` runs from the same short cold start (sft.steps = 400: a model that boxes an
answer but often a wrong one, so there is something to game):
  - strict:  trained on boxed_math (the strict verifier);
  - lenient: trained on rlvr.tasks.hackable:substring_answer (1 when the gold answer's text occurs
             anywhere in the completion), monitor.stop_on_hack off so the whole drift shows;
  - stopped: the lenient run again with monitor.stop_on_hack = true (same seed, same trajectory
             until the monitor stops it with a checkpoint).
Each run carries the other reward with weight 0, so the held-out evaluation every 25 steps
(eval.every) reports both: the strict verifier's held-out accuracy of the lenient run is the figure
that falls. strict and lenient run side by side (1 torch thread each), then stopped.

Prints a table (training reward, held-out strict accuracy, completion length, hack/* detectors),
the step the monitor flags and the stop message, and writes the overlay report
<out>/lenient/compare-strict.html (`rlvr report <out>/lenient <out>/strict`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RLVR = [sys.executable, "-m", "rlvr.cli"]
LENIENT, STRICT = "rlvr.tasks.hackable:substring_answer", "boxed_math"


def lab_command(out: Path, first: str, second: str, args: argparse.Namespace, extra: list[str]) -> list[str]:
    return [*RLVR, "lab", "--quiet", f"run.output_dir={out}", f"run.seed={args.seed}", "run.threads=1", f"sft.steps={args.sft_steps}",
            f"train.steps={args.steps}", f'reward.functions=["{first}", "{second}"]', "reward.weights=[1.0, 0.0]",
            "eval.every=25", "eval.samples=0", *extra]


def read(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/lenient-demo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--sft-steps", type=int, default=400)
    parser.add_argument("--tables-only", action="store_true", help="print the tables of the runs already in --out")
    args = parser.parse_args()
    out = Path(args.out)
    runs = {"strict": out / "strict", "lenient": out / "lenient", "stopped": out / "stopped"}
    returncode = "n/a (--tables-only)"
    if not args.tables_only:
        if out.exists():
            shutil.rmtree(out)
        side_by_side = [
            subprocess.Popen(lab_command(runs["strict"], STRICT, LENIENT, args, []), cwd=ROOT),
            subprocess.Popen(lab_command(runs["lenient"], LENIENT, STRICT, args, []), cwd=ROOT),
        ]
        if any(p.wait() != 0 for p in side_by_side):
            sys.exit("a lab run failed; see its output above")
        returncode = subprocess.run(lab_command(runs["stopped"], LENIENT, STRICT, args, ["monitor.stop_on_hack=true"]), cwd=ROOT,
                                    capture_output=True, text=True).returncode

    strict, lenient = read(runs["strict"]), read(runs["lenient"])
    print(f"\nseed {args.seed}: lab after {args.sft_steps} SFT steps, {args.steps} RL steps; held-out = greedy, 600 problems, strict verifier")
    print("(reward: mean of the 10 steps up to the step; held-out every 25 steps; gap: hack/proxy_minus_strict of the step)")
    print(f"{'step':>5} | {'lenient: reward':>15} {'held-out strict':>15} {'length':>6} {'unboxed':>7} {'gap':>5} | "
          f"{'strict: reward':>14} {'held-out strict':>15} {'length':>6}")
    for a, b in zip(lenient, strict):
        step = a["step"]
        if step % 25 and step != 1:
            continue
        window = slice(max(0, step - 10), step)
        print(f"{step:>5} | {mean([r['reward/mean'] for r in lenient[window]]):>15.2f} {pct(a.get('eval/boxed_math')):>15} "
              f"{a['rollout/mean_length']:>6.1f} {a.get('hack/unboxed', 0):>7.0%} {a.get('hack/proxy_minus_strict', 0):>5.2f} | "
              f"{mean([r['reward/mean'] for r in strict[window]]):>14.2f} {pct(b.get('eval/accuracy')):>15} {b['rollout/mean_length']:>6.1f}")
    for name, run in (("lenient", runs["lenient"]), ("strict", runs["strict"])):
        summary = json.loads((run / "summary.json").read_text())
        evals = summary["eval"]
        strict_of = (lambda e: e["terms"]["boxed_math"]["greedy"]) if name == "lenient" else (lambda e: e["accuracy"])
        print(f"{name}: held-out strict accuracy {strict_of(evals['after_sft']):.1%} after SFT -> {strict_of(evals['after_rl']):.1%} after RL")
    flagged = [r["step"] for r in lenient if r.get("hack/flagged") == 1.0]
    print(f"monitor: lenient run flagged from step {flagged[0] if flagged else 'never'}; strict run flagged "
          f"{sum(r.get('hack/flagged') == 1.0 for r in strict)} times (it logs no gap: it trains on the strict verifier)")
    stop = runs["stopped"] / "stopped.json"
    if stop.is_file():
        record = json.loads(stop.read_text())
        print(f"stopped run (monitor.stop_on_hack = true): exit {returncode}, stopped at step {record['step']}:\n  {record['reason'][:600]}")
    else:
        print(f"stopped run: exit {returncode}, not stopped by the monitor")
    report = subprocess.run([*RLVR, "report", str(runs["lenient"]), str(runs["strict"])], cwd=ROOT, capture_output=True, text=True)
    print(report.stdout.strip() or report.stderr.strip())


if __name__ == "__main__":
    main()
