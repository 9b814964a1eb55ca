"""rollout.engine = "vllm_server": sampling through a vLLM server that `rlvr serve` started.

The server is another process, often on another machine: vLLM's own OpenAI-compatible server
with rlvr's weight receiver mixed into its workers (rollout/vllm_weights.py). A `ServerSampler`
has `VLLMSampler`'s verbs and builds the same requests, parameters and rows from the same pieces
(vllm_sampler.py), so both vLLM engines give identical rows, masks and per-token sampling
log-probs; only the transport differs:

- samples: one POST /v1/completions per prompt (its token ids, n = G, its seed), all sent at
  once from a thread pool so the server batches them; token ids and their log-probs come back
  (return_token_ids, logprobs=0);
- weights: a weight_sync group between this process (rank 0) and the server's workers, formed
  once per policy shape. When the weights are stale (a new sampler, or `weights_changed` after an
  update) they are pushed before the next sampling: an HTTP call makes the workers receive while
  this process broadcasts, then POST /reset_prefix_cache drops the keys and values computed
  under the old weights. The server never samples from weights older than the policy's.

One link per server and process (`ServerLink`), shared by every sampler on that URL (RL's,
evaluation's), as the in-process engine is: the server holds one set of weights, and a sampler
for the policy they already are pushes nothing.

A server that dies is reported at once (a refused or reset connection ends the waiting call);
one that stops answering, after rollout.server_timeout_s. Either way `ServerError` (the run
stops, its last checkpoint kept) names the URL and says how to go on.
"""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.architecture import base_model
from rlvr.config import ConfigError
from rlvr.errors import RunStopped, UsageError
from rlvr.rollout.sampler import Completions
from rlvr.rollout.generate import Rollouts
from rlvr.rollout.vllm_sampler import (Request, Sample, checkpoint_weights, completions_from, refuse_unsupported, requests_for,
                                       requests_for_ids, rollouts_from, rollouts_on, sampling_params)
from rlvr.sampling import Sampling

GO_ON = ("restart it (the same `rlvr serve MODEL_OR_RUN` command), then resume the run from its last checkpoint: "
         "`rlvr train --resume RUN_DIR` (`rlvr lab --resume RUN_DIR` for a lab run)")


class ServerError(RunStopped):
    """The vLLM server did not answer, or answered with an error; the message names its address."""


