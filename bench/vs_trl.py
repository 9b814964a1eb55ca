"""rlvr vs TRL's GRPOTrainer on identical work, and rlvr's cost as the work grows (issue 6).

    .venv/bin/pip install -e ".[bench]"                      # TRL (and Math-Verify), benchmark only
    .venv/bin/python bench/vs_trl.py                          # A/B: beta 0 and 0.04, 3 runs x 20 steps each
    .venv/bin/python bench/vs_trl.py --runs 1 --steps 2       # smoke run
    .venv/bin/python bench/vs_trl.py --model runs/x/sft       # an existing cold start instead of building one
    .venv/bin/python bench/vs_trl.py --scaling                # s/step vs G, completion length, model size (rlvr, TRL)
    .venv/bin/python bench/vs_trl.py --profile --steps 5      # torch profiler op table of each trainer
    .venv/bin/python bench/vs_trl.py --model models/smollm2 --reward even_length --betas 0 --runs 1 --steps 3 \
        --max-new-tokens 96 --rlvr-variant onepass=run.logits_budget_mib=100000   # a real model (docs/benchmarks.md)

The work, the same for both: one tiny Qwen3 + character tokenizer built with
`rlvr.models.build_tiny_model` and `save_pretrained` (then, by default, cold-started with the
lab's SFT through `rlvr lab`, so that rewards vary within groups: a random model scores 0
everywhere, and rlvr would then skip every update). Both trainers load that directory. Per step:
4 prompts x G = 8 completions, temperature 1, the same max completion length, the same prompts
in the same order (rlvr's prompt stream, handed to TRL unshuffled), reward = rlvr's
`boxed_math`, the same loss (GRPO advantages, token-mean aggregation = TRL `loss_type="dapo"`,
clip 0.2, k3 KL in the loss at beta), AdamW(0.9, 0.99) at the same lr with 10 warmup steps,
grad clip 1.0, fp32, no gradient checkpointing, the same torch thread count.

Runs are interleaved A/B/A/B, each in a fresh process (bench/_trainers.py), so machine drift
cancels and each peak RSS is the run's own. Medians skip each run's first step (warm-up).
bench/_trainers.py says how each phase is timed; bench/_floor.py how the floor is counted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from _floor import Shape, floor_seconds, measure, step_flops  # noqa: E402

# Model sizes: (hidden, layers, heads, kv_heads, intermediate); "lab" is the lab's default model.
SIZES = {
    "lab": (192, 2, 4, 2, 512),  # 0.83M
    "1M": (192, 2, 4, 2, 640),  # 0.98M
    "10M": (384, 6, 6, 3, 1024),  # 9.8M
    "30M": (512, 10, 8, 4, 1408),  # 29.6M
}
# In a variant's overrides, not a config field: decode with weights packed for MKL (bench/_mkl_packing.py)
MKL_PACKING = "mkl_packing"
PHASE_COLUMNS = ["generate", "score", "forward", "backward", "optimizer", "other"]
STARTED = time.strftime("%Y%m%d-%H%M%S")


def torch_version() -> str:
    import torch

    return torch.__version__


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def rlvr_version() -> str:
    """The commit of the rlvr being measured, and any uncommitted change to it."""
    def git(*cmd: str) -> str:
        try:
            return subprocess.run(["git", *cmd], cwd=BENCH.parent, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    changed = git("status", "--porcelain", "--", "rlvr").splitlines()
    return (git("rev-parse", "--short", "HEAD") or "unknown commit") + (f" + uncommitted changes to {len(changed)} rlvr/ files" if changed else "")


# ------------------------------------------------------------------------------------ models


def build_model(size: str, seed: int, sft_steps: int, work: Path, threads: int) -> Path:
    """work/models/<size>-seed<seed>-init (build_tiny_model + save_pretrained), then, with
    sft_steps > 0, the lab's SFT cold start of it (`rlvr lab`, cached in ...-sft<N>/sft)."""
    from rlvr.config import TinyModelConfig
    from rlvr.models import build_char_tokenizer, build_tiny_model, save_pretrained

    init = work / "models" / f"{size}-seed{seed}-init"
    if not (init / "config.json").exists():
        hidden, layers, heads, kv_heads, intermediate = SIZES[size]
        cfg = TinyModelConfig(hidden, layers, heads, kv_heads, intermediate, max_positions=128 if size == "lab" else 256)
        tokenizer = build_char_tokenizer()
        save_pretrained(build_tiny_model(tokenizer, cfg, seed), tokenizer, init)
    if sft_steps == 0:
        return init
    run_dir = work / "models" / f"{size}-seed{seed}-sft{sft_steps}"
    if not (run_dir / "sft" / "config.json").exists():
        print(f"cold start: {sft_steps} SFT steps on {init} (rlvr lab, cached in {run_dir}) ...", file=sys.stderr, flush=True)
        cmd = [sys.executable, "-m", "rlvr.cli", "lab", "--quiet", f"model.path={json.dumps(str(init))}", f"sft.steps={sft_steps}",
               "train.steps=0", "sft.save_model=true", "train.save_model=false", f"run.seed={seed}", f"run.threads={threads}",
               f"run.output_dir={json.dumps(str(run_dir))}", "checkpoint.auto_resume=true"]
        subprocess.run(cmd, check=True)
    return run_dir / "sft"


