"""Weights from one source to every rollout worker through a collective, parameter by parameter.

A `WeightSyncGroup` is a standalone torch.distributed process group (not the default group, so a
learner's own training group is untouched): rank 0 is the source (the driver when it holds the
policy, or learner rank 0), ranks 1..R the rollout workers. Gloo moves CPU tensors; NCCL moves
GPU tensors when every member has one. Formed once, in two steps, because the source must
publish where to meet before anyone can join:

    host = WeightSyncHost(ip)                       # the source's process: a TCPStore on a free port
    # every receiver, elsewhere, at the same time:  WeightSyncGroup.receiver(host.address, rank, world, model)
    group = host.source(world, manifest_of(named))  # returns once every receiver has agreed and joined
    group.send(named)                               # receivers: group.receive(model)

The manifest (names, shapes and the rollout dtypes, in the order they are sent) is agreed once,
at formation: each receiver checks it against its own model and says yes or why not, and the
source tells everyone whether all agreed, so a mismatched model is refused on every side with
the reason instead of hanging a broadcast. After that a sync is one broadcast per parameter
(small ones share one, up to a bucket's size: `bucket_plan`): bounded memory on the source (the
tensor in hand and at most one bucket; a sharded learner can gather each parameter just before
yielding it), no per-step metadata, and receivers write large parameters in place.

A receiver without an HF model of its own (a vLLM server's worker, rlvr/rollout/vllm_weights.py,
whose parameters are fused: q, k and v in one tensor) joins with `model=None`, checks the manifest
with its own `problems` function and takes a sync with `receive_tensors`: each manifest entry as
(name, tensor) in a fresh buffer, for its own loader to place.

A group whose member died cannot be repaired (gloo and NCCL groups have a fixed membership);
forming a new generation on the same host (`host.source(..., generation=g)`, receivers likewise)
replaces it. The host's store outlives generations.
"""

from __future__ import annotations

import datetime
import json
import math
import socket
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import torch
import torch.distributed as dist

from rlvr.errors import UsageError

BACKENDS = ("gloo", "nccl")


class WeightSyncError(RuntimeError):
    """The group could not form, or a sync broke off (a member died, a timeout, a source that sent other tensors than agreed)."""


class ManifestMismatch(UsageError):
    """A receiver's model does not have the parameters the source sends (names, shapes or dtypes differ)."""


