"""Resident memory of a large training set, loaded the way a run loads it (tasks.load_splits).

    .venv/bin/python bench/data_memory.py                 # 200,000 rows, ~1 min
    .venv/bin/python bench/data_memory.py --rows 1000000

Writes N word-problem rows (prompt ~110 characters, a worked solution ~60, an answer) once as
JSONL and as parquet under --dir, then in a fresh process each loads them through
`tasks.load_splits` with data.source = jsonl (every Example in memory) or data.source = hf
(Arrow-backed: the rows stay in the memory-mapped Arrow file, the run keeps their row numbers),
takes 10 steps' worth of prompts through the PromptStream, and reports the resident memory the
load added (VmRSS after minus before, both after importing everything), split into anonymous
memory (the process's own) and file pages (the memory-mapped Arrow file, which the kernel can
drop and read again), and the seconds it took.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
from pathlib import Path
import datasets, torch  # imported before the first reading: only the load itself is measured
from rlvr.config import load_config
from rlvr.loop import PromptStream
from rlvr.tasks import load_splits

def rss_mib():
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "RssAnon", "RssFile")}

source, path = sys.argv[1], sys.argv[2]
cfg = load_config(overrides=[f"data.source={source}", f"data.train_path={json.dumps(path)}", "data.solution_field=solution",
                             "data.eval_fraction=0.01", "sft.steps=0"])
import gc; gc.collect()
before, t = rss_mib(), time.perf_counter()
train, held_out = load_splits(cfg)
seconds = time.perf_counter() - t
stream = PromptStream(train, 0)
for _ in range(10):
    stream.take(16)
gc.collect()
after = rss_mib()
print(json.dumps({"source": source, "rows": len(train) + len(held_out), "added_mib": {k: after[k] - before[k] for k in after}, "seconds": seconds,
                  "kind": type(train).__name__}))
"""


def write_data(directory: Path, rows: int) -> tuple[Path, Path]:
    import datasets

    directory.mkdir(parents=True, exist_ok=True)
    jsonl, parquet = directory / f"problems-{rows}.jsonl", directory / f"problems-{rows}.parquet"
    if not jsonl.exists():
        with jsonl.open("w") as fh:
            for i in range(rows):
                a, b, c = i % 97, (i * 7) % 89, (i * 13) % 83
                fh.write(json.dumps({
                    "prompt": f"A shop has {a} boxes with {b} pens each and sells {c} pens. How many pens are left? Answer in a box.",
                    "answer": str(a * b - c), "solution": f"{a}*{b}={a * b}, {a * b}-{c}={a * b - c}. \\boxed{{{a * b - c}}}",
                }) + "\n")
    if not parquet.exists():
        datasets.load_dataset("json", data_files=str(jsonl), split="train").to_parquet(str(parquet))
    return jsonl, parquet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dir", default="/tmp/rlvr-data-memory")
    args = parser.parse_args()
    jsonl, parquet = write_data(Path(args.dir), args.rows)
    print(f"{args.rows} rows: {jsonl} ({jsonl.stat().st_size / 2**20:.0f} MiB), {parquet} ({parquet.stat().st_size / 2**20:.0f} MiB)")
    for source, path in (("jsonl", jsonl), ("hf", parquet), ("hf", jsonl)):
        done = subprocess.run([sys.executable, "-c", CHILD, source, str(path)], capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            sys.exit(done.stderr[-2000:])
        result = json.loads(done.stdout.strip().splitlines()[-1])
        added = result["added_mib"]
        print(f"data.source={source:<5} {path.suffix:<8} -> {result['kind']:<13} {result['rows']} rows: +{added['VmRSS']:.0f} MiB resident "
              f"({added['RssAnon']:.0f} MiB anonymous, {added['RssFile']:.0f} MiB file pages the kernel can drop), "
              f"loaded in {result['seconds']:.1f} s")


if __name__ == "__main__":
    main()