def model_shape(model_dir: Path) -> tuple[Shape, int]:
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model_dir)
    shape = Shape.from_config(cfg)
    embed = cfg.vocab_size * cfg.hidden_size
    norms = cfg.num_hidden_layers * (2 * cfg.hidden_size + 2 * shape.head_dim) + cfg.hidden_size
    return shape, shape.body_params + embed + norms


# -------------------------------------------------------------------------------------- runs


def run_child(spec: dict, work: Path, name: str, timeout: float) -> dict:
    """One run in a fresh process; its result JSON, plus the machine load around it."""
    run_dir = work / "runs" / STARTED / name  # one folder per invocation: spec, log, result, the run's own files
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = {**spec, "work_dir": str(run_dir / "work")}
    (run_dir / "spec.json").write_text(json.dumps(spec, indent=1))
    env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"]), "MKL_NUM_THREADS": str(spec["threads"]),
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    load_before = load()
    with open(run_dir / "log.txt", "w") as log:
        proc = subprocess.run([sys.executable, str(BENCH / "_trainers.py"), str(run_dir / "spec.json"), str(run_dir / "result.json")],
                              stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout, cwd=BENCH.parent)
    if proc.returncode != 0:
        tail = (run_dir / "log.txt").read_text().splitlines()[-15:]
        raise SystemExit(f"{name} failed (exit {proc.returncode}); last lines of {run_dir / 'log.txt'}:\n" + "\n".join(tail))
    result = json.loads((run_dir / "result.json").read_text())
    result.update({"name": name, "load_before": load_before, "load_after": load()})
    return result


def measured(steps: list[dict]) -> list[dict]:
    """The steps medians are taken over: all but the first (warm-up), unless there is only one."""
    return steps[1:] if len(steps) > 1 else steps


def phase_values(step: dict) -> dict[str, float]:
    p = {k: step.get(k, 0.0) for k in ("generate", "score", "backward", "optimizer")}
    p["forward"] = step.get("forward", 0.0) + step.get("forward_nograd", 0.0)
    p["other"] = step["seconds"] - sum(p.values())
    return p


