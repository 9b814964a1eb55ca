"""The Ray backend: the learner in this process, rollout and reward workers as Ray actors.

Per generation round the prompts are cut into one contiguous slice per rollout worker; each
worker samples its slice with its copy of the policy, and the slice goes straight on to a reward
worker (Ray passes the result along without the driver touching it), so verification of one
slice overlaps sampling of the others. The learner (LocalLearner: optimizer, reference, update)
stays here; after every update the changed weights (LoRA: the adapters only) reach every rollout
worker: broadcast parameter by parameter through a process group of this process and the workers
(distributed.weight_sync = "collective", weight_sync.py), or put into Ray's object store once for
every worker to load ("object_store"). Workers start from the policy's config and tensors
(workers.PolicySpec), never a pickled module.

Synchronous mode waits for the weights to reach every worker before the next round. Asynchronous
mode (distributed.mode = "async") starts the next `max_staleness` rounds as soon as a round is
handed to the loop, so the workers sample while the learner updates; a round is then sampled by
weights at most `max_staleness` updates old. Every round is admitted (none is dropped for being
stale: that would bias training toward the problems that sample fast), and algo.tis_cap corrects
the gap. Rounds in flight at a checkpoint are waited for and saved in it, so a resumed run
trains on exactly what the uninterrupted one would have.

Faults: workers are restartable actors (distributed.max_restarts) whose calls Ray retries; since
every call names its weight version and is seeded by its prompts' places in the round, a redone
slice equals the lost one. Workers that cannot be placed stop the run after
distributed.startup_timeout_s with what the cluster lacks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import ray.exceptions
import torch

from rlvr.checkpoint import fault_point
from rlvr.config import Config, ConfigError, DistributedConfig
from rlvr.data import Example, chat_prompts, format_prompt
from rlvr.distributed.weight_sync import WeightSyncError, WeightSyncHost, manifest_of
from rlvr.distributed.workers import (
    RewardWorker, RolloutWorker, WeightsMissing, merge_scores, pack_weights, rollouts_from_dict,
    rollouts_to_dict, trainable_weights,
)
from rlvr.errors import RunStopped, UsageError
from rlvr.distributed.learner_group import DistributedError, FirstWeights, LearnerGroup, teacher_weights_of
from rlvr.learner import Generation, LocalLearner, row_messages
from rlvr.sharded_checkpoint import is_sharded
from rlvr.rollout import Rollouts, ToolTrace, concat_rollouts


def even_slices(n: int, parts: int) -> list[tuple[int, int]]:
    """(first, count) of `parts` contiguous slices of n items, sizes differing by at most one; empty ones left out."""
    base, extra = divmod(n, parts)
    out, first = [], 0
    for k in range(parts):
        count = base + (k < extra)
        if count:
            out.append((first, count))
        first += count
    return out


@dataclass
class Round:
    """One generation round, started (Ray references) or restored from a checkpoint (results)."""

    prompts: list[str]  # the examples' raw prompts: the loop must ask for exactly these
    version: int  # the weight version that samples it
    slices: list[tuple[int, int]]
    sampled: list  # RolloutWorker.generate results, or their ObjectRefs
    scored: list | None  # RewardWorker.score ObjectRefs; None: not yet submitted (restored rounds)


def connect(dc: DistributedConfig) -> bool:
    """Join (distributed.address) or start a Ray instance; True if this call started the connection."""
    if ray.is_initialized():
        return False
    # RLVR_* settings (sandbox options, fault injection in tests) reach the workers as they reach this process.
    env = {k: v for k, v in os.environ.items() if k.startswith("RLVR_")}
    options: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING, "runtime_env": {"env_vars": env}}
    if dc.address:
        _check_reachable(dc.address, dc.startup_timeout_s)
        try:
            ray.init(address=dc.address, **options)
        except ConnectionError as err:
            raise DistributedError(f"distributed.address = {dc.address!r}: cannot join a Ray cluster there ({err})") from None
    else:
        ray.init(num_cpus=os.cpu_count() or 1, **options)
    return True


def _check_reachable(address: str, timeout_s: float) -> None:
    """A host:port that nothing answers on would make ray.init retry for minutes: fail at once."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if address == "auto" or not host or not port.isdigit():
        return  # 'auto' reads the local cluster's address file; ray.init reports a missing one at once
    try:
        socket.create_connection((host, int(port)), timeout=min(timeout_s, 10.0)).close()
    except OSError as err:
        raise DistributedError(f"distributed.address = {address!r}: no Ray cluster answers there ({err}); start one with "
                               "`ray start --head` or fix the address") from None


