"""The sharded learner, seen from the driver: W learner ranks (learner_rank.py) as Ray actors, with
the learner verbs the RL loop needs.

The ranks are gang-placed: one placement group of W bundles (distributed.cpus_per_learner CPUs,
distributed.gpus_per_learner GPUs and distributed.learner_resources each) is reserved before any rank starts, so either all of them
run or none does; a cluster whose nodes cannot hold W bundles is refused at once, naming what it
lacks, and one that is only busy is waited for up to distributed.startup_timeout_s. The ranks form
one torch.distributed group (gloo on CPU, NCCL on GPU; rank 0's node and a port free there are
the rendezvous) and each builds its part of the policy from the model's config and weights, which
travel once through Ray's object store.

The driver stays the controller: it plans each update (`plan_micro_batches`: the include mask,
the whole batch's normaliser, the micro-batches), every rank runs its share of the plan, and the
ranks' metric sums come back and are merged into the dict `rl_update` returns, with its keys.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ray
import ray.exceptions
import torch

from rlvr.batching import micro_batches
from rlvr.config import Config, ConfigError
from rlvr.errors import LearnerLost, RunStopped, UsageError
from rlvr.learner import EntropyControl
from rlvr.models import resolve_device
from rlvr.rollout import Rollouts
from rlvr.update import UpdateMetrics, UpdateSettings, plan_micro_batches
from rlvr.distributed.learner_rank import LearnerRank, rollouts_to
from rlvr.distributed.weight_sync import WeightSyncError
from rlvr.distributed.workers import build_policy, initial_tensors, pack_weights, policy_spec, unpack_weights


class DistributedError(RunStopped):
    """Ray workers or learner ranks could not start, or died more often than distributed.max_restarts allows."""


def learner_bundle(cpus: float, gpus: float, resources: dict[str, float] | None = None) -> dict[str, float]:
    """What one rank reserves (a bundle of the placement group): CPUs, GPUs and custom resources."""
    bundle = {"CPU": float(cpus), "GPU": float(gpus), **{k: float(v) for k, v in (resources or {}).items()}}
    bundle = {k: v for k, v in bundle.items() if v > 0}
    return bundle or {"CPU": 0.01}  # Ray refuses an empty bundle


def placement_shortfall(world: int, bundle: dict[str, float], nodes: list[dict[str, float]]) -> str | None:
    """Why `world` bundles cannot be placed on nodes of these total resources (None: they can, once free).

    >>> placement_shortfall(2, {"CPU": 2.0}, [{"CPU": 3.0}, {"CPU": 1.0}])
    'needs 2 x {CPU: 2} (CPU: needs 4, has 4), but a bundle must fit on one node: the nodes hold 1'
    """
    need = {k: world * v for k, v in bundle.items()}
    have = {k: sum(n.get(k, 0.0) for n in nodes) for k in bundle}
    short = ", ".join(f"{k}: needs {need[k]:g}, has {have[k]:g}" for k in bundle if have[k] + 1e-9 < need[k])
    fits = sum(min(math.floor(n.get(k, 0.0) / v + 1e-9) for k, v in bundle.items()) for n in nodes)
    asks = f"{world} x {{{', '.join(f'{k}: {v:g}' for k, v in bundle.items())}}}"
    if short:
        return f"needs {asks} ({short})"
    if fits < world:
        totals = ", ".join(f"{k}: needs {need[k]:g}, has {have[k]:g}" for k in bundle)
        return f"needs {asks} ({totals}), but a bundle must fit on one node: the nodes hold {fits}"
    return None


def strategy_problem(strategy: str) -> str | None:
    """Why the installed torch cannot run a learner strategy (None: it can)."""
    import torch.distributed as dist

    if not dist.is_available():
        return "this torch is built without torch.distributed"
    if strategy == "fsdp":
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401 - FSDP2, torch >= 2.6
        except ImportError:
            return f"FSDP2 (torch.distributed.fsdp.fully_shard) needs torch >= 2.6, this is {torch.__version__}"
    return None


def _death(err: ray.exceptions.RayActorError) -> str:
    """The first line of Ray's account of an actor's death (the rest is its creation's traceback)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _resources(resources: dict[str, float]) -> str:
    keep = {k: round(v, 2) for k, v in resources.items() if not k.startswith(("node:", "memory", "object_store_memory", "accelerator_type"))}
    return str(keep)


@dataclasses.dataclass(frozen=True)
class FirstWeights:
    """A policy as its ranks (and rollout workers) start from it: its spec and its tensors, packed
    once into Ray's object store. Nobody needs the module after this: its owner may free it."""

    spec: Any  # workers.PolicySpec
    ref: Any  # ray.ObjectRef of pack_weights(initial_tensors(policy))

    @classmethod
    def of(cls, policy: torch.nn.Module, trust_remote_code: bool = False) -> FirstWeights:
        return cls(policy_spec(policy, trust_remote_code), ray.put(pack_weights(initial_tensors(policy))))


class LearnerGroup:
    """W learner ranks holding and training the policy (module doc).

    `policy` (a module, or its FirstWeights) is read once, here; the group keeps its FirstWeights
    (in the object store) to start a new group from if a rank is lost, and no reference to the module.
    `teacher` (on-policy distillation, distill.on_policy_coef > 0: the frozen model `load_teacher`
    gives, or its FirstWeights) is kept the same way; every rank builds it as it builds the reference.
    `device`: where `evaluation_policy` builds the gathered model (run.device by default).
    """

    def __init__(self, policy: torch.nn.Module | FirstWeights, cfg: Config, *, device: torch.device | str | None = None,
                 teacher: torch.nn.Module | FirstWeights | None = None) -> None:
        dc = cfg.distributed
        self.cfg, self.world, self.strategy = cfg, dc.learner_workers, dc.learner_strategy
        self.settings = UpdateSettings.from_config(cfg)
        self.entropy_control = EntropyControl.start(cfg.algo)  # algo.entropy_adaptive: held here, applied by the ranks
        self.device = torch.device(device) if device is not None else resolve_device(cfg.run.device)
        self.ranks: list = []
        self.placement = None
        self.restarts = 0  # groups formed in place of one that lost a rank (reform)
        problem = strategy_problem(self.strategy)
        if problem:
            raise ConfigError(f"distributed.learner_strategy = {self.strategy!r}: {problem}")
        try:
            self.first = policy if isinstance(policy, FirstWeights) else FirstWeights.of(policy, cfg.model.trust_remote_code)
            self.teacher = teacher_weights(teacher, cfg)
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        dc, W = self.cfg.distributed, self.world
        bundle = learner_bundle(dc.cpus_per_learner, dc.gpus_per_learner, dc.learner_resources)
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        short = placement_shortfall(W, bundle, nodes)
        if short:
            raise DistributedError(f"the Ray cluster cannot hold the learner ranks: distributed.learner_workers = {W} {short}. Lower "
                                   "distributed.learner_workers or the resources per learner, or add nodes that have them")
        self.placement = placement_group([bundle] * W, strategy="PACK")
        ready, _ = ray.wait([self.placement.ready()], timeout=dc.startup_timeout_s)
        if not ready:
            remove_placement_group(self.placement)
            self.placement = None
            raise DistributedError(
                f"the {W} learner ranks ({_resources(bundle)} each) could not be placed within distributed.startup_timeout_s = "
                f"{dc.startup_timeout_s:g} s: the cluster has {_resources(ray.available_resources())} free of "
                f"{_resources(ray.cluster_resources())} (other workers hold the rest); raise the timeout or free resources")
        device_type = "cuda" if dc.gpus_per_learner > 0 else "cpu"
        threads = max(1, round(dc.cpus_per_learner))
        self.ranks = [
            ray.remote(LearnerRank).options(
                num_cpus=dc.cpus_per_learner, num_gpus=dc.gpus_per_learner, resources=dict(dc.learner_resources), max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.placement, placement_group_bundle_index=r),
            ).remote(r, W, self.cfg, threads, device_type)
            for r in range(W)
        ]
        probes = [rank.ready.remote() for rank in self.ranks]
        done, waiting = ray.wait(probes, num_returns=len(probes), timeout=dc.startup_timeout_s)
        if waiting:
            raise DistributedError(f"{len(waiting)} of {W} learner ranks did not start within distributed.startup_timeout_s = "
                                   f"{dc.startup_timeout_s:g} s, though their resources were reserved; raise the timeout")
        self.infos = self._get(probes)
        address = self._get([self.ranks[0].address.remote()])[0]
        self._each("join", address)
        self._each("build", self.first.spec, self.first.ref, None, *self._teacher_args())  # the weights travel once, fetched by
        # every rank from the object store

    def _teacher_args(self) -> tuple:
        return (self.teacher.spec, self.teacher.ref) if self.teacher is not None else ()

    def reset(self, policy: torch.nn.Module, cfg: Config, teacher: torch.nn.Module | FirstWeights | None = None) -> None:
        """Start over on the same ranks from another policy and config (strategy, LoRA, algorithm
        and optimizer settings may change; the world size and resources per rank may not): a new
        learner without new processes. `teacher`: as the constructor's."""
        dc, had = cfg.distributed, self.cfg.distributed
        shape = lambda d: (d.learner_workers, d.cpus_per_learner, d.gpus_per_learner, d.learner_resources)  # noqa: E731
        if shape(dc) != shape(had):
            raise ValueError("LearnerGroup.reset keeps the ranks: distributed.learner_workers and the resources per learner must not change")
        problem = strategy_problem(dc.learner_strategy)
        if problem:
            raise ConfigError(f"distributed.learner_strategy = {dc.learner_strategy!r}: {problem}")
        self.cfg, self.strategy, self.settings = cfg, dc.learner_strategy, UpdateSettings.from_config(cfg)
        self.entropy_control = EntropyControl.start(cfg.algo)
        self.first = FirstWeights.of(policy, cfg.model.trust_remote_code)
        self.teacher = teacher_weights(teacher, cfg)
        self._each("build", self.first.spec, self.first.ref, cfg, *self._teacher_args())

    def _get(self, refs: list) -> list:
        """The calls' results, in order. They are taken as they finish: a rank that died (its
        process killed, its node lost) leaves the others waiting for it inside a collective, so
        the first death ends the group at once (every rank stopped, the reservation freed) and
        raises LearnerLost, after which `reform` starts a new one (rl_train does)."""
        waiting = list(refs)
        try:
            while waiting:
                done, waiting = ray.wait(waiting, num_returns=1)
                ray.get(done)
            return ray.get(refs)
        except ray.exceptions.RayTaskError as err:  # a rank's call raised: a run-stopping error keeps its type
            # A survivor whose collective broke because another rank died may answer before Ray
            # reports the death (gloo fails at once): the death is what happened.
            dead = self._a_dead_rank()
            if dead is not None:
                self._abandon()
                raise LearnerLost(f"a learner rank died ({dead})") from err
            if isinstance(err.cause, (RunStopped, UsageError, WeightSyncError)):  # a broken weight broadcast: the caller retries
                raise err.cause from None
            raise DistributedError(f"a learner rank failed: {err.cause!r}") from err
        except ray.exceptions.RayActorError as err:
            self._abandon()
            raise LearnerLost(f"a learner rank died ({_death(err)})") from err

    def _a_dead_rank(self, timeout_s: float = 10.0) -> str | None:
        """Ray's account of a rank that has died, if any has (each is asked; a death is reported within seconds)."""
        probes = [rank.ready.remote() for rank in self.ranks]
        ray.wait(probes, num_returns=len(probes), timeout=timeout_s)
        for probe in probes:
            try:
                ray.get(probe, timeout=0.1)
            except ray.exceptions.RayActorError as err:
                return _death(err)
            except Exception:  # noqa: BLE001 - alive but busy (stuck in a collective), or its own error: not dead
                pass
        return None

    def reform(self) -> None:
        """A new group in place of one that lost a rank: new processes, placed anew (a lost node's
        ranks go to the nodes left, or the shortfall is named), each holding its part of the first
        weights with a fresh optimizer and scheduler, as the group first began. The caller loads
        the last checkpoint into it."""
        self._abandon()
        self.restarts += 1
        self.entropy_control = EntropyControl.start(self.cfg.algo)  # as the group first began, too
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _abandon(self) -> None:
        """Stop every rank without asking (the living ones may be stuck in a collective with a dead one) and free the reservation."""
        for rank in self.ranks:
            try:
                ray.kill(rank)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.ranks = []
        self._free_placement()

    def _free_placement(self) -> None:
        if self.placement is not None:
            try:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self.placement)
            except Exception:  # noqa: BLE001
                pass
            self.placement = None

    def _each(self, method: str, *args, **kwargs) -> list:
        """Call `method` on every rank at once (collectives need them all) and wait; results in rank order."""
        return self._get([getattr(rank, method).remote(*args, **kwargs) for rank in self.ranks])

    # ------------------------------------------------------------------ the learner verbs

    def update(self, rollouts: Rollouts, advantages_B: torch.Tensor, include_B: torch.Tensor | None) -> dict[str, float]:
        """One planned update over the ranks; the metrics `rl_update` returns, with its keys. Under
        adaptive entropy control the driver plans with, and sends the ranks, the coefficient of the
        moment (with an entropy term no zero-advantage row is skipped), then steps it from the
        merged `loss/entropy`, as LocalLearner does."""
        settings = self.entropy_control.settings(self.settings)
        plan = plan_micro_batches(rollouts, advantages_B, include_B, settings)
        cpu = torch.device("cpu")
        plan = dataclasses.replace(plan, include_B=plan.include_B.cpu(), parts=[p.cpu() for p in plan.parts])
        batch = ray.put((rollouts_to_cpu(rollouts), advantages_B.to(cpu), plan))  # once, for every rank
        results = self._each("update", batch, settings if settings is not self.settings else None)
        log = UpdateMetrics.merged([sums for sums, _ in results])
        return self.entropy_control.observe(log.summary(settings, plan, results[0][1]))

    def reference_kl(self, rollouts: Rollouts) -> torch.Tensor:
        """(B,) summed per-token KL(policy || reference), each micro-batch on one rank (r, r+W, ...)."""
        if self.cfg.algo.beta <= 0:
            raise RuntimeError("no KL reference: algo.beta is 0")
        B = rollouts.completion_ids_BT.shape[0]
        parts = micro_batches(torch.arange(B), self.settings.micro_batch_size)
        per_rank = self._each("reference_kl", ray.put(rollouts_to_cpu(rollouts)), parts)
        kl_B = torch.zeros(B)
        for r, kls in enumerate(per_rank):
            for rows, kl in zip(parts[r::self.world], kls):
                kl_B[rows] = kl
        return kl_B.to(rollouts.completion_ids_BT.device)

    def save_policy(self, directory: Path) -> None:
        """Every rank writes its shards of the policy and optimizer into the checkpoint being built."""
        self._each("save", str(directory))

    def load_policy(self, directory: Path) -> None:
        self._each("load", str(directory))

    def trainer_state(self) -> dict[str, Any]:
        """The scheduler's state (the optimizer's is in the sharded checkpoint save_policy writes) and
        adaptive entropy control's, under LocalLearner's key."""
        return {"scheduler": self._get([self.ranks[0].scheduler_state.remote()])[0],
                "learner_group": {"world_size": self.world, "strategy": self.strategy},
                "entropy_control": self.entropy_control.state()}

    def load_trainer_state(self, state: dict[str, Any]) -> None:
        self._each("load_scheduler_state", state["scheduler"])
        self.entropy_control.load_state(state.get("entropy_control"))

    @contextlib.contextmanager
    def evaluation_policy(self) -> Iterator[torch.nn.Module]:
        """The whole policy gathered from the ranks, built here, for the length of the block."""
        model = build_policy(self.first.spec, unpack_weights(self.packed_weights(trainable_only=False)), str(self.device))
        try:
            yield model
        finally:
            del model

    # ------------------------------------------------------------------ weights for the rollout workers

    def with_weights(self, consume: Callable[..., Any], *args, trainable_only: bool = True) -> Any:
        """Rank 0 (in its process) calls consume(stream, *args) on the stream of (name, whole tensor)
        of the weights, gathered one parameter at a time while the other ranks take part in each
        gather; returns what `consume` returns. The collective weight publisher's hook:
        `consume` is e.g. a function calling `WeightSyncGroup.send(stream)` on rank 0's group."""
        return self._each("with_weights", consume, *args, trainable_only=trainable_only)[0]

    def open_weight_source(self, timeout_s: float) -> str:
        """The address rank 0 meets the rollout workers' weight group at (the collective publishing path)."""
        return self._get([self.ranks[0].open_weight_host.remote(timeout_s)])[0]

    def form_weight_group(self, world: int, generation: int, backend: str) -> None:
        """Rank 0 forms generation `generation` as the source; returns once every receiver joined (they must be joining now)."""
        self._get([self.ranks[0].form_weight_group.remote(world, generation, backend)])

    def send_weights(self) -> int:
        """The trainable weights to the weight group, gathered one parameter at a time; the bytes each receiver got."""
        return self._each("send_weights")[0]

    def packed_weights(self, trainable_only: bool = True) -> dict:
        """pack_weights of the whole weights (under LoRA with `trainable_only`: the adapters), from rank 0."""
        return self._each("packed_weights", trainable_only)[0]

    def packed_weights_ref(self, trainable_only: bool = True) -> ray.ObjectRef:
        """The same left in Ray's object store (the object-store publishing path): rank 0's result,
        never copied into the driver."""
        status, packed = self.ranks[0].packed_weights_ref.options(num_returns=2).remote(trainable_only)
        self._get([status] + [rank.packed_weights.remote(trainable_only) for rank in self.ranks[1:]])  # rank 0's death or error too
        return packed

    def run(self, fn: Callable[..., Any], *args, **kwargs) -> list:
        """fn(rank, *args, **kwargs) on every rank (a `LearnerRank`), results in rank order."""
        return self._each("run", fn, *args, **kwargs)

    def memory(self) -> list[dict[str, int]]:
        """Per rank: bytes of its parameters (its shards under FSDP) and optimizer state, measured."""
        return self._each("memory")

    def close(self) -> None:
        """Leave the process group, stop the ranks, free their reservation; never raises."""
        if self.ranks:
            try:
                ray.wait([rank.close.remote() for rank in self.ranks], num_returns=len(self.ranks), timeout=10)
            except Exception:  # noqa: BLE001 - a dead rank: nothing left to close there
                pass
        self._abandon()