def summarize(results: list[dict], shape: Shape, prompt_lens: list[list[int]], G: int, beta: float, tp) -> dict:
    """Median s/step, mean phases, tokens/s, memory and floor over all runs of one trainer."""
    steps = [s for r in results for s in measured(r["steps"])]
    idx = [i for r in results for i in range(len(r["steps"]))[1 if len(r["steps"]) > 1 else 0:]]
    phases = {k: statistics.fmean(phase_values(s)[k] for s in steps) for k in PHASE_COLUMNS}
    tokens = sum(s["tokens"] or 0 for s in steps)
    floors = [floor_seconds(step_flops(shape, prompt_lens[i], G, s["mean_length"] or 1, beta), tp) for s, i in zip(steps, idx)]
    flops = [step_flops(shape, prompt_lens[i], G, s["mean_length"] or 1, beta) for s, i in zip(steps, idx)]
    median = statistics.median(s["seconds"] for s in steps)
    return {
        "median_s": median,
        "run_medians": [statistics.median(s["seconds"] for s in measured(r["steps"])) for r in results],
        "phases": phases,
        "gen_forward": statistics.fmean(s.get("gen_forward", 0.0) for s in steps),
        "forward_nograd": statistics.fmean(s.get("forward_nograd", 0.0) for s in steps),
        "gen_tok_s": tokens / max(sum(s["generate"] for s in steps), 1e-9),
        "tokens_per_step": tokens / len(steps),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
        "rss_start_mb": max(r["rss_at_train_start_mb"] for r in results),
        "floor_s": statistics.median(f[0] for f in floors),
        "floor_peak_s": statistics.median(f[1] for f in floors),
        "gflop_per_step": statistics.median(sum(f.values()) for f in flops) / 1e9,
        "active_frac": statistics.fmean(s["active_frac"] for s in steps) if steps[0].get("active_frac") is not None else None,
        "faults_per_step": statistics.median(s.get("faults", 0) for s in steps),  # minor page faults (bench/_trainers.py)
        "step_seconds": [[round(s["seconds"], 2) for s in r["steps"]] for r in results],  # every step, the first included
    }


