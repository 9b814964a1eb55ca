"""The weight receiver inside a vLLM server that `rlvr serve` started: rollout.engine = "vllm_server".

vLLM mixes this class into each of the server's workers (`--worker-extension-cls`), so its methods
run where the model's parameters are and are called over HTTP through vLLM's development endpoint
`POST /collective_rpc` (VLLM_SERVER_DEV_MODE=1), every worker at once. That endpoint passes only
strings: each method takes one JSON-encoded request and returns a JSON-able dict.

The weights do not travel over HTTP: the trainer (rollout/vllm_server.py) and the workers form a
weight_sync group (gloo on CPU, NCCL between distinct GPUs), the trainer rank 0, worker r rank
1 + r. vLLM's parameters are fused (q, k and v in one tensor, gate and up in another), so a worker
does not receive into its parameters by name as a Ray rollout worker does: it takes each tensor
of the manifest under its checkpoint name into a fresh buffer (`receive_tensors`) and hands the
stream to vLLM's own loader (`reload_weights`), which places and shards it as it would read a
checkpoint. The trainer then resets the prefix cache, so no key or value computed under the old
weights is reused.

The manifest cannot be checked against vLLM's fused parameters name by name; what decides
whether the policy fits the served model is its shape, which the trainer sends along (`expect`:
the architecture and the config's sizes) and each worker compares with the config it serves.

Nothing here imports vLLM: the module is imported by vLLM, in the server's processes.
"""

from __future__ import annotations

import json
import time
from typing import Any

import torch

from rlvr.distributed.weight_sync import Entry, WeightSyncGroup, route_ip
from rlvr.rollout.vllm_server import shape_of


def shape_problems(expected: dict[str, Any], config: Any) -> list[str]:
    """Where the served model's config differs from the policy's (`expected`: the policy's shape_of)."""
    here = shape_of(config)
    return [f"{key}: {here.get(key)!r} served, {value!r} in the policy" for key, value in expected.items()
            if key in here and here[key] != value]


def _gpu_id(device: torch.device) -> str:
    """The physical GPU (its UUID) a device is, so that the trainer never forms an NCCL group with a
    worker on its own GPU (NCCL refuses two ranks on one device); '' off CUDA."""
    if device.type != "cuda":
        return ""
    return str(torch.cuda.get_device_properties(device).uuid)


class WeightReceiver:
    """Methods mixed into a vLLM worker (`self` is the worker: self.rank, self.device,
    self.model_config, self.reload_weights are vLLM's). Their names start with rlvr_ so that they
    never collide with a worker's own attributes (vLLM refuses an extension that would)."""

    def rlvr_receiver_info(self, request: str = "{}") -> dict:
        """What the trainer needs before it forms the group: this worker's rank, the dtype and device
        it holds the weights in, and the version it holds."""
        device = torch.device(self.device)
        return {"rank": int(self.rank), "dtype": str(self.model_config.dtype).removeprefix("torch."), "device": str(device),
                "gpu": _gpu_id(device), "version": getattr(self, "_rlvr_version", "files")}

    def rlvr_join_weights(self, request: str) -> dict:
        """Join the trainer's weight group (request: address, world, generation, timeout_s, expect),
        leaving any group joined before (a trainer that restarted forms a new one)."""
        r = json.loads(request)
        old, self._rlvr_group = getattr(self, "_rlvr_group", None), None
        if old is not None:
            old.close()
        config = self.model_config.hf_config

        def problems(manifest: list[Entry]) -> list[str]:
            dtype = str(self.model_config.dtype).removeprefix("torch.")
            cast = [f"{e.name}: {e.dtype} sent, {dtype} served" for e in manifest if e.dtype != dtype]
            return shape_problems(r.get("expect", {}), config) + cast

        ip = r["address"].rpartition(":")[0]
        group = WeightSyncGroup.receiver(r["address"], 1 + int(self.rank), int(r["world"]), None, generation=int(r["generation"]),
                                         timeout_s=float(r["timeout_s"]), bind_ip=route_ip(ip), problems=problems,
                                         device=torch.device(self.device))
        self._rlvr_group, self._rlvr_group_id = group, f"{r['address']}/{r['generation']}"
        return {"rank": group.rank, "backend": group.backend, "bytes": group.nbytes}

    def rlvr_receive_weights(self, request: str) -> dict:
        """Take one version of the weights from the group into the model (request: version). The
        version reads as None while a load is under way or after one broke off."""
        r = json.loads(request)
        group = getattr(self, "_rlvr_group", None)
        if group is None or group.pg is None:
            raise RuntimeError("this vLLM worker is in no weight group (or its last sync broke off): the trainer forms one first")
        self._rlvr_version = None
        t0 = time.perf_counter()
        try:
            self.reload_weights(weights_iterator=group.receive_tensors())
        except BaseException:
            group.close()  # the trainer's broadcast fails now instead of at the group's timeout
            self._rlvr_group = None
            raise
        self._rlvr_version = r["version"]
        return {"version": r["version"], "bytes": group.nbytes, "seconds": time.perf_counter() - t0}

    def rlvr_weight_version(self, request: str = "{}") -> dict:
        """The version this worker holds: the trainer's name for it, 'files' (what the server was
        started from) or None (a load under way, or broken off); and the group it is in ("address/
        generation", None: none), so that a trainer finds out that a restarted server left its group."""
        group = getattr(self, "_rlvr_group", None)
        joined = getattr(self, "_rlvr_group_id", None) if group is not None and group.pg is not None else None
        return {"rank": int(self.rank), "version": getattr(self, "_rlvr_version", "files"), "group": joined}
