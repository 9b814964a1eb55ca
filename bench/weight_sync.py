"""Weight sync to Ray rollout workers: the collective path against the object store, 1M-135M parameters.

    .venv/bin/python bench/weight_sync.py                        # all sizes, ~1 min on 2 cores
    .venv/bin/python bench/weight_sync.py --sizes 1M 135M --syncs 5

For Llama-shaped models of 1M to 135M parameters (the largest has SmolLM2-135M's shapes: hidden
576, 30 layers, MLP 1536, 9/3 heads, vocabulary 49152, tied embeddings; random values, nothing is
downloaded), two real `RolloutWorker`s on a local Ray instance hold the model, and this process
publishes every parameter (full fine-tuning, fp32) the two ways RayLearner can:
  - collective: both workers' `receive_weights` called, this process broadcasting parameter by
    parameter through the gloo group (`WeightSyncGroup.send`), until both have them;
  - object store: `pack_weights` + `ray.put` once, both workers' `load` (fetch + copy), until both have them.
Each is what `RayLearner._sync_weights` times as `time/weight_sync`. The two are interleaved so
drift of the machine hits both; medians of --syncs repeats after one warm-up each. Every worker
here is on this machine, so neither path crosses a network: the figures are the floor of each
path's own cost (copies, serialisation, the object store's shared memory, gloo's loopback TCP).
"""

from __future__ import annotations

import argparse
import statistics
import time

# name: (hidden, layers, MLP, heads, kv heads, vocabulary)
SHAPES = {
    "1M": (64, 4, 256, 4, 2, 8192),
    "10M": (256, 6, 768, 4, 2, 16384),
    "35M": (384, 12, 1024, 6, 2, 32768),
    "135M": (576, 30, 1536, 9, 3, 49152),  # SmolLM2-135M
}


def random_model(label: str):
    """A Llama causal LM of the named shapes, randomly initialised."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    hidden, layers, mlp, heads, kv, vocab = SHAPES[label]
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv, tie_word_embeddings=True, max_position_embeddings=2048)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def measure(label: str, syncs: int, ray) -> dict:
    import torch

    from rlvr.config import Config
    from rlvr.distributed.weight_sync import WeightSyncHost, manifest_of
    from rlvr.distributed.workers import RolloutWorker, initial_tensors, pack_weights, policy_spec, trainable_weights, weights_nbytes
    from rlvr.models import build_char_tokenizer

    model = random_model(label)
    params = sum(p.numel() for p in model.parameters())
    actor = ray.remote(RolloutWorker).options(num_cpus=1)
    init = ray.put(pack_weights(initial_tensors(model)))
    workers = [actor.remote(policy_spec(model), init, build_char_tokenizer(), Config(), 1, "cpu") for _ in range(2)]
    ray.get([w.ready.remote() for w in workers])
    del init

    def source():
        return ((n, p.detach()) for n, p in model.named_parameters() if p.requires_grad)

    host = WeightSyncHost("127.0.0.1", 300)
    joins = [w.join_weight_group.remote(host.address, k + 1, 3, 1, 300) for k, w in enumerate(workers)]
    group = host.source(3, manifest_of(source()), 1)
    ray.get(joins)
    version = 0

    def collective() -> float:
        nonlocal version
        version += 1
        t0 = time.perf_counter()
        receiving = [w.receive_weights.remote(version, 1) for w in workers]
        group.send(source())
        ray.get(receiving)
        return time.perf_counter() - t0

    def object_store() -> float:
        nonlocal version
        version += 1
        t0 = time.perf_counter()
        ref = ray.put(pack_weights(trainable_weights(model)))
        ray.get([w.load.remote(version, [ref]) for w in workers])
        return time.perf_counter() - t0

    times = {"collective": [], "object store": []}
    for repeat in range(syncs + 1):
        with torch.no_grad():  # new values each time, as an update makes
            next(model.parameters()).add_(1e-3)
        for name, fn in (("collective", collective), ("object store", object_store)):
            seconds = fn()
            if repeat:  # the first of each: warm-up (connections, the object store's first allocation)
                times[name].append(seconds)
    nbytes = weights_nbytes(pack_weights(trainable_weights(model)))
    group.close()
    for w in workers:
        ray.kill(w)
    return {"label": label, "params": params, "mb": nbytes / 1e6, **{k: statistics.median(v) for k, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--syncs", type=int, default=5)
    args = parser.parse_args()
    import ray

    ray.init(num_cpus=3, include_dashboard=False, logging_level="ERROR")
    rows = ["| model | parameters | MB / sync (fp32) | collective (ms) | object store (ms) | collective s/MB | object store s/MB |",
            "|---|---|---|---|---|---|---|"]
    try:
        for label in args.sizes:
            r = measure(label, args.syncs, ray)
            rows.append(f"| {r['label']} | {r['params'] / 1e6:.1f}M | {r['mb']:.1f} | {r['collective'] * 1e3:.1f} | "
                        f"{r['object store'] * 1e3:.1f} | {r['collective'] / r['mb']:.5f} | {r['object store'] / r['mb']:.5f} |")
            print(rows[-1], flush=True)
    finally:
        ray.shutdown()
    print("\n".join(rows))


if __name__ == "__main__":
    main()