def weight_sync_mode(dc: DistributedConfig) -> str:
    """'collective' or 'object_store' (distributed.weight_sync). 'auto' takes the collective path
    only where it is the faster one: synchronous rollout workers on GPUs (NCCL). On CPU, gloo sends
    over TCP at about 1 GB/s per receiver while the object store hands a node's workers one
    shared-memory copy: 1.1-3x faster here (bench/weight_sync.py, docs/distributed.md).
    Collective with async rounds in flight is refused by DistributedConfig.validate."""
    if dc.weight_sync != "auto":
        return dc.weight_sync
    ahead = dc.mode == "async" and dc.max_staleness > 0
    # Learner ranks on CPU with rollout workers on GPUs would send over gloo: the object store then.
    on_gpus = dc.gpus_per_worker > 0 and (dc.learner_workers == 0 or dc.gpus_per_learner > 0)
    return "collective" if on_gpus and not ahead else "object_store"


def required_resources(dc: DistributedConfig) -> dict[str, float]:
    need = defaultdict(float)
    need["CPU"] += dc.rollout_workers * dc.cpus_per_worker + dc.reward_workers * dc.cpus_per_reward_worker
    need["GPU"] += dc.rollout_workers * dc.gpus_per_worker
    for name, amount in dc.resources.items():
        need[name] += dc.rollout_workers * float(amount)
    return {k: v for k, v in need.items() if v > 0}


def _asks(dc: DistributedConfig) -> str:
    one = {"CPU": dc.cpus_per_worker, "GPU": dc.gpus_per_worker, **dc.resources}
    return (f"{dc.rollout_workers} rollout workers x {({k: v for k, v in one.items() if v})} and {dc.reward_workers} reward workers x "
            f"{dc.cpus_per_reward_worker} CPU")


