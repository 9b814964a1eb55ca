"""The arithmetic floor of an RL step: FLOPs of the real tokens / this machine's matmul throughput.

FLOPs are counted for a decoder-only transformer from its config (Kaplan et al. 2020, sec. 2.1:
2 FLOPs per weight per token, plus attention's QK^T and AV at 2 * ctx * d each, per layer):

    forward(tokens) = 2 * N_body * tokens + 4 * layers * d_attn * sum(ctx) + 2 * V * h * logit positions

N_body = the weights of the decoder blocks' linear layers; the (tied) embedding costs a lookup
as input and a V x h matmul only where logits are needed. Only real tokens count: no padding,
and each prompt once per group (its G completions can share its prefix, in generation and in
training), which makes this a lower bound on the work of the step:

- generation: prefill of each prompt (logits at its last position) + one decoding forward per
  completion token after the first (the first comes from the prefill's logits);
- training forward: each prompt once + every completion token (logits at completion positions);
- backward = 2 x training forward; the reference forward (beta > 0) = 1 x training forward.

Completion lengths enter as the step's mean (the sum of ctx over a completion is then exact for
equal lengths, a slight underestimate otherwise).

Throughput is measured with torch.matmul on the model's own layer shapes at the row counts the
step uses (B = prompts x G rows when decoding, B x (prompt + completion) rows when training), and
on a large square matmul (the machine's peak). Backward matmuls have other shapes (transposes of
the same sizes); they are charged at the training-forward throughput.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def from_config(cls, cfg) -> "Shape":
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return cls(cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                   getattr(cfg, "num_key_value_heads", cfg.num_attention_heads), head_dim, cfg.intermediate_size, cfg.vocab_size)

    def linear_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of one decoder block's matmuls: q, k, v, o, gate, up, down."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]

    @property
    def body_params(self) -> int:
        return self.layers * sum(a * b for a, b in self.linear_shapes())

    def forward_flops(self, tokens: float, ctx_sum: float, logit_positions: float) -> float:
        attn = 4 * self.layers * self.heads * self.head_dim * ctx_sum
        return 2 * self.body_params * tokens + attn + 2 * self.vocab * self.hidden * logit_positions


def step_flops(shape: Shape, prompt_lens: list[int], G: int, mean_completion: float, beta: float) -> dict[str, float]:
    """FLOPs of one step's real work, by phase; prompt_lens has one entry per prompt."""
    L = max(mean_completion, 1.0)
    gen = train = 0.0
    for P in prompt_lens:
        prefill = shape.forward_flops(P, P * (P + 1) / 2, 1)
        decode = G * shape.forward_flops(L - 1, (L - 1) * P + (L - 1) * L / 2, L - 1)
        gen += prefill + decode
        train += shape.forward_flops(P, P * (P + 1) / 2, 0) + G * shape.forward_flops(L, L * P + L * (L + 1) / 2, L)
    return {"generate": gen, "forward": train, "backward": 2 * train, "reference": train if beta > 0 else 0.0}


def _time(fn, min_seconds: float = 0.1, repeats: int = 7) -> float:
    """Seconds per call, the best of `repeats` timings of at least min_seconds each: the best
    is what the machine can do (other load only ever slows a timing down)."""
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                best = min(best, elapsed / n)
                break
    return best


def peak_gflops(size: int = 1024) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    return 2 * size**3 / _time(lambda: torch.matmul(a, b)) / 1e9


def model_gflops(shape: Shape, rows: int) -> float:
    """GFLOP/s of one block's matmuls plus the logits projection, on `rows` rows."""
    shapes = shape.linear_shapes() + [(shape.hidden, shape.vocab)]
    xs = {k: torch.randn(rows, k) for k in {a for a, _ in shapes}}
    ws = [torch.randn(a, b) for a, b in shapes]

    def run() -> None:
        for (a, _), w in zip(shapes, ws):
            torch.matmul(xs[a], w)

    return 2 * rows * sum(a * b for a, b in shapes) / _time(run) / 1e9


@dataclass
class Throughput:
    peak: float  # GFLOP/s, large square matmul
    decode: float  # GFLOP/s, the model's matmuls on B rows
    train: float  # GFLOP/s, the model's matmuls on B x tokens rows
    decode_rows: int
    train_rows: int


def measure(shape: Shape, decode_rows: int, train_rows: int) -> Throughput:
    return Throughput(peak_gflops(), model_gflops(shape, decode_rows), model_gflops(shape, train_rows), decode_rows, train_rows)


def floor_seconds(flops: dict[str, float], tp: Throughput) -> tuple[float, float]:
    """(floor at the model's shapes, floor at peak throughput), seconds."""
    train = flops["forward"] + flops["backward"] + flops["reference"]
    shaped = flops["generate"] / (tp.decode * 1e9) + train / (tp.train * 1e9)
    return shaped, (flops["generate"] + train) / (tp.peak * 1e9)
