"""GRPO on SmolLM2-135M with each rollout engine, same work: rlvr's engine, vLLM colocated in the
training process, and vLLM as a server (issue 36; docs/benchmarks.md, docs/vllm.md).

    .venv-vllm/bin/python bench/vllm_engine.py                       # ~8 min on 2 cores: auto, vllm (+ server if `rlvr serve` works)
    .venv-vllm/bin/python bench/vllm_engine.py --steps 6 --repeats 2 # more steps, each engine twice (order alternates)
    .venv-vllm/bin/python bench/vllm_engine.py --server on           # the server mode, or fail saying why
    .venv-vllm/bin/python bench/vllm_engine.py --server off          # rlvr's engine and vLLM colocated only
    .venv-vllm/bin/python bench/vllm_engine.py --steps 2 --set rollout.prompts_per_step=2 --set rollout.max_new_tokens=8  # smoke

Every engine trains `rlvr lab --model smollm2` (rlvr/labs/smollm2.toml: its prompts_per_step x
group_size, max_new_tokens and temperature; seed 0) for `--steps` GRPO steps from the instruct
model itself (sft.steps=0: the lab's 40-step cold start takes ~12 min here, and the instruct
model writes to the 80-token limit nearly every time, so each engine samples close to the same
number of tokens), with no evaluation and no saved model. The instruct model earns no reward, so
every group's advantages are 0, and with the lab's loss (no KL, no entropy term) the update would
forward nothing; `algo.entropy_coef=1e-6` puts every row through the update, as in a step where
every group has signal (the update's work is the same for every engine; it is not what is compared). Each run is a fresh Python process of
its own (`--one ENGINE`), so one engine's memory never counts toward another's; engines run one
after another, the order reversed on every other repeat, so drift of the machine falls on all.

Per engine, from the run's metrics.jsonl, step 1 left out (it builds the sampler: vLLM's engine
start-up, rlvr's first packing):
  - s/step, generate and update: medians of time/step, time/generate, time/update;
  - tokens/s: sampled tokens / generate seconds over the counted steps (rlvr's rollout/tokens_per_s;
    for vLLM this includes the weight push, which happens inside sampling), and the same without
    the push;
  - peak RSS: the training process's ru_maxrss (plus its children's, if any); for the server, the
    sum of VmHWM over the server's process tree, read before it is stopped;
  - push: the seconds to load the policy's weights into the engine after an update (the colocated
    engine's `push`, timed by wrapping it; the first push, of the initial weights, is left out).
The vLLM engines run as rlvr builds them (on CPU with whole prefills: vLLM 0.32's CPU build
crashes on seeded requests whose prefill is chunked; docs/vllm.md).
The server (`rlvr serve` on the SmolLM2 directory, in a process group of its own) is started per
run and stopped after it; its start-up is not in the run's wall time.

This machine is shared: read `uptime` first, and the "best" figures (the least-disturbed counted
step) beside the medians. Prints a table and the raw figures as JSON (also --out/results.json,
with every step's metrics).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GiB = 2**30
ENGINES = ("auto", "vllm", "vllm_server")
VLLM_SET: list[str] = []  # extra overrides for the colocated engine's runs (--vllm-set)
SERVER_ARGS: list[str] = []  # extra vLLM flags for `rlvr serve ... --`


def lab_overrides(steps: int, run_dir: Path, extra: list[str]) -> list[str]:
    return ["sft.steps=0", "sft.save_model=false", "eval.before_sft=false", "eval.before_rl=false", "eval.after_rl=false", f"train.steps={steps}",
            "checkpoint.every=0", "train.save_model=false", "run.seed=0", "algo.entropy_coef=1e-6", f"run.output_dir={json.dumps(str(run_dir))}", *extra]


# ---------------------------------------------------------------------------------------------
# A child: one engine's run in this process.

def run_one(engine: str, run_dir: Path, steps: int, extra: list[str], server_url: str) -> dict:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import rlvr.rollout.vllm_sampler as vs

    pushes: list[float] = []
    builds: list[float] = []
    push, init = vs.ColocatedEngine.push, vs.ColocatedEngine.__init__

    def timed_push(self, model):
        elapsed = push(self, model)
        pushes.append(elapsed)
        return elapsed

    def timed_init(self, *a, **k):
        t0 = time.perf_counter()
        init(self, *a, **k)
        builds.append(time.perf_counter() - t0)

    vs.ColocatedEngine.push, vs.ColocatedEngine.__init__ = timed_push, timed_init
    if engine == "vllm_server":  # the server link's push, timed the same way
        import rlvr.rollout.vllm_server as server_module

        link = server_module.ServerLink
        link_push = link.push

        def timed_link_push(self, model):
            elapsed = link_push(self, model)
            pushes.append(elapsed)
            return elapsed

        link.push = timed_link_push

    from rlvr.cli import app

    args = ["lab", "--model", "smollm2", "--quiet", *lab_overrides(steps, run_dir, extra), f"rollout.engine={engine}"]
    if engine == "vllm_server":
        args.append(f"rollout.server_url={server_url}")
    t0 = time.perf_counter()
    code = app(args, standalone_mode=False)  # click returns typer.Exit's code here (a usage error, a stopped run)
    if code:
        sys.exit(f"rlvr {' '.join(args)}: exit status {code}")
    wall = time.perf_counter() - t0
    import torch

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {
        "engine": engine, "records": records, "pushes": pushes, "engine_build_s": builds, "wall_s": wall,
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "children_peak_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
        "torch_threads": torch.get_num_threads(),
    }


# ---------------------------------------------------------------------------------------------
# The server: `rlvr serve` in a process group of its own, and the peak memory of its tree.

def serve_works() -> str | None:
    """None if `rlvr serve` exists here, else why not."""
    if not (ROOT / "rlvr" / "commands" / "serve.py").exists():
        return "rlvr/commands/serve.py does not exist yet"
    out = subprocess.run([sys.executable, "-m", "rlvr.cli", "serve", "--help"], capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        return f"`rlvr serve --help` exited {out.returncode}: {(out.stderr or out.stdout).strip()[-300:]}"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return pids


def vm_hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Server:
    def __init__(self, model_dir: Path, log: Path, timeout_s: float) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log.open("w")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "serve", str(model_dir), "--port", str(self.port), "--", *SERVER_ARGS],
                                     cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        from rlvr.rollout.vllm_server import ServerError, server_info

        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"`rlvr serve` exited {self.proc.returncode} before answering; its log: {log}")
            try:
                server_info(self.url, timeout_s=2.0)
                break
            except ServerError:
                if time.perf_counter() - t0 > timeout_s:
                    self.stop()
                    raise RuntimeError(f"`rlvr serve` did not answer at {self.url} in {timeout_s:.0f} s; its log: {log}") from None
                time.sleep(1.0)
        self.start_s = time.perf_counter() - t0

    def peaks(self) -> dict:
        hwm = {p: vm_hwm(p) for p in tree(self.proc.pid)}
        return {"tree_peak_rss_sum": sum(hwm.values()), "tree_peak_rss_max": max(hwm.values(), default=0), "processes": len(hwm)}

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the process group this script started for it
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


# ---------------------------------------------------------------------------------------------
# The parent: the runs, the table.

def child(engine: str, run_dir: Path, a: argparse.Namespace, server_url: str = "") -> dict:
    shutil.rmtree(run_dir, ignore_errors=True)
    own = [o for o in (VLLM_SET if a.vllm_set is None else a.vllm_set) if o] if engine == "vllm" else []
    cmd = [sys.executable, __file__, "--one", engine, "--run-dir", str(run_dir), "--steps", str(a.steps), "--server-url", server_url,
           *(f"--set={o}" for o in [*a.set, *own])]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    (run_dir.parent / f"{run_dir.name}.log").write_text(out.stdout + "\n--- stderr ---\n" + out.stderr)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"{engine} failed (exit {out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    result = json.loads(line[len("RESULT "):])
    result["process_wall_s"] = time.perf_counter() - t0
    print(f"  {engine}: {result['process_wall_s']:.0f} s wall for {a.steps} steps", file=sys.stderr)
    return result


def figures(runs: list[dict]) -> dict:
    """One engine's figures over its runs (step 1 of each left out)."""
    recs = [r for run in runs for r in run["records"][1:]] or [r for run in runs for r in run["records"]]
    tokens = sum(r["rollout/tokens_per_s"] * r["time/generate"] for r in recs)  # sampled tokens (not logged as such)
    gen = sum(r["time/generate"] for r in recs)
    steps_s = sum(r["time/step"] for r in recs)
    pushes = [p for run in runs for p in run["pushes"][1:]]  # push 1: the initial weights, in step 1
    # pushes[k] (k >= 1) precedes step k+1's sampling: those of the counted steps are in their generate time
    counted_push = sum(p for run in runs for p in run["pushes"][1:len(run["records"])])
    return {
        "steps_counted": len(recs),
        "s_per_step": statistics.median(r["time/step"] for r in recs),
        "generate_s": statistics.median(r["time/generate"] for r in recs),
        "update_s": statistics.median(r["time/update"] for r in recs),
        # the least-disturbed step: on a shared 2-core machine a neighbour's work lands on some steps, not on every one
        "best_s_per_step": min(r["time/step"] for r in recs),
        "best_tokens_per_s": max(r["rollout/tokens_per_s"] for r in recs),
        "generate_share": gen / steps_s,
        "tokens_per_s": tokens / gen,
        "tokens_per_s_without_push": tokens / max(gen - counted_push, 1e-9),
        "mean_length": statistics.mean(r["rollout/mean_length"] for r in recs),
        "tokens_per_step": tokens / len(recs),
        "reward_mean": statistics.mean(r["reward/mean"] for r in recs if "reward/mean" in r) if any("reward/mean" in r for r in recs) else None,
        "push_s": statistics.median(pushes) if pushes else None,
        "first_push_s": statistics.median(run["pushes"][0] for run in runs) if all(run["pushes"] for run in runs) else None,
        "engine_build_s": statistics.median(b for run in runs for b in run["engine_build_s"]) if any(run["engine_build_s"] for run in runs) else None,
        "step1_s": statistics.median(run["records"][0]["time/step"] for run in runs),
        "peak_rss": max(run["peak_rss"] for run in runs),
        "children_peak_rss": max(run["children_peak_rss"] for run in runs),
        "server_peak_rss": max((run["server"]["tree_peak_rss_sum"] for run in runs if "server" in run), default=None),
        "server_start_s": statistics.median(run["server"]["start_s"] for run in runs) if any("server" in run for run in runs) else None,
        "wall_s": statistics.median(run["process_wall_s"] for run in runs),
    }