class RayLearner:
    """The Learner verbs with sampling and verification on Ray workers (module doc)."""

    def __init__(self, policy: torch.nn.Module, tokenizer, cfg: Config) -> None:
        self.tokenizer, self.pad_token_id, self.cfg = tokenizer, tokenizer.pad_token_id, cfg
        self.device = next(policy.parameters()).device
        # Bytes of one weight version: the trainable parameters (the same shapes and dtypes wherever they are trained)
        self.weight_bytes = sum(p.numel() * p.element_size() for p in policy.parameters() if p.requires_grad)
        dc = self.dc = cfg.distributed
        self.trainer: LocalLearner | LearnerGroup | None = None  # who holds the trained weights: this process, or learner ranks
        self.lookahead = dc.max_staleness if dc.mode == "async" else 0
        self.rounds, self.version, self.pending = 0, 0, {}
        self.rollout, self.reward, self.pids, self.started = [], [], {}, False
        self.metrics: dict[str, float] = defaultdict(float)
        self.weight_sync = weight_sync_mode(dc)
        # collective mode: the source's address, its group when it is this process, and whether the group is formed
        self.weight_address, self.weight_host, self.weight_group, self.weight_formed, self.weight_generation = None, None, None, False, 0
        self.owns_ray = connect(dc)
        try:
            # Learner ranks first: they reserve their devices in one placement group, and the
            # rollout workers then take what is left.
            # Version 0, what the ranks and the rollout workers start (and restart) from: the policy's
            # config and its tensors, put into the object store once, never the module. With learner
            # ranks this process keeps no reference to the policy (the pipeline frees its model).
            self.first = FirstWeights.of(policy, cfg.model.trust_remote_code)
            self.policy = None if dc.learner_workers > 0 else policy
            self.trainer = (LearnerGroup(self.first, cfg, teacher=teacher_weights_of(cfg, tokenizer, policy)) if dc.learner_workers > 0
                            else LocalLearner(policy, tokenizer, cfg))
            self._start_workers()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ workers

    def _start_workers(self) -> None:
        dc = self.dc
        need, have = required_resources(dc), ray.cluster_resources()
        short = {k: f"needs {v:g}, has {have.get(k, 0):g}" for k, v in need.items() if have.get(k, 0) + 1e-9 < v}
        if short:
            raise DistributedError(f"the Ray cluster cannot hold {_asks(dc)}: {short}. Lower distributed.rollout_workers or the "
                                   "resources per worker, or add nodes that have them")
        # Version 0 (packed: the object store hands numpy arrays to readers without a copy)
        self.versions = {0: self.first.ref}
        restart = {"max_restarts": dc.max_restarts, "max_task_retries": -1}
        rollout_actor = ray.remote(RolloutWorker).options(
            num_cpus=dc.cpus_per_worker, num_gpus=dc.gpus_per_worker, resources=dict(dc.resources), **restart)
        threads, device = max(1, round(dc.cpus_per_worker)), "cuda" if dc.gpus_per_worker > 0 else "cpu"
        self.rollout_args = (self.first.spec, self.versions[0], self.tokenizer, self.cfg,
                             threads, device)
        self.rollout = [rollout_actor.remote(*self.rollout_args) for _ in range(dc.rollout_workers)]
        reward_actor = ray.remote(RewardWorker).options(num_cpus=dc.cpus_per_reward_worker, **restart)
        self.reward = [reward_actor.remote(self.cfg) for _ in range(dc.reward_workers)]
        probes = [a.ready.remote() for a in self.rollout + self.reward]
        done, waiting = ray.wait(probes, num_returns=len(probes), timeout=dc.startup_timeout_s)
        if waiting:
            raise DistributedError(
                f"{len(waiting)} of {len(probes)} Ray workers did not start within distributed.startup_timeout_s = "
                f"{dc.startup_timeout_s:g} s. Asked for {_asks(dc)}; the cluster has {_fmt(ray.available_resources())} free of "
                f"{_fmt(ray.cluster_resources())}, and one worker's resources must fit on one node (or a worker took longer than "
                "that to load its copy of the model: raise the timeout)"
            )
        infos = self._get(done)  # a worker whose constructor failed raises its error here (workers.py: ready)
        self.started = True
        self.pids = {("rollout", k): info["pid"] for k, info in enumerate(infos[: len(self.rollout)])}
        self.pids |= {("reward", k): info["pid"] for k, info in enumerate(infos[len(self.rollout):])}
        if self.weight_sync == "collective":
            self._open_weight_source()
            self._form_weight_group()

    def _get(self, refs: list) -> list:
        try:
            return ray.get(refs)
        except ray.exceptions.RayTaskError as err:  # a worker's call raised: a run-stopping error keeps its type
            if isinstance(err.cause, (RunStopped, UsageError, WeightsMissing)):
                raise err.cause from None
            raise DistributedError(f"a Ray worker failed: {err.cause!r}") from err
        except ray.exceptions.RayActorError as err:
            raise DistributedError(
                f"a Ray worker died more often than distributed.max_restarts = {self.dc.max_restarts} allows: {err}"
            ) from err

    # ------------------------------------------------------------------ generation rounds

    def _submit(self, round_index: int, examples: list[Example]) -> None:
        t0 = time.perf_counter()
        prompts = [format_prompt(self.tokenizer, e, self.cfg.data) for e in examples]
        slices = even_slices(len(examples), len(self.rollout))
        # In a list: Ray passes the reference, the worker fetches on a version change. None under
        # collective sync: the workers were sent this version already (or say they lack it).
        weights = [self.versions.get(self.version)]
        tools = self.cfg.rollout.multi_turn  # a conversation's sampler needs its examples
        sampled = [self.rollout[w].generate.remote(prompts[first:first + n], round_index, first, self.version, weights,
                                                   examples[first:first + n] if tools else None)
                   for w, (first, n) in enumerate(slices)]
        self.pending[round_index] = Round([e.prompt for e in examples], self.version, slices, sampled, None)
        self._score(self.pending[round_index], examples, prompts)
        self.metrics["time/dispatch"] += time.perf_counter() - t0

    def _score(self, rnd: Round, examples: list[Example], prompts: list[str]) -> None:
        G = self.cfg.rollout.group_size
        rnd.scored = []
        for w, ((first, n), sampled) in enumerate(zip(rnd.slices, rnd.sampled)):
            rows = [e for e in examples[first:first + n] for _ in range(G)]
            rnd.scored.append(self.reward[w % len(self.reward)].score.remote(
                sampled, [p for p in prompts[first:first + n] for _ in range(G)], rows, chat_prompts(self.tokenizer, rows, self.cfg.data)))

    def generate(self, examples: list[Example], upcoming: list[list[Example]] = ()) -> Generation:
        fault_point("generate")
        r = self.rounds
        self.rounds += 1
        if r not in self.pending:
            self._submit(r, examples)
        for ahead, later in enumerate(upcoming[: self.lookahead], start=1):
            if r + ahead not in self.pending:
                self._submit(r + ahead, later)
        rnd = self.pending.pop(r)
        if rnd.prompts != [e.prompt for e in examples]:
            raise RuntimeError(f"round {r} was started for other prompts than the loop now asks for (a bug in the lookahead)")
        prompts = [format_prompt(self.tokenizer, e, self.cfg.data) for e in examples]
        if rnd.scored is None:  # restored from a checkpoint: sampled, not yet scored
            self._score(rnd, examples, prompts)
        t0 = time.perf_counter()
        try:
            sampled, scored = self._fetch_sampled(rnd), self._get(rnd.scored)
        except WeightsMissing:  # collective sync: a worker restarted since the last broadcast holds version 0
            self._broadcast_weights()  # re-forms the group with the new process, resends the current version
            self._submit(r, examples)  # and the round again: seeded by its place, it samples what the lost one would have
            rnd = self.pending.pop(r)
            sampled, scored = self._fetch_sampled(rnd), self._get(rnd.scored)
        self._account(rnd, sampled, scored, time.perf_counter() - t0)
        parts = [self._to_device(rollouts_from_dict(s["rollouts"])) for s in sampled]
        rollouts = parts[0] if len(parts) == 1 else concat_rollouts(parts, self.pad_token_id)
        G = self.cfg.rollout.group_size
        per_row = [e for e in examples for _ in range(G)]
        traces = [s.get("trace") for s in sampled]
        trace = None if any(t is None for t in traces) else ToolTrace.concat(traces)
        return Generation(trace.prompts if trace is not None else [p for p in prompts for _ in range(G)], rollouts,
                          [t for s in sampled for t in s["texts"]], row_messages(self.tokenizer, per_row, self.cfg.data, trace),
                          scores=merge_scores([s["scores"] for s in scored]), trace=trace)

    def _fetch_sampled(self, rnd: Round) -> list[dict]:
        """The round's slices as results: fetched where they are still references (one ray.get for all)."""
        refs = iter(self._get([s for s in rnd.sampled if not isinstance(s, dict)]))
        return [s if isinstance(s, dict) else next(refs) for s in rnd.sampled]

    def _to_device(self, r: Rollouts) -> Rollouts:
        if self.device.type == "cpu":
            return r
        return Rollouts(**{k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in rollouts_to_dict(r).items()})

    def _account(self, rnd: Round, sampled: list[dict], scored: list[dict], wait_s: float) -> None:
        m = self.metrics
        m["time/ray_wait"] += wait_s  # blocked on the workers
        m["time/rollout_workers"] += max(s["generate_s"] for s in sampled)  # the slowest worker's sampling
        m["time/reward_workers"] += max(s["verify_s"] for s in scored)
        m["time/weight_load"] += max(s["load_s"] for s in sampled)
        staleness = self.version - rnd.version
        m["distributed/staleness_max"] = max(m.get("distributed/staleness_max", 0), staleness)
        m["distributed/rounds"] += 1
        m["distributed/staleness_sum"] += staleness
        # A worker answering from another process was restarted (rounds restored from a checkpoint
        # carry no pid: the workers that sampled them belonged to the killed driver).
        answers = [(("rollout", w), s.get("pid")) for w, s in enumerate(sampled)]
        answers += [(("reward", w % len(self.reward)), s["pid"]) for w, s in enumerate(scored)]
        for key, pid in answers:
            if pid is None:
                continue
            if self.pids.get(key) not in (None, pid):
                m["distributed/worker_restarts"] += 1
            self.pids[key] = pid

    def step_metrics(self) -> dict[str, float]:
        m, self.metrics = dict(self.metrics), defaultdict(float)
        rounds = m.pop("distributed/rounds", 0)
        if rounds:
            m["distributed/staleness_mean"] = m.pop("distributed/staleness_sum") / rounds
        m.setdefault("distributed/worker_restarts", 0)
        if isinstance(self.trainer, LearnerGroup):
            m.setdefault("distributed/learner_restarts", 0)
        return m

    # ------------------------------------------------------------------ update and weights

    def update(self, rollouts: Rollouts, advantages_B: torch.Tensor, include_B: torch.Tensor) -> dict[str, float]:
        out = self.trainer.update(rollouts, advantages_B, include_B)
        out.update(self._sync_weights())
        return out

    def _sync_weights(self) -> dict[str, float]:
        """The changed weights to the rollout workers as the next version: by collective (the
        workers receive while this process sends), or into the object store once. Synchronous
        mode has every rollout worker load them now and waits; asynchronous mode does not wait:
        the next round each worker is asked for names this version, and the worker loads it
        first (time/weight_load)."""
        self.version += 1
        if self.weight_sync == "collective":
            return self._broadcast_weights()
        t0 = time.perf_counter()
        self.versions[self.version] = self._put_weights()
        put_s = time.perf_counter() - t0
        if self.lookahead == 0:
            loaded = self._get([w.load.remote(self.version, [self.versions[self.version]]) for w in self.rollout])
            self.metrics["time/weight_load"] += max(loaded)
        in_use = {self.version} | {rnd.version for rnd in self.pending.values()}
        self.versions = {v: ref for v, ref in self.versions.items() if v in in_use}
        return {"time/weight_sync": time.perf_counter() - t0, "time/weight_put": put_s, "distributed/weight_sync_bytes": self.weight_bytes}

    def _put_weights(self) -> ray.ObjectRef:
        """The trainable weights in the object store: packed here from the policy this process trains,
        or by learner rank 0 from the gathered shards (left in the store, never copied here)."""
        if isinstance(self.trainer, LearnerGroup):
            return self.trainer.packed_weights_ref()
        return ray.put(pack_weights(trainable_weights(self.policy)))  # the copy: the packed arrays are views of the live parameters

    # ------------------------------------------------------------------ weights by collective (weight_sync.py)

    def _weight_source(self):
        """What the source sends, lazily: the trainable parameters in manifest order (views on CPU)."""
        return ((name, p.detach()) for name, p in self.policy.named_parameters() if p.requires_grad)

    def _open_weight_source(self) -> None:
        """Where the weight group's source listens: learner rank 0 (it gathers the shards), or this process."""
        if isinstance(self.trainer, LearnerGroup):
            self.weight_address = self.trainer.open_weight_source(self.dc.startup_timeout_s)
        else:
            self.weight_host = WeightSyncHost(ray.util.get_node_ip_address(), self.dc.startup_timeout_s)
            self.weight_address = self.weight_host.address
        self.weight_formed = False

    def _form_weight_group(self) -> None:
        """A new generation of the weight group: the source (rank 0: this process or learner rank 0)
        and every rollout worker. The manifest is the trainable parameters in the dtypes the
        workers hold them in (the policy's own: a worker's copy is built from the policy's tensors)."""
        if self.weight_group is not None:
            self.weight_group.close()
            self.weight_group = None
        self.weight_formed = False
        self.weight_generation += 1
        world, dc = len(self.rollout) + 1, self.dc
        joining = [w.join_weight_group.remote(self.weight_address, k + 1, world, self.weight_generation, dc.startup_timeout_s)
                   for k, w in enumerate(self.rollout)]
        try:
            if isinstance(self.trainer, LearnerGroup):
                backend = "nccl" if dc.gpus_per_learner > 0 and dc.gpus_per_worker > 0 else "gloo"
                self.trainer.form_weight_group(world, self.weight_generation, backend)
            else:
                backend = "nccl" if self.device.type == "cuda" and dc.gpus_per_worker > 0 else "gloo"
                self.weight_group = self.weight_host.source(world, manifest_of(self._weight_source()), self.weight_generation, backend,
                                                            self.device)
        except BaseException:
            # The source's error (a refusal names each refusing worker; a lost learner rank is
            # LearnerLost) is the one to raise: the workers' joins fail because of it.
            ray.wait(joining, num_returns=len(joining), timeout=30)
            raise
        self._get(joining)
        self.weight_formed = True

    def _send_weights(self) -> int:
        """One broadcast of the trainable weights from the source; the bytes each worker received."""
        if isinstance(self.trainer, LearnerGroup):
            return self.trainer.send_weights()
        return self.weight_group.send(self._weight_source())

    def _weight_group_intact(self) -> bool:
        """Every rollout worker is in the current group (a restarted one is in none)."""
        return all(g == self.weight_generation for g in self._get([w.weight_group_generation.remote() for w in self.rollout]))

    def _broadcast_weights(self) -> dict[str, float]:
        """Send the current version to every rollout worker by collective. A worker restarted
        since the group formed is in none: the group is formed again first, and once more if the
        broadcast breaks off (a worker died during it)."""
        t0 = time.perf_counter()
        for attempt in range(2):
            if attempt or not self.weight_formed or not self._weight_group_intact():
                self._form_weight_group()
            receiving = [w.receive_weights.remote(self.version, self.weight_generation) for w in self.rollout]
            try:
                t_send = time.perf_counter()
                sent = self._send_weights()
                send_s = time.perf_counter() - t_send
                loaded = self._get(receiving)
                break
            except (WeightSyncError, WeightsMissing, DistributedError) as err:
                if attempt:
                    raise DistributedError(f"the weight broadcast to the rollout workers failed twice: {err}") from err
                # The failed side closed its connections, so the others fail at once; they must be
                # done failing before they are asked to join a new group.
                ray.wait(receiving, num_returns=len(receiving), timeout=self.dc.startup_timeout_s)
        self.metrics["time/weight_load"] += max(loaded)
        return {"time/weight_sync": time.perf_counter() - t0, "time/weight_send": send_s, "distributed/weight_sync_bytes": sent}

    def reference_kl(self, rollouts: Rollouts) -> torch.Tensor:
        return self.trainer.reference_kl(rollouts)

    def recover(self) -> None:
        """After a learner rank died (LearnerLost): the ranks re-formed from the run's first
        weights (FirstWeights, in the object store), and the rollout workers back at
        version 0 with no round in flight. rl_train then loads the last checkpoint, if any,
        through load_policy and load_trainer_state, which hand the workers its weights."""
        if not isinstance(self.trainer, LearnerGroup):
            raise RuntimeError("only learner ranks (distributed.learner_workers > 0) can be lost and re-formed")
        self.trainer.reform()
        self.metrics["distributed/learner_restarts"] += 1
        self.rounds, self.version, self.pending = 0, 0, {}  # rounds in flight were sampled for steps that will be redone
        if self.weight_sync == "collective":  # a new rank 0: a new source, which sends its (first) weights
            self._open_weight_source()
            self._broadcast_weights()
            return
        self.versions = {0: self.first.ref}
        self._get([w.load.remote(0, [self.versions[0]]) for w in self.rollout])

    def evaluation_policy(self) -> contextlib.AbstractContextManager[torch.nn.Module]:
        return self.trainer.evaluation_policy()

    # ------------------------------------------------------------------ checkpoints

    def save_policy(self, directory: Path) -> None:
        self.trainer.save_policy(directory)

    def load_policy(self, directory: Path) -> None:
        """Into the trainer only: load_trainer_state, which a resume calls next, knows the weight
        version the rollout workers must be given them under. Learner ranks read the shards they
        wrote (any number of ranks: DCP reshards); a checkpoint of a learner in one process holds
        its optimizer state in trainer.pt, which the ranks do not read."""
        if isinstance(self.trainer, LearnerGroup) and not is_sharded(directory):
            raise ConfigError(f"distributed.learner_workers = {self.dc.learner_workers}: {directory} was written by a learner in one "
                              "process (model.safetensors, its optimizer state in trainer.pt); resume it with learner_workers = 0")
        self.trainer.load_policy(directory)

    def trainer_state(self) -> dict[str, Any]:
        """The local learner's state, the round and version counters, and the rounds already started
        (waited for: their samples, drawn by older weights, are part of an exact resume)."""
        pending = []
        for r in sorted(self.pending):
            rnd = self.pending[r]
            rnd.sampled = self._fetch_sampled(rnd)
            pending.append({"round": r, "prompts": rnd.prompts, "version": rnd.version, "slices": [list(s) for s in rnd.slices],
                            "sampled": rnd.sampled})
        return {**self.trainer.trainer_state(), "rounds": self.rounds, "ray": {"version": self.version, "pending": pending}}

    def load_trainer_state(self, state: dict[str, Any]) -> None:
        self.trainer.load_trainer_state(state)
        self.rounds = state.get("rounds", 0)
        saved = state.get("ray", {"version": 0, "pending": []})
        self.version = saved["version"]
        self.pending = {p["round"]: Round(p["prompts"], p["version"], [tuple(s) for s in p["slices"]],
                                          [{**s, "pid": None} for s in p["sampled"]], None)
                        for p in saved["pending"]}
        # The policy now holds the checkpoint's weights; the workers still hold the run's first ones.
        if self.weight_sync == "collective":
            self._broadcast_weights()
            return
        self.versions = {self.version: self._put_weights()}
        self._get([w.load.remote(self.version, [self.versions[self.version]]) for w in self.rollout])

    def close(self) -> None:
        """Stop the workers and leave Ray; never raises (it runs in the pipeline's `finally`, where
        an error of its own would hide the one that ended the run)."""
        try:
            if self.reward and self.started:  # let reward workers stop their verifier pools
                ray.wait([w.close.remote() for w in self.reward], num_returns=len(self.reward), timeout=10)
        except Exception:  # noqa: BLE001 - a dead worker or a lost cluster: nothing left to close there
            pass
        for actor in self.rollout + self.reward:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001
                pass
        self.rollout, self.reward = [], []
        if self.weight_group is not None:
            self.weight_group.close()
        self.weight_group = self.weight_host = None
        try:
            if self.trainer is not None:
                self.trainer.close()  # learner ranks: before Ray goes
        finally:
            if self.owns_ray and ray.is_initialized():
                ray.shutdown()

def _fmt(resources: dict[str, float]) -> str:
    keep = {k: round(v, 2) for k, v in resources.items()
            if not k.startswith(("node:", "memory", "object_store_memory", "bundle_group")) and "_group_" not in k}  # placement groups' own
    return str(keep)
