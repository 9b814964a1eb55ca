"""One learner rank: a process holding its part of the policy, joined with the others in one
torch.distributed group (`LearnerGroup`, learner_group.py, makes W of them Ray actors).

A rank builds the policy from its spec and weights (workers.py: `PolicySpec`, never a pickled
module), then its KL reference, optimizer and scheduler exactly as `LocalLearner` does. Two
strategies:

- "fsdp": torch's FSDP2 (`fully_shard`) on every transformer block, then on a root module that owns
  the rest (embeddings, final norm, output head). A rank holds 1/W of every parameter, gradient and
  AdamW moment; a block's parameters are all-gathered for its forward and backward and freed
  after, and its gradients are reduce-scattered after each backward. The KL reference is a frozen
  copy sharded the same way (adapters off under LoRA).
- "ddp": a whole replica per rank; after a pass each rank's accumulated gradients are summed, in
  rank order, into every rank's (`sum_gradients`).

The update is `rlvr.update.run_update`, the local learner's own code: the driver plans the batch
(the include mask, the whole batch's normaliser, the micro-batches) and rank r runs micro-batches
r, r+W, r+2W, ... of the plan, every one normalised by the whole batch's normaliser. The sum of
the ranks' gradients is then the one-process gradient (up to the order of float additions under
FSDP; exactly the one-process sum taken in rank order under DDP).

FSDP's gathers and reductions are collectives: every rank must run the same number of forwards
and backwards, in the same order. A rank with fewer micro-batches than the others pads its share
with zero-weight forwards of a real row (loss x 0: the same modules run and gather, and every
gradient they add is exactly 0); the no-grad forwards (old log-probs, the top-entropy pass, the
teacher's) run over the padded share too.

What needs the whole batch gathers it: the top-entropy threshold (algo.top_entropy_quantile) is
the quantile of every rank's in-loss token entropies (`gather_in_rank_order`), so each rank keeps
the tokens one process would. On-policy distillation's teacher is built frozen on every rank
beside the reference (sharded the same way under FSDP), from the copy the driver put in the
object store.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rlvr.architecture import base_model
from rlvr.checkpoint import fault_point
from rlvr.config import Config, ConfigError
from rlvr.learner import adamw, lr_factor
from rlvr.logprobs import completion_logprobs
from rlvr.models import AdapterOffReference, reference_for
from rlvr.rollout import Rollouts
from rlvr.runtime import apply_run_settings, forward_precision
from rlvr.sharded_checkpoint import load_sharded, save_sharded
from rlvr.update import MicroBatchPlan, Share, UpdateMetrics, UpdateSettings, chunk_sequence_kl, run_update
from rlvr.distributed.weight_sync import WeightSyncError, WeightSyncHost, manifest_of
from rlvr.distributed.workers import PolicySpec, StartedActor, build_policy, pack_weights, policy_skeleton, unpack_weights

GRADIENT_BUCKET_ELEMENTS = 2**24  # DDP sums gradients this many elements at a time: W x 64 MiB of fp32 in flight


class ShardedScorer(torch.nn.Module):
    """The FSDP root: the policy's (or reference's) scoring runs through this module's forward, so
    FSDP2's root hooks gather what no block owns (embeddings, final norm, head) for it and reduce
    its gradients after backward. `completion_logprobs` calls the decoder and the head separately,
    bypassing the transformers model's own forward, hence this wrapper. rlvr.update scores a chunk
    through `score_chunk`."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, prompt_ids_BP, prompt_mask_BP, completion_ids_BT, completion_mask_BT, temperature: float, with_entropy: bool,
                adapters_off: bool = False, score_mask_BT=None):
        model = AdapterOffReference(self.model) if adapters_off else self.model
        scored = completion_logprobs(model, prompt_ids_BP, prompt_mask_BP, completion_ids_BT, completion_mask_BT, temperature,
                                     with_entropy=with_entropy, score_mask_BT=score_mask_BT)
        # Copies, not views: FSDP's pre-backward hook sits on the output, and an in-place op on a
        # view of it would drop the hook (FSDP2 warns about views).
        return tuple(t.clone() for t in scored) if with_entropy else scored.clone()

    def score_chunk(self, chunk: Rollouts, temperature: float, with_entropy: bool):
        return self(chunk.prompt_ids_BP, chunk.prompt_mask_BP, chunk.completion_ids_BT, chunk.attention_mask_BT, temperature,
                    with_entropy, score_mask_BT=scored_positions(chunk))