# Straight to the server: a proxy from the environment (http_proxy) has no business between a
# trainer and its own sampling server.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(url: str, path: str, body: Any = None, timeout_s: float = 600.0, doing: str = "a request", go_on: str = GO_ON) -> Any:
    """POST `body` as JSON to the server (GET when None); its JSON answer (None when empty), or
    ServerError saying what happened to `doing` and, when the server is gone, `go_on`."""
    address = url.rstrip("/") + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(address, data=data, headers={"Content-Type": "application/json"},
                                     method="GET" if body is None else "POST")
    try:
        with _OPENER.open(request, timeout=timeout_s) as reply:
            raw = reply.read()
    except urllib.error.HTTPError as err:
        detail = err.read().decode(errors="replace").strip()[:1500]
        raise ServerError(f"the vLLM server at {url} refused {doing} ({path}): HTTP {err.code} {detail}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, TimeoutError):
            what = f"did not answer {doing} within {timeout_s:g} s (rollout.server_timeout_s)"
        elif isinstance(reason, ConnectionRefusedError):
            what = f"refused the connection for {doing} (nothing listens there: the server is not running)"
        else:
            what = f"broke off {doing} ({type(reason).__name__}: {reason}; the server died or its connection was lost)"
        raise ServerError(f"the vLLM server at {url} {what}; {go_on}") from None
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        raise ServerError(f"the vLLM server at {url} answered {path} with something other than JSON: {raw[:200]!r}") from None


def server_info(url: str, timeout_s: float = 10.0) -> dict:
    """The models the server at `url` serves (its /v1/models), or ServerError saying why not."""
    return call(url, "/v1/models", timeout_s=timeout_s, doing="the list of its models", go_on="start one with `rlvr serve MODEL_OR_RUN`")


def rpc(url: str, method: str, request: dict | None = None, timeout_s: float = 600.0) -> list[dict]:
    """Call a WeightReceiver method (rollout/vllm_weights.py) on every worker of the server; their answers."""
    body = {"method": method, "args": [json.dumps(request or {})], "timeout": timeout_s}
    answer = call(url, "/collective_rpc", body, timeout_s + 5.0, doing=f"rlvr's {method}")
    return list((answer or {}).get("results", []))


def weight_versions(url: str, timeout_s: float = 10.0) -> list[Any]:
    """The weight version each worker of the server holds: a trainer's name for it, 'files' (as
    the server started) or None (a load under way or broken off)."""
    return [r["version"] for r in rpc(url, "rlvr_weight_version", timeout_s=timeout_s)]


# What must match between the policy's config and the served model's for the weights to fit.
SHAPE_KEYS = ("architectures", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "intermediate_size", "head_dim", "tie_word_embeddings")


def shape_of(config: Any) -> dict[str, Any]:
    """The config's values of SHAPE_KEYS (those it has), as JSON values."""
    values = {key: getattr(config, key) for key in SHAPE_KEYS if getattr(config, key, None) is not None}
    if "architectures" in values:
        values["architectures"] = list(values["architectures"])
    return values


def policy_shape(model: torch.nn.Module) -> dict[str, Any]:
    base = base_model(model)
    return {**shape_of(base.config), "architectures": [type(base).__name__]}  # a model built from a config names none


def _together(remote: Callable[[], Any], local: Callable[[], Any]) -> tuple[Any, Any]:
    """Run an HTTP call that makes the server's workers take part in a collective and this
    process's side of it at once; both results. The first failure is raised without waiting for
    the other side, which may be blocked on a peer that will never come (its thread is a daemon
    and ends at its own timeout); a refusal (UsageError: the policy does not fit) wins over the
    other side's report of the same thing."""
    outcomes: queue.Queue = queue.Queue()

    def run(key: str, fn: Callable[[], Any]) -> None:
        try:
            outcomes.put((key, True, fn()))
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            outcomes.put((key, False, err))

    for key, fn in (("remote", remote), ("local", local)):
        threading.Thread(target=run, args=(key, fn), daemon=True, name=f"rlvr-weights-{key}").start()
    got: dict[str, tuple[bool, Any]] = {}
    while len(got) < 2:
        key, ok, value = outcomes.get()
        got[key] = (ok, value)
        if not ok:
            try:  # the other side usually fails at once too; a refusal there says more
                other, ok2, value2 = outcomes.get(timeout=2.0)
                got[other] = (ok2, value2)
            except queue.Empty:
                pass
            errors = [v for ok_, v in got.values() if not ok_]
            raise next((e for e in errors if isinstance(e, UsageError)), errors[0])
    return got["remote"][1], got["local"][1]


class ServerLink:
    """This process's link to one server: its model's name, its workers, the weight group and
    the policy whose weights it holds."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url, self.timeout_s = url.rstrip("/"), timeout_s
        self.model_name, self.workers = self._describe()
        self.host: Any = None
        self.group: Any = None
        self.manifest: list = []
        self.generation = -1
        self.session = uuid.uuid4().hex[:8]  # names this process's weight versions
        self.holder: weakref.ref | None = None  # the policy whose weights the server holds
        self.stale = True
        self.pushes, self.push_s, self.version = 0, 0.0, ""

    def _describe(self) -> tuple[str, list[dict]]:
        """The name of the model the server serves, and its workers (rlvr_receiver_info)."""
        models = server_info(self.url, self.timeout_s).get("data") or []
        if not models:
            raise ServerError(f"the vLLM server at {self.url} serves no model (/v1/models is empty)")
        try:
            workers = rpc(self.url, "rlvr_receiver_info", timeout_s=self.timeout_s)
        except ServerError as err:
            raise ServerError(f"the server at {self.url} has no rlvr weight receiver, so it cannot be sent the policy's weights: "
                              "start it with `rlvr serve MODEL_OR_RUN` (vLLM's server with VLLM_SERVER_DEV_MODE=1 and rlvr's "
                              f"--worker-extension-cls) ({err})") from None
        return models[0]["id"], workers

    def _named(self, model: torch.nn.Module):
        """The weights as the server's loader reads them. A tied output layer is sent too, though it is
        the embedding: vLLM's reload counts a layer sent nothing as failed and writes back what that
        layer held before the reload, which for a tied head is the old embedding (measured: the
        server then samples from the old embedding under the new layers)."""
        return checkpoint_weights(model)

    def join(self, model: torch.nn.Module) -> None:
        """Form the weight group for `model`'s manifest, unless the group formed for it stands."""
        # Imported here, not at the top: rlvr.distributed's package imports the learner, which imports
        # rlvr.rollout, so importing rollout/ must not start it halfway (and a process that never
        # samples from a server does not load it).
        from rlvr.distributed.weight_sync import WeightSyncHost, manifest_of, route_ip

        def manifest_now() -> list:  # names and shapes only: a LoRA policy's merged weights are its base weights' shapes
            return manifest_of(checkpoint_weights(model, merge=False), self.workers[0]["dtype"])

        manifest = manifest_now()
        if self.group is not None and self.group.pg is not None and manifest == self.manifest:
            joined = f"{self.host.address}/{self.generation}"
            if all(w.get("group") == joined for w in rpc(self.url, "rlvr_weight_version", timeout_s=self.timeout_s)):
                return
            # the server was restarted at this address (or another trainer took it over): form a new group
            self.model_name, self.workers = self._describe()
            manifest = manifest_now()
        self.close_group()
        device = next(model.parameters()).device
        gpus = [w["gpu"] for w in self.workers]
        here = str(torch.cuda.get_device_properties(device).uuid) if device.type == "cuda" else ""
        nccl = bool(here) and all(gpus) and here not in gpus and len(set(gpus)) == len(gpus)  # NCCL: one rank per GPU
        backend, group_device = ("nccl", device) if nccl else ("gloo", torch.device("cpu"))
        if self.host is None:
            self.host = WeightSyncHost(route_ip(urllib.parse.urlsplit(self.url).hostname or "127.0.0.1"), self.timeout_s)
        self.generation += 1
        world = 1 + len(self.workers)
        request = {"address": self.host.address, "world": world, "generation": self.generation, "timeout_s": self.timeout_s,
                   "expect": policy_shape(model)}
        try:
            _, self.group = _together(lambda: rpc(self.url, "rlvr_join_weights", request, self.timeout_s),
                                      lambda: self.host.source(world, manifest, self.generation, backend, group_device))
        except UsageError as err:
            raise ConfigError(f"rollout.server_url = {self.url!r}: the model that server serves cannot take the policy's weights "
                              f"({err}); start `rlvr serve` on the run's model (e.g. `rlvr serve RUN_DIR@start`)") from None
        except ServerError:
            raise
        except RuntimeError as err:  # WeightSyncError: the group did not form
            raise ServerError(f"the weight group with the vLLM server at {self.url} did not form ({err}); {GO_ON}") from None
        self.manifest, self.holder = manifest, None

    def needs(self, model: torch.nn.Module) -> bool:
        return self.stale or self.holder is None or self.holder() is not model

    def changed(self, model: torch.nn.Module) -> None:
        if self.holder is not None and self.holder() is model:
            self.stale = True

    def push(self, model: torch.nn.Module) -> float:
        """Send the policy's current weights to every worker, then drop the server's prefix cache; seconds."""
        t0 = time.perf_counter()
        self.join(model)  # the same group, unless this policy has another shape
        version = f"{self.session}-{self.pushes + 1}"
        group = self.group
        try:
            _together(lambda: rpc(self.url, "rlvr_receive_weights", {"version": version}, self.timeout_s),
                      lambda: group.send(self._named(model)))
        except RuntimeError as err:  # a broken-off broadcast (WeightSyncError) or the server's own error (ServerError)
            self.close_group()
            if isinstance(err, ServerError):
                raise
            raise ServerError(f"the weight push to the vLLM server at {self.url} broke off ({err}); {GO_ON}") from None
        self.holder = None
        for _ in range(10):  # refused only while requests hold blocks: none run while this process pushes
            if (call(self.url, "/reset_prefix_cache", {}, self.timeout_s, "the prefix cache reset") or {}).get("success", True):
                break
            time.sleep(0.2)
        else:
            raise ServerError(f"the vLLM server at {self.url} kept refusing to reset its prefix cache after a weight push: "
                              "is another client sampling from it? A server serves one run")
        self.stale, self.holder, self.version = False, weakref.ref(model), version
        elapsed = time.perf_counter() - t0
        self.pushes, self.push_s = self.pushes + 1, self.push_s + elapsed
        return elapsed

    def close_group(self) -> None:
        group, self.group, self.holder = self.group, None, None
        if group is not None:
            group.close()

    def generate(self, requests: list[Request], sampling: Sampling, eos_id: int) -> list[list[Sample]]:
        """Every request at once (the server batches what arrives together); each one's samples."""
        def one(r: Request) -> list[Sample]:
            body = {"model": self.model_name, "prompt": r.prompt_ids, "return_token_ids": True,
                    **sampling_params(sampling, eos_id, r.seed, r.n, r.max_tokens)}
            answer = call(self.url, "/v1/completions", body, self.timeout_s, doing="a sampling request")
            return [_sample(choice, self.url) for choice in sorted(answer["choices"], key=lambda c: c["index"])]

        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=min(64, len(requests)), thread_name_prefix="rlvr-sample") as pool:
            return list(pool.map(one, requests))