LABELS = {"auto": "rlvr's engine (auto)", "vllm": "vLLM colocated (vllm)", "vllm_server": "vLLM server (vllm_server)"}


def table(results: dict[str, dict], skipped: dict[str, str], a: argparse.Namespace, load: tuple) -> str:
    f = lambda x, fmt: "-" if x is None else format(x, fmt)  # noqa: E731
    lines = [f"SmolLM2-135M GRPO, lab settings ({' '.join(a.set) or 'as rlvr/labs/smollm2.toml'}), {a.steps} steps x "
             f"{a.repeats} run(s) per engine, step 1 left out; load average before: {load[0]:.2f}, after: {os.getloadavg()[0]:.2f}",
             "| engine | s/step (best) | generate | update | generate share | tokens/s (without push; best step) | tokens/step | push s/update "
             "| step 1 s (engine start-up s) | peak RSS GiB: trainer (+ server) | run wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for engine in ENGINES:
        if engine in skipped:
            lines.append(f"| {LABELS[engine]} | not measured yet: {skipped[engine]} |" + " |" * 9)
            continue
        r = results[engine]
        rss = f"{r['peak_rss'] / GiB:.2f}" + (f" (+ {r['server_peak_rss'] / GiB:.2f})" if r["server_peak_rss"] else "")
        build = f" ({r['engine_build_s']:.1f})" if r["engine_build_s"] else (f" (server {r['server_start_s']:.1f})" if r["server_start_s"] else "")
        lines.append(f"| {LABELS[engine]} | {r['s_per_step']:.2f} ({r['best_s_per_step']:.2f}) | {r['generate_s']:.2f} | {r['update_s']:.2f} "
                     f"| {r['generate_share']:.0%} | {r['tokens_per_s']:.0f} ({r['tokens_per_s_without_push']:.0f}; {r['best_tokens_per_s']:.0f}) | {r['tokens_per_step']:.0f} | {f(r['push_s'], '.3f')} "
                     f"| {r['step1_s']:.1f}{build} | {rss} | {r['wall_s']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=4, help="GRPO steps per run (step 1 is the warm-up, left out)")
    p.add_argument("--repeats", type=int, default=1, help="runs per engine, the order reversed every other repeat")
    p.add_argument("--engines", nargs="+", default=["auto", "vllm"], choices=["auto", "vllm"])
    p.add_argument("--server", choices=["auto", "on", "off"], default="auto",
                   help="the vllm_server engine through `rlvr serve`: auto = when `rlvr serve --help` works")
    p.add_argument("--server-timeout", type=float, default=600.0, help="seconds to wait for the server's first answer")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override for every run")
    p.add_argument("--vllm-set", action="append", default=None, metavar="KEY=VALUE",
                   help="overrides for the vllm engine's runs only (default: " + " ".join(VLLM_SET) + "; --vllm-set '' for none)")
    p.add_argument("--out", default=str(ROOT / "runs" / "bench-vllm-engine"))
    p.add_argument("--one", choices=ENGINES, help=argparse.SUPPRESS)  # a child: one run, JSON on stdout
    p.add_argument("--run-dir", help=argparse.SUPPRESS)
    p.add_argument("--server-url", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print("RESULT " + json.dumps(run_one(a.one, Path(a.run_dir), a.steps, a.set, a.server_url)))
        return

    from rlvr.labs import ensure_model, lab_model

    model_dir = ensure_model(lab_model("smollm2"))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    engines = list(a.engines)
    skipped: dict[str, str] = {}
    if a.server != "off":
        why = serve_works()
        if why is None:
            engines.append("vllm_server")
        elif a.server == "on":
            sys.exit(f"--server on: {why}")
        else:
            skipped["vllm_server"] = why
    else:
        skipped["vllm_server"] = "--server off"
    load = os.getloadavg()
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    for repeat in range(a.repeats):
        for engine in engines if repeat % 2 == 0 else engines[::-1]:
            run_dir = out / f"{engine}-{repeat}"
            if engine == "vllm_server":
                server = Server(model_dir, out / f"server-{repeat}.log", a.server_timeout)
                try:
                    result = child(engine, run_dir, a, server.url)
                    result["server"] = {**server.peaks(), "start_s": server.start_s}
                finally:
                    server.stop()
            else:
                result = child(engine, run_dir, a)
            runs[engine].append(result)
    results = {e: figures(rs) for e, rs in runs.items()}
    text = table(results, skipped, a, load)
    print(text)
    raw = {"settings": {"steps": a.steps, "repeats": a.repeats, "set": a.set, "vllm_set": VLLM_SET if a.vllm_set is None else a.vllm_set, "load_before": load, "load_after": os.getloadavg()},
           "figures": results, "skipped": skipped,
           "runs": {e: [{k: v for k, v in r.items() if k != "records"} | {"records": r["records"]} for r in rs] for e, rs in runs.items()}}
    (out / "results.json").write_text(json.dumps(raw, indent=1))
    print(json.dumps({"figures": results, "skipped": skipped, "load_before": load, "load_after": os.getloadavg()}))


if __name__ == "__main__":
    main()
