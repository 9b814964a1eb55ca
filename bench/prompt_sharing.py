"""The update's forward + backward with each prompt computed once (run.share_prompts) against one
joint forward per row, on the real-model lab's shapes.

    .venv/bin/python bench/prompt_sharing.py --model ~/.cache/rlvr/models/smollm2 --prompts 8 --group-size 8 --rounds 3

The batch is what a GRPO step of `rlvr lab --model smollm2` scores: `--prompts` held-out word
problems through the model's chat template and system message, each with `--group-size` rows
whose completions are worked solutions of that problem (the lab's own targets, so lengths are
real), one micro-batch. Each round times both settings, alternating which goes first; the table
gives the median seconds and the positions each computes, and checks that the two give the same
log-probs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def batch(model_dir: str, prompts: int, group: int):
    from transformers import AutoTokenizer

    from rlvr.config import load_config
    from rlvr.data import format_prompt
    from rlvr.labs import MODELS
    from rlvr.tasks import load_splits

    cfg = load_config(str(MODELS["smollm2"].config), [f"model.path={model_dir!r}".replace("'", '"')])
    _, held = load_splits(cfg)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    texts = [format_prompt(tokenizer, e, cfg.data) for e in held[:prompts]]
    p = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    tokenizer.padding_side = "right"
    c = tokenizer([e.solution + tokenizer.eos_token for e in held[:prompts]], return_tensors="pt", padding=True, add_special_tokens=False)
    rep = lambda t: t.repeat_interleave(group, 0)  # noqa: E731
    return rep(p.input_ids), rep(p.attention_mask), rep(c.input_ids) * rep(c.attention_mask), rep(c.attention_mask)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a Llama-family model directory (the lab's converted SmolLM2)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    from transformers import AutoModelForCausalLM

    from rlvr.logprobs import completion_logprobs, set_prompt_sharing

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).train()
    tensors = batch(args.model, args.prompts, args.group_size)
    B, P = tensors[0].shape
    T = tensors[2].shape[1]

    def step(share: bool) -> tuple[float, torch.Tensor]:
        set_prompt_sharing(share)
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        logp = completion_logprobs(model, *tensors)
        (-(logp * tensors[3]).sum() / tensors[3].sum()).backward()
        return time.perf_counter() - start, logp.detach()

    step(True), step(False)  # warm-up
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        for share in ((True, False) if r % 2 == 0 else (False, True)):
            seconds, logp = step(share)
            times[share].append(seconds)
            if share:
                shared_logp = logp
            else:
                joint_logp = logp
    m = tensors[3].bool()
    gap = float((shared_logp - joint_logp)[m].abs().max())
    positions = {True: args.prompts * P + B * T, False: B * (P + T)}
    print(f"{B} rows = {args.prompts} prompts x {args.group_size}; prompt {P} positions (padded), completion {T}; "
          f"{args.threads} threads; largest log-prob difference {gap:.2e}")
    print("| scoring | positions through the decoder | forward + backward s (median) | runs |")
    print("|---|---|---|---|")
    for share in (False, True):
        label = "each prompt once (run.share_prompts = true)" if share else "one joint forward per row"
        print(f"| {label} | {positions[share]:,} | {statistics.median(times[share]):.2f} | {', '.join(f'{t:.2f}' for t in times[share])} |")
    print(f"ratio shared / joint: {statistics.median(times[True]) / statistics.median(times[False]):.2f}")


if __name__ == "__main__":
    main()