def teacher_weights_of(cfg: Config, tokenizer, student: torch.nn.Module) -> FirstWeights | None:
    """On-policy distillation's teacher for learner ranks (None when distill.on_policy_coef is 0): loaded and checked
    against the student in this process as LocalLearner loads it, put into the object store once (every rank builds
    its part from there, as it builds the policy); the module itself is dropped."""
    if cfg.distill.on_policy_coef <= 0:
        return None
    from rlvr.sources import load_teacher  # start-up time: only a distillation run reads a run point or directory for a teacher

    return FirstWeights.of(load_teacher(cfg, tokenizer, student, "distill.on_policy_coef"), cfg.model.trust_remote_code)


def teacher_weights(teacher: torch.nn.Module | FirstWeights | None, cfg: Config) -> FirstWeights | None:
    """The on-policy distillation teacher as the ranks start from it, the one distill.on_policy_coef asks for."""
    if (teacher is not None) != (cfg.distill.on_policy_coef > 0):
        raise ValueError("LearnerGroup: a teacher goes with distill.on_policy_coef > 0, and only with it "
                         f"(on_policy_coef = {cfg.distill.on_policy_coef:g}, teacher {'given' if teacher is not None else 'missing'})")
    if teacher is None or isinstance(teacher, FirstWeights):
        return teacher
    return FirstWeights.of(teacher, cfg.model.trust_remote_code)


def rollouts_to_cpu(rollouts: Rollouts) -> Rollouts:
    return rollouts_to(rollouts, torch.device("cpu"))