@dataclass(frozen=True)
class ShardedAdaptersOff:
    """The KL reference of a sharded LoRA policy: the policy's root, scored with its adapters off."""

    scorer: ShardedScorer

    def score_chunk(self, chunk: Rollouts, temperature: float, with_entropy: bool):
        return self.scorer(chunk.prompt_ids_BP, chunk.prompt_mask_BP, chunk.completion_ids_BT, chunk.attention_mask_BT, temperature,
                           with_entropy, adapters_off=True, score_mask_BT=scored_positions(chunk))


def scored_positions(chunk: Rollouts):
    """A multi-turn chunk's sampled tokens (it attends to its tool results too); None: all it attends to."""
    return chunk.completion_mask_BT if chunk.context_mask_BT is not None else None


def shard(model: torch.nn.Module, mesh, cfg: Config, device: torch.device, *, frozen: bool = False) -> ShardedScorer:
    """FSDP2 over `model`: each transformer block (the classes transformers lists in
    `_no_split_modules`) a unit, then a `ShardedScorer` root over the rest. Gradients are summed
    over ranks, not averaged: the loss is already normalised by the whole batch's normaliser.

    FSDP2 keeps the root's parameters gathered after a forward (training's backward would gather
    them again at once), and only a backward frees them: a `frozen` model (the reference: no
    backward, ever) frees them after every forward instead."""
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard  # only where FSDP runs

    block_names = set(getattr(base_model(model), "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in block_names]
    if not blocks:
        raise ConfigError(f"distributed.learner_strategy = 'fsdp': {type(base_model(model)).__name__} names no transformer block "
                          "class (_no_split_modules) to shard by; use learner_strategy = 'ddp'")
    options: dict[str, Any] = {"mesh": mesh}
    if device.type == "cuda" and cfg.run.autocast != "none":
        # bf16 parameters in compute, fp32 master weights and fp32 gradient reduction (run.autocast's
        # intent, done by FSDP: it gathers bf16 copies, halving the traffic)
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=getattr(torch, cfg.run.autocast), reduce_dtype=torch.float32)
    if cfg.distributed.learner_offload:
        options["offload_policy"] = CPUOffloadPolicy()
    for block in blocks:
        fully_shard(block, **options)
    root = ShardedScorer(model)
    fully_shard(root, reshard_after_forward=True if frozen else None, **options)
    for module in root.modules():
        if isinstance(module, FSDPModule):
            # FSDP2 divides the reduced gradient by W by default (a mean over data-parallel ranks); here
            # the sum is the gradient. Sum-only collectives: gloo has no PREMUL_SUM, the op a factor uses.
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return root


def load_shards(model: torch.nn.Module, tensors: dict[str, torch.Tensor], device: torch.device) -> None:
    """Materialise a model sharded on the meta device (`shard`): each parameter's local shard is
    allocated on `device` and filled with this rank's slice of the whole tensor in `tensors` (cut
    here, nothing sent between ranks); buffers, which FSDP leaves whole, are copied whole."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    model.to_empty(device=device)
    with torch.no_grad():
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            whole = tensors[name]
            if isinstance(t, DTensor):
                mine = distribute_tensor(whole.to(t.dtype), t.device_mesh, t.placements, src_data_rank=None).to_local()
                t.to_local().copy_(mine)
            else:
                t.copy_(whole)


def free_address() -> tuple[str, int]:
    """This node's IP and a port free on it now (for the group's rendezvous)."""
    import ray

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return ray.util.get_node_ip_address(), s.getsockname()[1]


def _interface_of(ip: str) -> str | None:
    """The network interface holding `ip` (None when psutil cannot say)."""
    try:
        import psutil
    except ImportError:
        return None
    return next((name for name, addresses in psutil.net_if_addrs().items() if any(a.address == ip for a in addresses)), None)


def rollouts_to(rollouts: Rollouts, device: torch.device) -> Rollouts:
    return Rollouts(**{f.name: (v.to(device) if isinstance(v := getattr(rollouts, f.name), torch.Tensor) else v) for f in fields(rollouts)})


def local_nbytes(tensors) -> int:
    """Bytes this rank holds of `tensors` (a DTensor's local shard)."""
    return sum((t.to_local() if hasattr(t, "to_local") else t).nbytes for t in tensors)


class LearnerRank(StartedActor):
    """Rank `rank` of `world`: its part of the policy, reference and optimizer (module doc)."""

    def __init__(self, rank: int, world: int, cfg: Config, threads: int, device_type: str) -> None:
        # An error here is kept for ready() to raise, as in workers.RolloutWorker: raised from a
        # constructor, Ray would report only that the actor died.
        self.init_error: BaseException | None = None
        self.rank, self.world, self.cfg = rank, world, cfg
        self.strategy = cfg.distributed.learner_strategy
        self.settings = UpdateSettings.from_config(cfg)
        self.joined = False
        self.weight_host, self.weight_group = None, None  # rank 0, when weights reach the rollout workers by collective
        self.teacher = None  # on-policy distillation's (build)
        try:
            apply_run_settings(cfg, threads)
            if device_type == "cuda":
                torch.cuda.set_device(0)  # Ray shows the actor only the GPU it reserved for it
                self.device = torch.device("cuda", 0)
            else:
                self.device = torch.device("cpu")
        except Exception as err:  # noqa: BLE001 - re-raised by ready()
            self.init_error = err

    def address(self) -> tuple[str, int]:
        return free_address()

    def join(self, address: tuple[str, int]) -> None:
        """Join the learners' process group (rank 0 listens at `address`). Gloo carries CPU tensors;
        on GPU NCCL carries CUDA tensors and gloo the rest (offloaded shards)."""
        import ray

        backend = "cpu:gloo,cuda:nccl" if self.device.type == "cuda" else "gloo"
        interface = _interface_of(ray.util.get_node_ip_address())
        if interface and "GLOO_SOCKET_IFNAME" not in os.environ:
            # Gloo binds to what the hostname resolves to, a loopback address on many machines: a
            # group over several nodes would not connect. The interface Ray reaches this node by.
            os.environ["GLOO_SOCKET_IFNAME"] = interface
        ip, port = address
        dist.init_process_group(backend, init_method=f"tcp://{ip}:{port}", rank=self.rank, world_size=self.world)
        self.joined = True

    # ------------------------------------------------------------------ the learner

    def build(self, spec: PolicySpec, weights: dict, cfg: Config | None = None, teacher_spec: PolicySpec | None = None,
              teacher_weights: dict | None = None) -> None:
        """The policy (from its spec and `weights`: pack_weights(initial_tensors(policy)), which Ray
        fetches from its object store), its reference, optimizer and scheduler, as LocalLearner
        builds them; with `cfg`, under that config's settings (LearnerGroup.reset), dropping what
        it held before. With `teacher_spec` and `teacher_weights` (on-policy distillation), the
        frozen teacher, placed as the reference is: sharded under FSDP, whole under DDP."""
        if cfg is not None:
            self.cfg, self.strategy, self.settings = cfg, cfg.distributed.learner_strategy, UpdateSettings.from_config(cfg)
            self.model = self.policy = self.reference = self.teacher = self.optimizer = self.scheduler = None
        cfg, tc = self.cfg, self.cfg.train
        tensors = unpack_weights(weights)  # views of the object store's copy: shared by the node's ranks, not this rank's memory
        # FSDP shards the model while it is on the meta device, then allocates only this rank's
        # shards and copies its slice of each tensor into them (load_shards): no rank ever holds
        # the whole model, in host memory or on its device.
        self.model = policy_skeleton(spec, tensors) if self.strategy == "fsdp" else build_policy(spec, tensors, str(self.device))
        if cfg.model.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.model.train()
        reference = reference_for(self.model) if cfg.algo.beta > 0 else None
        if self.strategy == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh

            self.mesh = mesh = init_device_mesh(self.device.type, (self.world,))
            self.policy = shard(self.model, mesh, cfg, self.device)  # the FSDP root: what the update calls
            load_shards(self.model, tensors, self.device)
            if isinstance(reference, AdapterOffReference):
                self.reference = ShardedAdaptersOff(self.policy)
            elif reference is not None:
                self.reference = shard(reference, mesh, cfg, self.device, frozen=True)
                load_shards(reference, tensors, self.device)
            else:
                self.reference = None
        else:
            self.policy, self.reference = self.model, reference
        self.teacher = self._build_teacher(teacher_spec, teacher_weights) if teacher_spec is not None else None
        # After sharding: the optimizer holds (and allocates its moments for) this rank's shards.
        self.optimizer = adamw(self.model, tc.lr, (tc.adam_beta1, tc.adam_beta2), tc.adam_epsilon, tc.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_factor(tc.lr_schedule, tc.warmup_steps, tc.steps * cfg.algo.num_iterations))

    def _build_teacher(self, spec: PolicySpec, weights: dict):
        """The on-policy distillation teacher, frozen (eval mode, no gradients) as load_teacher leaves it."""
        tensors = unpack_weights(weights)
        if self.strategy != "fsdp":
            return build_policy(spec, tensors, str(self.device)).eval().requires_grad_(False)
        teacher = policy_skeleton(spec, tensors).eval().requires_grad_(False)
        root = shard(teacher, self.mesh, self.cfg, self.device, frozen=True)  # the policy's mesh (build)
        load_shards(teacher, tensors, self.device)
        return root

    def share(self, parts: list[torch.Tensor]) -> Share:
        """This rank's micro-batches of a plan (r, r+W, ...) and how it joins the others (module doc)."""
        mine = parts[self.rank::self.world]
        if self.world == 1:
            return Share(mine, len(mine))
        if self.strategy == "fsdp":  # as many forwards as the busiest rank: zero-weight ones of a real row fill up
            return Share(mine, math.ceil(len(parts) / self.world), parts[0][:1] if parts else None, reduce_loss=self.sum_in_rank_order,
                         gather=self.gather_in_rank_order)
        return Share(mine, len(mine), reduce_gradients=self.sum_gradients, reduce_loss=self.sum_in_rank_order,
                     gather=self.gather_in_rank_order)

    def update(self, batch: tuple[Rollouts, torch.Tensor, MicroBatchPlan],
               settings: UpdateSettings | None = None) -> tuple[UpdateMetrics, float]:
        """This rank's share of one planned update; returns its metric sums and the learning rate.
        `settings`: the ones the driver planned with, when they are not the config's (adaptive
        entropy control applies its coefficient of the moment); None: the config's."""
        fault_point("learner_update")  # the resume tests' SIGKILL: the other ranks then wait in this update's collectives
        rollouts, advantages_B, plan = batch
        rollouts, advantages_B = rollouts_to(rollouts, self.device), advantages_B.to(self.device)
        settings = settings if settings is not None else self.settings
        with forward_precision(self.cfg, self.device):
            log = run_update(self.policy, self.optimizer, self.scheduler, rollouts, advantages_B, settings, plan,
                             self.share(plan.parts), reference=self.reference, teacher=self.teacher)
        return log, self.scheduler.get_last_lr()[0]

    def reference_kl(self, rollouts: Rollouts, parts: list[torch.Tensor]) -> list[torch.Tensor]:
        """(len(rows),) KL of each of this rank's micro-batches (parts r, r+W, ...), in order."""
        if self.reference is None:
            raise RuntimeError("no KL reference: algo.beta is 0")
        rollouts, share = rollouts_to(rollouts, self.device), self.share(parts)
        chunks = [rollouts.select(rows.to(self.device)) for rows in share.parts]
        if share.forwards > len(chunks):  # FSDP: every rank forwards as often (module doc); the padding's KL is dropped
            chunks += [rollouts.select(share.pad_rows.to(self.device))] * (share.forwards - len(chunks))
        with forward_precision(self.cfg, self.device):
            kls = [chunk_sequence_kl(self.policy, self.reference, c, estimator=self.cfg.algo.kl_estimator,
                                     temperature=self.settings.temperature).cpu() for c in chunks]
        if self.strategy == "fsdp":
            self.policy.reshard()  # no backward follows to free the root's gathered parameters (shard())
        return kls[:len(share.parts)]

    # ------------------------------------------------------------------ reductions (DDP, and the loss)

    def sum_in_rank_order(self, value: torch.Tensor) -> torch.Tensor:
        """A scalar summed over ranks as value_0 + value_1 + ..., the same on every rank."""
        gathered = [torch.zeros_like(value.reshape(1)) for _ in range(self.world)]
        dist.all_gather(gathered, value.reshape(1).contiguous())
        total = gathered[0].clone()
        for other in gathered[1:]:
            total += other
        return total.reshape(value.shape)

    def gather_in_rank_order(self, values: torch.Tensor) -> torch.Tensor:
        """A 1-D tensor of any length from every rank, concatenated in rank order, the same on every
        rank (Share.gather). all_gather needs tensors of one size: the lengths go first, then each
        rank's values padded to the longest."""
        sizes = [torch.zeros(1, dtype=torch.long, device=values.device) for _ in range(self.world)]
        dist.all_gather(sizes, torch.tensor([values.numel()], device=values.device))
        lengths = [int(n) for n in sizes]
        if max(lengths) == 0:
            return values
        padded = torch.zeros(max(lengths), dtype=values.dtype, device=values.device)
        padded[:values.numel()] = values
        gathered = [torch.empty_like(padded) for _ in range(self.world)]
        dist.all_gather(gathered, padded)
        return torch.cat([g[:n] for g, n in zip(gathered, lengths)])

    def sum_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Every rank's accumulated gradients summed as g_0 + g_1 + ... + g_(W-1), into every rank's.

        Not torch's DistributedDataParallel: it averages (divides by W, where the loss is already
        normalised by the whole batch), its all-reduce adds in whatever order the ring or tree
        gives (not reproducible bit for bit against one process), and it expects every rank to
        run as many backwards. Gathering every rank's gradient and adding them in rank order
        costs W x a bucket of memory, and is exactly the one-process sum of the same shares."""
        has = torch.tensor([float(p.grad is not None) for p in params])
        if self.device.type == "cuda":
            has = has.to(self.device)
        dist.all_reduce(has, op=dist.ReduceOp.MAX)  # a rank that forwarded nothing has no gradients at all
        live = [p for p, flag in zip(params, has.tolist()) if flag]
        for bucket in _buckets(live, GRADIENT_BUCKET_ELEMENTS):
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in bucket])
            gathered = [torch.empty_like(flat) for _ in range(self.world)]
            dist.all_gather(gathered, flat)
            total = gathered[0]
            for other in gathered[1:]:
                total += other
            offset = 0
            for p in bucket:
                p.grad = total[offset:offset + p.numel()].view_as(p).clone()
                offset += p.numel()

    # ------------------------------------------------------------------ weights and checkpoints

    def named_weights(self, trainable_only: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, whole tensor) of what an update changes (every parameter; under LoRA the adapters),
        or with `trainable_only` False of every parameter and buffer (as `initial_tensors` names
        them: what `build_policy` rebuilds the policy from), one at a time. Collective under
        FSDP: every rank must walk it to the end together (each parameter is all-gathered); only
        rank 0 yields."""
        if self.strategy == "fsdp":
            self.policy.reshard()  # the root's parameters as shards (they are gathered after a forward without backward)
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad or not trainable_only]
        if not trainable_only:
            named += list(self.model.named_buffers())  # FSDP leaves buffers whole on every rank
        for name, t in named:
            whole = t.full_tensor() if hasattr(t, "full_tensor") else t
            if self.rank == 0:
                yield name, whole.detach()

    def with_weights(self, consume: Callable[..., Any], *args, trainable_only: bool = True) -> Any:
        """Rank 0 hands the stream of `named_weights` to `consume(stream, *args)` (the weight
        publisher's send) and returns what it returns; the other ranks walk the stream with it
        (their part in each gather) and return None."""
        stream = self.named_weights(trainable_only)
        try:
            if self.rank == 0:
                return consume(stream, *args)
        finally:
            for _ in stream:  # to the end, also when consume stopped early: the other ranks are in the gathers of the rest
                pass
        return None

    def packed_weights(self, trainable_only: bool = True):
        """Rank 0: pack_weights of `named_weights` (the object-store path; the whole policy for
        evaluation); the others None."""
        return self.with_weights(lambda stream: pack_weights({name: t.cpu() for name, t in stream}), trainable_only=trainable_only)

    # ------------------------------------------------------------------ weights to rollout workers by collective (rank 0)

    def open_weight_host(self, timeout_s: float) -> str:
        """Rank 0: where the rollout workers meet the weight group (weight_sync.WeightSyncHost on this node)."""
        import ray

        self.weight_host = WeightSyncHost(ray.util.get_node_ip_address(), timeout_s)
        return self.weight_host.address

    def form_weight_group(self, world: int, generation: int, backend: str) -> None:
        """Rank 0: form generation `generation` of the weight group as its source, while the rollout
        workers join it. The manifest is the trainable parameters' names, whole shapes and dtypes
        (a sharded parameter's metadata says its whole shape: nothing is gathered)."""
        self.close_weight_group()
        manifest = manifest_of((name, p) for name, p in self.model.named_parameters() if p.requires_grad)
        device = self.device if backend == "nccl" else torch.device("cpu")
        self.weight_group = self.weight_host.source(world, manifest, generation, backend, device)

    def send_weights(self) -> int | None:
        """Every rank walks the trainable weights (its part of each gather); rank 0 broadcasts each
        gathered tensor to the rollout workers as it comes. Rank 0 returns the bytes sent."""
        def send(stream):
            if self.weight_group is None:
                raise WeightSyncError("learner rank 0 holds no weight group (form_weight_group first)")
            return self.weight_group.send(stream)

        return self.with_weights(send)

    def close_weight_group(self) -> None:
        if self.weight_group is not None:
            self.weight_group.close()
            self.weight_group = None

    def packed_weights_ref(self, trainable_only: bool = True) -> tuple[int, Any]:
        """Rank 0, called with num_returns=2: (the packed bytes, packed_weights), so the driver can
        wait on the first, small, result and leave the second in the object store."""
        packed = self.packed_weights(trainable_only)
        return sum(raw.nbytes for _, _, raw in packed.values()), packed

    def save(self, directory: str) -> None:
        save_sharded(Path(directory), self.model, self.optimizer)

    def load(self, directory: str) -> None:
        load_sharded(Path(directory), self.model, self.optimizer)

    def scheduler_state(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_scheduler_state(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state)

    def memory(self) -> dict[str, int]:
        """Bytes this rank holds: its parameters (shards under FSDP) and its optimizer state."""
        state = [t for s in self.optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
        return {"parameters": local_nbytes(self.model.parameters()), "optimizer": local_nbytes(state),
                "reference": local_nbytes(self.reference.parameters()) if isinstance(self.reference, torch.nn.Module) else 0,
                "teacher": local_nbytes(self.teacher.parameters()) if self.teacher is not None else 0}

    def run(self, fn: Callable[..., Any], *args, **kwargs) -> Any:
        """fn(this rank, *args, **kwargs): a hook for what the group has no verb for."""
        return fn(self, *args, **kwargs)

    def close(self) -> None:
        self.close_weight_group()
        if self.joined and dist.is_initialized():
            dist.destroy_process_group()
            self.joined = False


def _buckets(params: list[torch.nn.Parameter], limit: int) -> Iterator[list[torch.nn.Parameter]]:
    """Consecutive parameters of one dtype, up to `limit` elements per bucket (a larger one alone)."""
    bucket: list[torch.nn.Parameter] = []
    size = 0
    for p in params:
        if bucket and (size + p.numel() > limit or p.dtype != bucket[0].dtype):
            yield bucket
            bucket, size = [], 0
        bucket.append(p)
        size += p.numel()
    if bucket:
        yield bucket