def print_ab(beta: float, summary: dict[str, dict], results: dict[str, list[dict]], args, tp) -> None:
    print(f"\n## beta = {beta}: {args.prompts} prompts x G={args.G}, max {args.max_new_tokens} new tokens, "
          f"{args.steps} steps x {args.runs} runs each, {args.threads} threads")
    print("medians over steps 2..N of all runs; phases are means per step (other = step - listed phases)\n")
    head = ["trainer", "s/step (run medians)", "gen tok/s"] + PHASE_COLUMNS + ["peak RSS MiB", "x floor (peak-matmul floor)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in summary:
        s = summary[name]
        cells = [name, f"{s['median_s']:.3f} ({', '.join(f'{m:.3f}' for m in s['run_medians'])})", f"{s['gen_tok_s']:.0f}"]
        cells += [f"{s['phases'][k]:.3f}" for k in PHASE_COLUMNS]
        cells += [f"{s['peak_rss_mb']:.0f}", f"{s['median_s'] / s['floor_s']:.1f}x ({s['median_s'] / s['floor_peak_s']:.0f}x)"]
        print("| " + " | ".join(cells) + " |")
    t = summary["trl"]
    for name in (n for n in summary if n != "trl"):
        r = summary[name]
        ratio = [f"{name}/TRL", f"{r['median_s'] / t['median_s']:.2f}", f"{r['gen_tok_s'] / t['gen_tok_s']:.2f}"]
        ratio += [f"{r['phases'][k] / t['phases'][k]:.2f}" if t["phases"][k] > 1e-9 else "-" for k in PHASE_COLUMNS]
        ratio += [f"{r['peak_rss_mb'] / t['peak_rss_mb']:.2f}", ""]
        print("| " + " | ".join(ratio) + " |")
    for name in summary:
        s = summary[name]
        print(f"\n{name}: {s['tokens_per_step']:.0f} generated tokens/step, {s['gflop_per_step']:.2f} GFLOP/step of real work, "
              f"floor {s['floor_s'] * 1e3:.1f} ms at the model's shapes ({s['floor_peak_s'] * 1e3:.1f} ms at peak); "
              f"decoding forwards {s['gen_forward']:.3f} s of generate {s['phases']['generate']:.3f} s; "
              f"no-grad training forwards (reference) {s['forward_nograd']:.3f} s; RSS at the first step {s['rss_start_mb']:.0f} MiB"
              + (f"; rows in the update {s['active_frac']:.0%}" if s["active_frac"] is not None else "")
              + f"; page faults per step (median) {s['faults_per_step']:,.0f}; every step's seconds {s['step_seconds']}")
    print("\nrewards per step (mean over the batch):")
    for name in summary:
        for res in results[name]:
            rewards = [s["reward"] for s in res["steps"]]
            half = [x for x in rewards[len(rewards) // 2:] if x is not None]
            print(f"  {res['name']:<22} load {res['load_before']} -> {res['load_after']}  second-half mean "
                  f"{statistics.fmean(half) if half else float('nan'):.3f}  " + " ".join(f"{x:.2f}" if x is not None else "-" for x in rewards))


def setup(args, work: Path) -> tuple[Path, Shape, int, dict, list[list[int]]]:
    """The model directory, its shape and size, the shared run spec and each step's prompt lengths."""
    from _trainers import bench_prompts
    from rlvr.config import load_config
    from rlvr.models import build_char_tokenizer

    model_dir = Path(args.model) if args.model else build_model(args.size, args.seed, args.sft_steps, work, args.threads)
    shape, params = model_shape(model_dir)
    lr = args.lr if args.lr is not None else load_config().train.lr
    base = {"model_dir": str(model_dir.resolve()), "steps": args.steps, "G": args.G, "prompts_per_step": args.prompts,
            "max_new_tokens": args.max_new_tokens, "lr": lr, "warmup": args.warmup, "seed": args.seed, "threads": args.threads}
    base["reward"] = args.reward
    base["fixed_length"] = args.fixed_length
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir)) if args.model else build_char_tokenizer()  # the model's own tokens count
    lens = [len(tok.encode(e.prompt, add_special_tokens=False)) for e in bench_prompts(base)]
    return model_dir, shape, params, base, [lens[i * args.prompts:(i + 1) * args.prompts] for i in range(args.steps)]


def ab(args, work: Path) -> dict:
    model_dir, shape, params, base, prompt_lens = setup(args, work)
    lr = base["lr"]
    B = args.prompts * args.G
    mean_prompt = statistics.fmean(n for step in prompt_lens for n in step)
    tp = measure(shape, B, int(B * (mean_prompt + args.max_new_tokens / 2)))
    import trl

    print(f"# rlvr vs TRL GRPOTrainer   {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}   load {load()}")
    print(f"rlvr {rlvr_version()}, TRL {trl.__version__}, torch {torch_version()}")
    print(f"model {model_dir} ({params / 1e6:.2f}M parameters: hidden {shape.hidden}, {shape.layers} layers), lr {lr}, seed {args.seed}")
    print(f"fp32 matmul throughput ({args.threads} threads): peak {tp.peak:.0f} GFLOP/s (1024^3), model shapes "
          f"{tp.decode:.1f} GFLOP/s at {tp.decode_rows} rows (decoding), {tp.train:.1f} GFLOP/s at {tp.train_rows} rows (training)")
    out = {"model_dir": str(model_dir), "params": params, "shape": asdict(shape), "throughput": asdict(tp), "spec": base, "betas": {}}
    variants = dict(v.split("=", 1) for v in args.rlvr_variant)  # name -> comma-separated rlvr overrides
    trainers = ["rlvr", *(f"rlvr-{name}" for name in variants), "trl"]
    runs: dict[float, dict[str, list[dict]]] = {beta: {t: [] for t in trainers} for beta in args.betas}
    for rep in range(args.runs):  # A/B/A/B: each rep runs every trainer at every beta before the next rep
        for beta in args.betas:
            for trainer in trainers:
                name = f"beta{beta}-{trainer}-{rep + 1}"
                extra = variants[trainer[5:]].split(",") if trainer.startswith("rlvr-") else []
                spec = {**base, "trainer": "trl" if trainer == "trl" else "rlvr", "beta": beta,
                        "rlvr_overrides": [o for o in extra if o != MKL_PACKING], "mkl_packing": MKL_PACKING in extra}
                print(f"  running {name} (load {load()}) ...", file=sys.stderr, flush=True)
                runs[beta][trainer].append(run_child(spec, work, name, args.timeout))
    for beta in args.betas:
        summary = {t: summarize(runs[beta][t], shape, prompt_lens, args.G, beta, tp) for t in trainers}
        print_ab(beta, summary, runs[beta], args, tp)
        out["betas"][str(beta)] = {"summary": summary, "runs": runs[beta]}
    trl_info = runs[args.betas[0]]["trl"][0]["info"]
    print(f"\nTRL optimizer: {trl_info}")
    return out


def profile(args, work: Path) -> dict:
    """One run of each trainer under torch's profiler: where the CPU time goes, op by op."""
    model_dir, shape, params, base, _ = setup(args, work)
    beta = args.betas[-1]
    print(f"# torch profiler: {model_dir} ({params / 1e6:.2f}M), beta {beta}, {args.steps} steps, load {load()}")
    out = {}
    for trainer in ("rlvr", "trl"):
        res = run_child({**base, "trainer": trainer, "beta": beta, "profile": True, "profile_rows": 25}, work, f"profile-{trainer}", args.timeout)
        print(f"\n## {trainer}: {res['profile']['op_calls_per_step']:.0f} aten op calls per step "
              f"(profiled median {statistics.median(s['seconds'] for s in measured(res['steps'])):.3f} s/step)\n")
        print(res["profile"]["table"])
        out[trainer] = res
    return out


# ----------------------------------------------------------------------------------- scaling


def scaling(args, work: Path) -> dict:
    """Seconds per step as one factor grows, the others at the base (G=8, 64 tokens, 1M): rlvr, and
    TRL on the same setting right after it."""
    from rlvr.config import load_config
    from _trainers import bench_prompts
    from rlvr.models import build_char_tokenizer

    lr = args.lr if args.lr is not None else load_config().train.lr
    grid = [("G", g, 64, "1M") for g in (4, 8, 16)] + [("length", 8, n, "1M") for n in (32, 128)] + [("size", 8, 64, m) for m in ("10M", "30M")]
    tok = build_char_tokenizer()
    print(f"# scaling (rlvr, and TRL on each setting unless --no-scaling-trl)   {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}   load {load()}   rlvr {rlvr_version()}")
    print(f"random-init models, beta {args.scaling_beta} (so every completion is forwarded: a random model's rewards are all 0), "
          f"{args.prompts} prompts, {args.scaling_steps} steps per setting, median of steps 2..N, {args.threads} threads\n")
    rows = []
    for factor, G, L, size in grid:
        model_dir = build_model(size, args.seed, 0, work, args.threads)
        shape, params = model_shape(model_dir)
        spec = {"model_dir": str(model_dir.resolve()), "steps": args.scaling_steps, "G": G, "prompts_per_step": args.prompts,
                "max_new_tokens": L, "lr": lr, "warmup": args.warmup, "seed": args.seed, "threads": args.threads,
                "trainer": "rlvr", "beta": args.scaling_beta}
        examples = bench_prompts(spec)
        lens = [len(tok.encode(e.prompt, add_special_tokens=False)) for e in examples]
        B = args.prompts * G
        tp = measure(shape, B, int(B * (statistics.fmean(lens) + L / 2)))
        name = f"scaling-G{G}-L{L}-{size}"
        print(f"  running {name} (load {load()}) ...", file=sys.stderr, flush=True)
        res = run_child(spec, work, name, args.timeout)
        trl = None
        if args.scaling_trl:  # the same setting through TRL, right after (A/B per row)
            print(f"  running {name}-trl (load {load()}) ...", file=sys.stderr, flush=True)
            trl = run_child({**spec, "trainer": "trl"}, work, f"{name}-trl", args.timeout)
        steps = measured(res["steps"])
        step_lens = [lens[i * args.prompts:(i + 1) * args.prompts] for i in range(args.scaling_steps)][1:]
        flops = [sum(step_flops(shape, pl, G, s["mean_length"], args.scaling_beta).values()) for s, pl in zip(steps, step_lens)]
        floors = [floor_seconds(step_flops(shape, pl, G, s["mean_length"], args.scaling_beta), tp)[0] for s, pl in zip(steps, step_lens)]
        rows.append({
            "factor": factor, "G": G, "L": L, "size": size, "params": params, "median_s": statistics.median(s["seconds"] for s in steps),
            "tokens": statistics.fmean(s["tokens"] for s in steps), "gflop": statistics.fmean(flops) / 1e9,
            "floor_s": statistics.median(floors), "phases": {k: statistics.fmean(phase_values(s)[k] for s in steps) for k in PHASE_COLUMNS},
            "peak_rss_mb": res["peak_rss_mb"], "load": f"{res['load_before']} -> {res['load_after']}",
            "trl": None if trl is None else {
                "median_s": statistics.median(s["seconds"] for s in measured(trl["steps"])), "peak_rss_mb": trl["peak_rss_mb"],
                "phases": {k: statistics.fmean(phase_values(s)[k] for s in measured(trl["steps"])) for k in PHASE_COLUMNS},
                "load": f"{trl['load_before']} -> {trl['load_after']}"},
        })
    print_scaling(rows)
    return {"scaling": rows}


def trl_cells(row: dict) -> str:
    t = row.get("trl")
    if t is None:
        return " | | | |"
    return f"{t['median_s']:.3f} | **{row['median_s'] / t['median_s']:.2f}** | {t['phases']['generate']:.3f} | {t['peak_rss_mb']:.0f} |"


def print_scaling(rows: list[dict]) -> None:
    base = next(r for r in rows if (r["G"], r["L"], r["size"]) == (8, 64, "1M"))
    head = ["grows", "G", "max len", "params", "s/step", "gen tokens", "GFLOP", "x floor", "time x", "work x", "",
            "generate", "forward", "backward", "optimizer", "peak RSS MiB", "TRL s/step", "rlvr/TRL", "TRL generate", "TRL peak RSS MiB"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for factor, key in (("G", "G"), ("length", "L"), ("size", "params")):
        group = sorted([r for r in rows if r["factor"] == factor and r is not base] + [base], key=lambda r: r[key])
        for prev, r in zip([None] + group[:-1], group):
            t = r["median_s"] / prev["median_s"] if prev else 1.0
            w = r["gflop"] / prev["gflop"] if prev else 1.0
            mark = "**cost grows faster than work**" if t > 1.1 * w else ""
            p = r["phases"]
            print(f"| {factor} | {r['G']} | {r['L']} | {r['params'] / 1e6:.1f}M | {r['median_s']:.3f} | {r['tokens']:.0f} | "
                  f"{r['gflop']:.2f} | {r['median_s'] / r['floor_s']:.1f}x | {t:.2f} | {w:.2f} | {mark} | {p['generate']:.3f} | "
                  f"{p['forward']:.3f} | {p['backward']:.3f} | {p['optimizer']:.3f} | {r['peak_rss_mb']:.0f} | " + trl_cells(r))
    print("\n(time x and work x: growth over the row above in the same group; work = FLOPs of the real tokens; base: G=8, "
          "max 64 tokens, 1M, measured once and shown in each group)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scaling", action="store_true", help="rlvr's scaling table instead of the A/B comparison")
    parser.add_argument("--profile", action="store_true", help="one run of each trainer under torch's profiler (op table)")
    parser.add_argument("--model", help="model directory to use (skips building and the cold start)")
    parser.add_argument("--reward", choices=["boxed_math", "even_length"], default="boxed_math",
                        help="even_length: mixed groups for a model that never boxes an answer, so both trainers update (timing only)")
    parser.add_argument("--rlvr-variant", action="append", default=[], metavar="NAME=OVERRIDES",
                        help="an extra rlvr run in the interleave with comma-separated overrides, e.g. onepass=run.logits_budget_mib=100000; "
                             f"'{MKL_PACKING}' among them decodes with weights packed for MKL (bench/_mkl_packing.py)")
    parser.add_argument("--fixed-length", action="store_true",
                        help="every completion is exactly --max-new-tokens long in both trainers (no EOS), so the work is identical to the token")
    parser.add_argument("--size", choices=sorted(SIZES), default="lab", help="model size to build for the A/B runs")
    parser.add_argument("--sft-steps", type=int, default=3000, help="cold-start SFT steps (the lab's default); 0 = random init")
    parser.add_argument("--betas", type=float, nargs="+", default=[0.0, 0.04])
    parser.add_argument("--runs", type=int, default=3, help="runs per trainer per beta")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--G", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--lr", type=float, default=None, help="default: rlvr's train.lr")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads, the same for both trainers")
    parser.add_argument("--scaling-steps", type=int, default=6)
    parser.add_argument("--scaling-beta", type=float, default=0.04)
    parser.add_argument("--no-scaling-trl", dest="scaling_trl", action="store_false", help="scaling: rlvr only, without TRL's column")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument("--work", type=Path, default=Path("runs/bench-vs-trl"), help="models (cached), run logs, results JSON")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    mode = "scaling" if args.scaling else "profile" if args.profile else "ab"
    out = {"scaling": scaling, "profile": profile, "ab": ab}[mode](args, work)
    path = work / f"{mode}-{STARTED}.json"
    path.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, **out}, indent=1, default=str))
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