@dataclass(frozen=True)
class Entry:
    """One tensor of a sync, as the receivers hold it."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # torch dtype name without the prefix ("bfloat16"): the rollout dtype this tensor travels and is held in

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * getattr(torch, self.dtype).itemsize


ALIGN = 16  # bytes: every tensor in a bucket starts at a multiple of this, so it can be viewed as its dtype in place


def _padded(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def bucket_plan(manifest: list[Entry], bucket_bytes: int) -> list[list[int]]:
    """The manifest's entries (indices) grouped into broadcasts: consecutive tensors smaller than
    `bucket_bytes` share one of at most that size; a larger tensor goes alone (and is received in
    place). A broadcast costs ~0.5 ms however small (gloo on loopback, measured in
    bench/weight_sync.py): LoRA adapters are hundreds of tiny tensors. Both sides compute the
    plan from the manifest, so nothing but the tensors travels.

    >>> bucket_plan([Entry("a", (4,), "float32"), Entry("b", (4,), "float32"), Entry("c", (64,), "float32")], 64)
    [[0, 1], [2]]
    """
    plan, current, size = [], [], 0
    for k, e in enumerate(manifest):
        if e.nbytes >= bucket_bytes:
            plan += [current] if current else []
            plan.append([k])
            current, size = [], 0
            continue
        if current and size + _padded(e.nbytes) > bucket_bytes:
            plan.append(current)
            current, size = [], 0
        current.append(k)
        size += _padded(e.nbytes)
    return plan + ([current] if current else [])


def manifest_of(named_tensors: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype | str | None = None) -> list[Entry]:
    """The manifest of what a source sends: its tensors' names and shapes in order, each in `dtype`
    (the rollout dtype; None: each tensor's own). Only metadata is read, so a sharded source can
    pass its parameters' full shapes without gathering them.

    >>> manifest_of([("w", torch.zeros(2, 3))], "bfloat16")
    [Entry(name='w', shape=(2, 3), dtype='bfloat16')]
    """
    name_of = (lambda t: str(t.dtype)) if dtype is None else (lambda t: str(dtype))
    return [Entry(name, tuple(t.shape), name_of(t).removeprefix("torch.")) for name, t in named_tensors]


def manifest_problems(manifest: list[Entry], model: torch.nn.Module) -> list[str]:
    """Why `model` cannot receive the weights the manifest describes (empty: it can). A receiver
    holds every tensor in the manifest's dtype, so a dtype difference is refused, not cast: it
    would mean the rollout model is not the one the run's numerics were agreed for."""
    params = dict(model.named_parameters())
    problems = []
    for e in manifest:
        p = params.get(e.name)
        if p is None:
            problems.append(f"{e.name}: not a parameter of this model")
        elif tuple(p.shape) != e.shape:
            problems.append(f"{e.name}: shape {tuple(p.shape)} here, {e.shape} sent")
        elif str(p.dtype).removeprefix("torch.") != e.dtype:
            problems.append(f"{e.name}: dtype {str(p.dtype).removeprefix('torch.')} here, {e.dtype} sent")
    return problems


def _summary(problems: list[str], shown: int = 5) -> str:
    """The first few problems and how many more: a model of another architecture differs everywhere."""
    more = f" (and {len(problems) - shown} more)" if len(problems) > shown else ""
    return "; ".join(problems[:shown]) + more


def route_ip(host: str) -> str:
    """This machine's address on the route to `host` (an IP or a name): the address a member binds
    gloo to so that a peer over there can reach it. No packet is sent (a UDP socket only picks its route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((socket.gethostbyname(host), 9))
            return probe.getsockname()[0]
        except OSError:  # no route known (an isolated machine): loopback reaches a peer on this machine
            return "127.0.0.1"


def _timeout(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def _process_group(store, rank: int, world: int, backend: str, timeout_s: float, bind_ip: str | None, device: torch.device):
    """A gloo or NCCL group on `store` (a PrefixStore of one generation). Gloo binds to `bind_ip`
    when given: its default device resolves the hostname, which is a loopback address on many
    machines and would make a multi-node group unreachable."""
    if backend == "gloo":
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = _timeout(timeout_s)
        device_ = dist.ProcessGroupGloo.create_device(hostname=bind_ip) if bind_ip else dist.ProcessGroupGloo.create_default_device()
        opts._devices = [device_]
        return dist.ProcessGroupGloo(store, rank, world, opts)
    if backend == "nccl":
        if not dist.is_nccl_available() or device.type != "cuda":
            raise WeightSyncError(f"backend 'nccl' needs a CUDA device and a torch built with NCCL (this member: {device}, "
                                  f"NCCL available: {dist.is_nccl_available()}); use 'gloo'")
        torch.cuda.set_device(device)  # the communicator binds to the current device
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = _timeout(timeout_s)
        return dist.ProcessGroupNCCL(store, rank, world, opts)
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


class WeightSyncHost:
    """The source's side before the group exists: a TCPStore on `ip` and a free port (`address`),
    which receivers are told to meet at. It lives as long as the source's process needs groups."""

    def __init__(self, ip: str = "127.0.0.1", timeout_s: float = 300.0) -> None:
        # port 0: the OS picks a free one (no race between finding a port and binding it)
        self.store = dist.TCPStore(ip, 0, is_master=True, wait_for_workers=False, timeout=_timeout(timeout_s))
        self.ip, self.timeout_s = ip, timeout_s
        self.address = f"{ip}:{self.store.port}"

    def source(self, world: int, manifest: list[Entry], generation: int = 0, backend: str = "gloo",
               device: torch.device | str = "cpu", bucket_mb: float = 16.0) -> WeightSyncGroup:
        """Form generation `generation` as rank 0 of `world` members: publish the manifest, wait for
        every receiver's verdict, tell them all the outcome, then connect. Raises ManifestMismatch
        (naming each refusing rank and why) when any receiver refused. `bucket_mb`: the most the
        source holds besides the tensor in hand (bucket_plan)."""
        store = dist.PrefixStore(f"weights/{generation}/", self.store)
        store.set("manifest", json.dumps([[e.name, list(e.shape), e.dtype] for e in manifest]))
        store.set("backend", backend)
        bucket_bytes = int(bucket_mb * 2**20)
        store.set("bucket_bytes", str(bucket_bytes))
        try:
            verdicts = {rank: _get(store, f"verdict/{rank}", self.timeout_s, f"rollout worker rank {rank} to join") for rank in range(1, world)}
        except WeightSyncError as err:  # the receivers that did answer would wait for "go" until their own timeout
            store.set("go", f"the source gave up: {err}")
            raise
        refused = {rank: v for rank, v in verdicts.items() if v}
        if refused:
            reason = "; ".join(f"rank {rank}: {v}" for rank, v in refused.items())
            store.set("go", f"refused by {reason}")
            raise ManifestMismatch(f"rollout workers cannot receive the learner's weights: {reason}")
        store.set("go", "")
        device = torch.device(device)
        pg = _process_group(store, 0, world, backend, self.timeout_s, self.ip, device)
        return WeightSyncGroup(pg, 0, world, manifest, backend, device, bucket_bytes)

    def close(self) -> None:
        self.store = None  # the server thread stops when the store is collected


def _get(store, key: str, timeout_s: float, waiting_for: str) -> str:
    try:
        store.wait([key], _timeout(timeout_s))
    except RuntimeError as err:  # torch raises DistStoreError (a RuntimeError) on timeout
        raise WeightSyncError(f"waited {timeout_s:g} s for {waiting_for}: {err}") from None
    return store.get(key).decode()


class WeightSyncGroup:
    """A formed group: `send` on rank 0, `receive` on the others (module doc)."""

    def __init__(self, pg, rank: int, world: int, manifest: list[Entry], backend: str, device: torch.device, bucket_bytes: int) -> None:
        self.pg, self.rank, self.world, self.manifest, self.backend, self.device = pg, rank, world, manifest, backend, device
        self.plan = bucket_plan(manifest, bucket_bytes)
        self.store_client = None  # a receiver's connection to the source's store, kept while the group lives

    @property
    def nbytes(self) -> int:
        """Bytes one sync moves to each receiver."""
        return sum(e.nbytes for e in self.manifest)

    @classmethod
    def receiver(cls, address: str, rank: int, world: int, model: torch.nn.Module | None, generation: int = 0,
                 timeout_s: float = 300.0, bind_ip: str | None = None,
                 problems: Callable[[list[Entry]], list[str]] | None = None, device: torch.device | str | None = None) -> WeightSyncGroup:
        """Join generation `generation` of the group whose source listens at `address` ("ip:port"),
        as `rank` (1..world-1), to receive into `model`. Raises ManifestMismatch when this model, or
        another receiver's, cannot hold what the source sends. With `model=None` the manifest is
        checked by `problems` (None: accepted as sent) and syncs are taken with `receive_tensors`,
        on `device` when the group is NCCL's."""
        if not 1 <= rank < world:
            raise ValueError(f"a receiver's rank must be in 1..{world - 1}, got {rank}")
        ip, _, port = address.rpartition(":")
        try:
            base = dist.TCPStore(ip, int(port), is_master=False, timeout=_timeout(timeout_s))
        except RuntimeError as err:  # DistNetworkError: nothing listens there
            raise WeightSyncError(f"cannot reach the weight source at {address}: {err}") from None
        store = dist.PrefixStore(f"weights/{generation}/", base)
        manifest = [Entry(n, tuple(s), d) for n, s, d in json.loads(_get(store, "manifest", timeout_s, "the source's manifest"))]
        backend = _get(store, "backend", timeout_s, "the source's backend")
        bucket_bytes = int(_get(store, "bucket_bytes", timeout_s, "the source's bucket size"))
        if model is not None:
            found = manifest_problems(manifest, model)
        else:
            found = problems(manifest) if problems is not None else []
        store.set(f"verdict/{rank}", _summary(found))
        if found:
            raise ManifestMismatch(f"this rollout worker's model cannot receive the learner's weights: {_summary(found)}")
        go = _get(store, "go", timeout_s, "the source's decision")
        if go:
            raise ManifestMismatch(f"the weight group did not form: {go}")
        if backend != "nccl":
            device = torch.device("cpu")
        else:
            device = next(model.parameters()).device if model is not None else torch.device(device if device is not None else "cuda")
        pg = _process_group(store, rank, world, backend, timeout_s, bind_ip, device)
        group = cls(pg, rank, world, manifest, backend, device, bucket_bytes)
        group.store_client = base
        return group

    def send(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Broadcast the manifest's tensors from rank 0, in order, each cast to its rollout dtype
        (small ones several to a broadcast: bucket_plan). `named_tensors` is consumed lazily, one
        tensor at a time. Returns the bytes sent to each receiver. A tensor other than the
        manifest's next raises here and closes the group, so the receivers fail too, at once."""
        if self.rank != 0:
            raise WeightSyncError(f"rank {self.rank} receives; only rank 0 sends")
        try:
            return self._send(iter(named_tensors))
        except WeightSyncError:
            self.close()
            raise

    def _send(self, it) -> int:
        sent = 0
        with torch.no_grad():
            for bucket in self.plan:
                tensors = [self._next(it, k) for k in bucket]
                if len(tensors) == 1:
                    self._broadcast(tensors[0])
                else:  # the bucket as raw bytes, each tensor padded to ALIGN: any mix of dtypes, bit for bit
                    parts = []
                    for t in tensors:
                        raw = t.reshape(-1).view(torch.uint8)
                        parts += [raw, raw.new_zeros(_padded(raw.numel()) - raw.numel())]
                    self._broadcast(torch.cat(parts))
                sent += sum(t.numel() * t.element_size() for t in tensors)
            extra = next(it, None)
            if extra is not None:
                raise WeightSyncError(f"the source gave more tensors than the manifest's {len(self.manifest)} (next: {extra[0]})")
        self._synchronize()
        return sent

    def _next(self, it, k: int) -> torch.Tensor:
        """Tensor k of the sync from the source's stream, checked against the manifest, in the rollout dtype on the group's device."""
        entry = self.manifest[k]
        name, tensor = next(it, (None, None))
        if name != entry.name or tuple(tensor.shape) != entry.shape:
            got = "nothing" if name is None else f"{name} {tuple(tensor.shape)}"
            raise WeightSyncError(f"tensor {k} of the sync: the manifest says {entry.name} {entry.shape}, the source gave {got}")
        # .to is a no-op (no copy) when the tensor is already in place and in the rollout dtype
        return tensor.detach().to(self.device, getattr(torch, entry.dtype)).contiguous()

    def receive(self, model: torch.nn.Module) -> int:
        """Take one sync into `model`'s parameters (the model the manifest was checked against).
        A tensor broadcast alone into a contiguous parameter on the group's device is written in
        place; any other goes through a buffer (its own, or its bucket's). Returns the bytes received."""
        if self.rank == 0:
            raise WeightSyncError("rank 0 sends; receivers are ranks 1..")
        params = dict(model.named_parameters())
        received = 0
        with torch.no_grad():
            for bucket in self.plan:
                entries = [self.manifest[k] for k in bucket]
                if len(entries) == 1:
                    p = params[entries[0].name]
                    if p.device == self.device and p.is_contiguous():
                        self._broadcast(p.data)
                    else:
                        buffer = torch.empty(entries[0].shape, dtype=p.dtype, device=self.device)
                        self._broadcast(buffer)
                        p.copy_(buffer)
                else:
                    raw = torch.empty(sum(_padded(e.nbytes) for e in entries), dtype=torch.uint8, device=self.device)
                    self._broadcast(raw)
                    offset = 0
                    for e in entries:
                        p = params[e.name]
                        p.copy_(raw[offset:offset + e.nbytes].view(p.dtype).reshape(e.shape))
                        offset += _padded(e.nbytes)
                received += sum(e.nbytes for e in entries)
        self._synchronize()
        return received

    def receive_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Take one sync as (name, tensor) per manifest entry, in order, each in a fresh buffer on the
        group's device (a bucket's tensors are views of that bucket's own buffer), for a receiver
        whose parameters are not the manifest's (model=None). Consume it to the end: a receiver that
        stops early closes the group, so the source fails at once instead of waiting on it."""
        if self.rank == 0:
            raise WeightSyncError("rank 0 sends; receivers are ranks 1..")
        done = False
        try:
            with torch.no_grad():
                for bucket in self.plan:
                    entries = [self.manifest[k] for k in bucket]
                    if len(entries) == 1:
                        e = entries[0]
                        tensor = torch.empty(e.shape, dtype=getattr(torch, e.dtype), device=self.device)
                        self._broadcast(tensor)
                        yield e.name, tensor
                        continue
                    raw = torch.empty(sum(_padded(e.nbytes) for e in entries), dtype=torch.uint8, device=self.device)
                    self._broadcast(raw)
                    offset = 0
                    for e in entries:
                        yield e.name, raw[offset:offset + e.nbytes].view(getattr(torch, e.dtype)).reshape(e.shape)
                        offset += _padded(e.nbytes)
            self._synchronize()
            done = True
        finally:
            if not done:
                self.close()

    def _broadcast(self, t: torch.Tensor) -> None:
        if self.pg is None:
            raise WeightSyncError("the weight group was closed (a sync broke off); a new one must be formed")
        try:
            self.pg.broadcast(t, 0).wait()
        except RuntimeError as err:  # a member gone, or the group's timeout
            self.close()  # closes this member's connections, so the others fail now rather than at their timeout
            raise WeightSyncError(f"the weight broadcast broke off (rank {self.rank} of {self.world}): {err}") from None

    def _synchronize(self) -> None:
        if self.device.type == "cuda":  # NCCL's wait() only orders streams: a caller timing the sync wants it done
            torch.cuda.synchronize(self.device)

    def close(self) -> None:
        """Abort the group: its connections close at once (NCCL's destructor would otherwise wait on a dead peer)."""
        pg, self.pg = self.pg, None
        if pg is not None:
            pg.abort()