def _sample(choice: dict, url: str) -> Sample:
    ids = list(choice.get("token_ids") or [])
    logprobs = list((choice.get("logprobs") or {}).get("token_logprobs") or [])
    if len(logprobs) != len(ids) or any(lp is None for lp in logprobs):
        raise ServerError(f"the vLLM server at {url} returned {len(ids)} tokens and {len(logprobs)} log-probs for a completion "
                          "(token_ids and logprobs=0 ask for one each)")
    return Sample(ids, [float(lp) for lp in logprobs], choice.get("finish_reason") == "length")


_LINKS: dict[str, ServerLink] = {}


def server_link(url: str, timeout_s: float) -> ServerLink:
    """This process's link to the server at `url`, made on first use."""
    key = url.rstrip("/")
    link = _LINKS.get(key)
    if link is None:
        link = _LINKS[key] = ServerLink(key, timeout_s)
    return link


class ServerSampler:
    """`Sampler`'s verbs on a vLLM server (rollout.engine = "vllm_server", at rollout.server_url)."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sampling: Sampling, server_url: str,
                 timeout_s: float = 600.0) -> None:
        refuse_unsupported(sampling)
        if not server_url:
            raise ConfigError("rollout.server_url is empty: rollout.engine = 'vllm_server' samples through a server started by "
                              "`rlvr serve` (docs/vllm.md)")
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self.server_url, self.timeout_s = server_url, timeout_s
        self.link, _ = self._linked(lambda link: link.join(model))
        self.link.changed(model)  # whatever changed the policy before this sampler existed, it samples the policy as it is now

    def _linked(self, action: Callable[[ServerLink], Any]) -> tuple[ServerLink, Any]:
        """The link and what `action` did on it; a link that failed is dropped, so a server restarted
        at the same address is linked afresh."""
        link = server_link(self.server_url, self.timeout_s)
        try:
            return link, action(link)
        except ServerError:
            _LINKS.pop(link.url, None)
            link.close_group()
            raise

    def weights_changed(self) -> None:
        """The policy's weights changed (an update, a checkpoint loaded): push before sampling again."""
        self.link.changed(self.model)

    def rest(self) -> None:
        """Nothing to free before an update: the server's memory is its own."""

    def server_versions(self) -> list[Any]:
        """The weight version each of the server's workers holds (the link's `version` after a push)."""
        return weight_versions(self.link.url, self.timeout_s)

    def sample(self, prompts: list[str], group_size: int = 1, generator: torch.Generator | None = None,
               generators: list[torch.Generator] | None = None, examples: list | None = None) -> Completions:
        requests = requests_for(self.tokenizer, prompts, group_size, self.sampling, generator, generators)

        def run(link: ServerLink) -> list[list[Sample]]:
            if link.needs(self.model):
                link.push(self.model)
            return link.generate(requests, self.sampling, self.tokenizer.eos_token_id)

        self.link, samples = self._linked(run)
        return completions_from(self.tokenizer, prompts, requests, samples, self.sampling, next(self.model.parameters()).device)

    def sample_ids(self, prompt_ids: list[list[int]], group_size: int = 1, generator: torch.Generator | None = None,
                   generators: list[torch.Generator] | None = None, limits: list[int] | None = None) -> Rollouts:
        """`Sampler.sample_ids`: token-id prompts (a conversation's later turns), each its own most new tokens."""
        requests = requests_for_ids(prompt_ids, group_size, self.sampling, generator, generators, limits)

        def run(link: ServerLink) -> list[list[Sample]]:
            if link.needs(self.model):
                link.push(self.model)
            return link.generate(requests, self.sampling, self.tokenizer.eos_token_id)

        self.link, samples = self._linked(run)
        return rollouts_on(rollouts_from(requests, samples, self.tokenizer.pad_token_id, self.sampling.max_new_tokens),
                           next(self.model.parameters()).device)
