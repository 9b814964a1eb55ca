"""Decoding engines side by side: rlvr's static-cache engine against the model's own forward.

    .venv/bin/python bench/engines.py                                 # lab model, 4 prompts x G=8
    .venv/bin/python bench/engines.py --model runs/presets/sft-seed0/sft --rounds 20
    .venv/bin/python bench/engines.py --hidden 512 --layers 10 --heads 8 --intermediate 1408

Each round samples the same prompts with the same seed through `rlvr.rollout.generate`, once per
engine, alternating which goes first (so drift of the machine falls on both); the two engines
draw the same tokens (the script checks), so they do identical work. Prints, per engine, the
median seconds per generate call, milliseconds per decoding step and generated tokens per
second, and the ratio static / transformers.

`--hf-generate` adds a third column, the model's own `model.generate` (sampling, temperature 1,
`num_return_sequences` = G, its default DynamicCache), what a user would otherwise call. It draws
from another random stream, so its tokens differ; `--fixed-length` makes every engine write
exactly --max-new-tokens tokens per row (EOS never ends a row), so all do the same work:

    .venv/bin/python bench/engines.py --model runs/models/smollm2 --hf-generate --fixed-length --rounds 3

`--mkl` adds the static engine with weights packed for MKL's packed sgemm instead of oneDNN
(bench/_mkl_packing.py; docs/benchmarks.md says why oneDNN is the default):

    .venv/bin/python bench/engines.py --model runs/models/smollm2 --mkl --unpacked --fixed-length --rounds 3

`--unpacked` adds the static engine without packed weights (`rollout.pack_weights=false`:
every projection through F.linear), which is what it does below 512 wide anyway:

    .venv/bin/python bench/engines.py --model runs/models/smollm2 --unpacked --fixed-length --rounds 3
    .venv/bin/python bench/engines.py --unpacked --force-packed     # the lab model, packed against not
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import _mkl_packing
from rlvr.config import Config, TinyModelConfig
from rlvr.data import format_prompt
from rlvr.loop import PromptStream
from rlvr.models import build_char_tokenizer, build_tiny_model, load_model, load_tokenizer
from rlvr.rollout import encode_prompts, generate
from rlvr.rollout import engines as engine_module
from rlvr.sampling import Sampling
from rlvr.tasks.arithmetic import make_splits

ENGINES = ("static", "transformers")
NEVER = -1  # an EOS id no token has: with --fixed-length no row ends early


def hf_generate(model, ids, mask, tokenizer, args, seed: int) -> tuple[int, int]:
    """model.generate on the same prompts and group size; (decoding steps, generated tokens)."""
    torch.manual_seed(seed)
    fixed = {"min_new_tokens": args.max_new_tokens} if args.fixed_length else {}
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             num_return_sequences=args.group_size, max_new_tokens=args.max_new_tokens,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **fixed)
    new = out[:, ids.shape[1]:]
    ended = new == tokenizer.eos_token_id
    lengths = torch.where(ended.any(1), ended.int().argmax(1) + 1, torch.full((new.shape[0],), new.shape[1]))
    return new.shape[1], int(lengths.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a model directory (default: a fresh tiny model of the given shape)")
    parser.add_argument("--hidden", type=int, default=192)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--intermediate", type=int, default=512)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hf-generate", action="store_true", help="also time the model's own model.generate")
    parser.add_argument("--fixed-length", action="store_true", help="every row writes exactly --max-new-tokens tokens")
    parser.add_argument("--unpacked", action="store_true", help="also the static engine with rollout.pack_weights=false")
    parser.add_argument("--force-packed", action="store_true", help="pack weights whatever the model's width")
    parser.add_argument("--mkl", action="store_true", help="also the static engine packed for MKL's packed sgemm (the default packs for oneDNN)")
    args = parser.parse_args()
    engines = ENGINES + (("static-unpacked",) if args.unpacked else ()) + (("static-mkl",) if args.mkl else ()) \
        + (("model.generate",) if args.hf_generate else ())
    if args.force_packed:
        engine_module.PACKED_MIN_HIDDEN = 0
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)

    onednn_packing = engine_module.PackedLinear
    cfg = Config()
    if args.model:
        model, tokenizer = load_model(args.model), load_tokenizer(args.model)
    else:
        tokenizer = build_char_tokenizer()
        shape = TinyModelConfig(args.hidden, args.layers, args.heads, args.kv_heads, args.intermediate, max_positions=256)
        model = build_tiny_model(tokenizer, shape, seed=0)
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    train, _ = make_splits(cfg.task, cfg.run.seed)
    stream = PromptStream(train, cfg.run.seed)

    seconds: dict[str, list[float]] = {e: [] for e in engines}
    steps: dict[str, list[int]] = {e: [] for e in engines}
    tokens: dict[str, list[int]] = {e: [] for e in engines}
    eos = NEVER if args.fixed_length else tokenizer.eos_token_id
    for r in range(args.rounds + 1):  # round 0 warms up and is not counted
        prompts = [format_prompt(tokenizer, e.prompt, cfg.data) for e in stream.take(args.prompts)]
        ids, mask = encode_prompts(tokenizer, prompts, torch.device("cpu"))
        outs = {}
        for engine in engines if r % 2 == 0 else engines[::-1]:
            t0 = time.perf_counter()
            if engine == "model.generate":
                n_steps, n_tokens = hf_generate(model, ids, mask, tokenizer, args, seed=r)
            else:
                engine_module.set_weight_packing(engine != "static-unpacked")
                if engine == "static-mkl":
                    _mkl_packing.install(args.prompts * args.group_size)
                outs[engine] = generate(model, ids, mask, Sampling(max_new_tokens=args.max_new_tokens), eos_id=eos,
                                        pad_id=tokenizer.pad_token_id, group_size=args.group_size,
                                        generator=torch.Generator().manual_seed(r), engine=engine.split("-")[0])
                engine_module.set_weight_packing(True)
                engine_module.PackedLinear = onednn_packing
                n_steps, n_tokens = outs[engine].completion_ids_BT.shape[1], int(outs[engine].lengths_B.sum())
            if r:
                seconds[engine].append(time.perf_counter() - t0)
                steps[engine].append(n_steps)
                tokens[engine].append(n_tokens)
        same = torch.equal(outs["static"].completion_ids_BT, outs["transformers"].completion_ids_BT)
        if not same:
            print(f"round {r}: the engines drew different tokens (a float-rounding tie); timings still compare")

    print(f"model: {params / 1e6:.2f}M parameters, {args.prompts} prompts x G={args.group_size}, "
          f"max {args.max_new_tokens} new tokens{' (fixed length)' if args.fixed_length else ''}, {args.threads} threads, "
          f"{args.rounds} rounds")
    print("| engine | s per generate (median) | ms per decoding step | generated tokens/s |")
    print("|---|---|---|---|")
    med = {}
    for engine in engines:
        med[engine] = statistics.median(seconds[engine])
        per_step = statistics.median(s / n for s, n in zip(seconds[engine], steps[engine])) * 1e3
        print(f"| {engine} | {med[engine]:.4f} | {per_step:.2f} | {sum(tokens[engine]) / sum(seconds[engine]):,.0f} |")
    print(f"static / transformers: {med['static'] / med['transformers']:.2f}")
    if args.unpacked:
        print(f"static (packed) / static-unpacked: {med['static'] / med['static-unpacked']:.2f}")
    if args.mkl:
        print(f"static (oneDNN) / static-mkl: {med['static'] / med['static-mkl']:.2f}")
    if args.hf_generate:
        print(f"static / model.generate: {med['static'] / med['model.generate']:.2f}")


if __name__ == "__main__":
    main()
