"""Mode fusion and the thinking budget on the lab: one model trained on both modes against two
single-mode models trained for the same budget, and accuracy against the thinking budget.

    .venv/bin/python bench/mode_fusion.py                       # three labs one after another, then the budget sweeps
    .venv/bin/python bench/mode_fusion.py --out runs/fusion -- run.seed=1

Arms, each `rlvr lab` with the same SFT (3,000 steps of 64) and RL (250 steps, train.lr = 5e-5:
at the lab's 2e-4 RL lowered every one of these models, which have no second behaviour for RL to
select), on the thinking-format task (`<think>working</think>\\boxed{answer}`; a direct answer is
`<think></think>\\boxed{answer}`):

  fused   task.format = fused: each training prompt ends in /think or /no_think (half each) and its
          target follows the flag; reward boxed_math + 0.2 mode_format; evaluated on every
          held-out problem in both modes
  think   task.format = think, sft.worked_fraction = 1: thinking only; reward boxed_math + 0.2 think_format
  direct  task.format = think, sft.worked_fraction = 0: direct answers only; reward boxed_math

Then `rlvr eval <arm> --thinking-budget ...` for the think and fused arms. Prints the per-mode
table and the budget table, and draws both budget curves into one picture (--plot).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ARMS = {
    "fused": ["task.format=fused", 'reward.functions=["boxed_math","mode_format"]', "reward.weights=[1.0,0.2]", "reward.correctness=boxed_math"],
    "think": ["task.format=think", "sft.worked_fraction=1.0", 'reward.functions=["boxed_math","think_format"]', "reward.weights=[1.0,0.2]",
              "reward.correctness=boxed_math"],
    "direct": ["task.format=think", "sft.worked_fraction=0.0"],
}
BUDGETS = "0,2,4,8,12,16,24,32"


def rlvr(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "rlvr.cli", *args, "--quiet"], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/mode-fusion"))
    parser.add_argument("--plot", type=Path, default=None, help="also draw the two budget curves into this PNG")
    parser.add_argument("overrides", nargs="*", help="dotted settings for every arm")
    args = parser.parse_args()
    common = ["train.lr=5e-5", *args.overrides]
    for arm, settings in ARMS.items():
        run_dir = args.out / arm
        if not (run_dir / "summary.json").exists():
            rlvr("lab", *settings, *common, f"run.output_dir={json.dumps(str(run_dir))}")
    for arm in ("think", "fused"):
        if not (args.out / f"budget-{arm}" / "summary.json").exists():
            rlvr("eval", str(args.out / arm), "--thinking-budget", BUDGETS, "--out", str(args.out / f"budget-{arm}"))

    print("| model | prompts | after SFT: greedy | mean length | after RL: greedy | mean length | format as asked |")
    print("|---|---|---|---|---|---|---|")
    for arm in ARMS:
        s = json.loads((args.out / arm / "summary.json").read_text())["eval"]
        sft, rl = s["after_sft"], s["after_rl"]
        rows = [(mode, sft["by_mode"][mode], rl["by_mode"][mode]) for mode in rl["by_mode"]] if rl["by_mode"] else [("-", sft, rl)]
        for mode, a, b in rows:
            print(f"| {arm} | {mode} | {a['accuracy']:.1%} | {a['mean_length']:.1f} | {b['accuracy']:.1%} | {b['mean_length']:.1f} | "
                  f"{asked_format(args.out / arm, arm, mode):.0%} |")

    curves = {arm: json.loads((args.out / f"budget-{arm}" / "summary.json").read_text())["budgets"] for arm in ("think", "fused")}
    budgets = list(curves["think"])
    print()
    print("| thinking budget | " + " | ".join(budgets) + " |")
    print("|---|" + "---|" * len(budgets))
    for arm in ("think", "fused"):
        for mode in ["all"] + list(curves[arm]["none"].get("by_mode", {})):
            cells = [c["accuracy"] if mode == "all" else c["by_mode"][mode]["accuracy"] for c in curves[arm].values()]
            print(f"| {arm} ({mode} prompts) | " + " | ".join(f"{v:.1%}" for v in cells) + " |")
        print(f"| {arm}: mean length | " + " | ".join(f"{c['mean_length']:.1f}" for c in curves[arm].values()) + " |")
    if args.plot:
        plot(curves, args.plot)


def asked_format(run_dir: Path, arm: str, mode: str) -> float:
    """The share of the final greedy completions in the form the arm's prompts ask for (mode_format:
    a non-empty block for thinking, an empty block for a direct answer)."""
    from rlvr.verifiers.format import mode_format

    rows = [json.loads(line) for line in (run_dir / "eval_after_rl.jsonl").read_text().splitlines()]
    wanted = mode if arm == "fused" else ("think" if arm == "think" else "no_think")
    mine = [r for r in rows if arm != "fused" or r["prompt"].endswith("/" + mode)]
    return sum(mode_format(r["completion"], r["answer"], wanted) for r in mine) / len(mine)


def plot(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (acc, length) = plt.subplots(1, 2, figsize=(10, 4))
    series = [("think", "all", "thinking-only model"), ("fused", "think", "fused model, /think prompts"),
              ("fused", "no_think", "fused model, /no_think prompts")]
    for arm, mode, label in series:
        points = sorted((int(b), c) for b, c in curves[arm].items() if b != "none")
        xs = [b for b, _ in points]
        pick = (lambda c: c) if mode == "all" else (lambda c, m=mode: c["by_mode"][m])
        acc.plot(xs, [pick(c)["accuracy"] for _, c in points], marker="o", label=label)
        length.plot(xs, [pick(c)["mean_length"] for _, c in points], marker="o", label=label)
    for ax, name in ((acc, "held-out greedy accuracy"), (length, "mean completion length (tokens)")):
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel("thinking budget (tokens)")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    acc.set_ylim(-0.02, 1.02)
    fig.suptitle("The lab model against the thinking budget (budget forcing: </think> after B thinking tokens)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
