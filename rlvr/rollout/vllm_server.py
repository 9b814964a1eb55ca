"""rollout.engine = "vllm_server": sampling through a vLLM server that `rlvr serve` started.

(The server sampler is being written beside this; what is here is what the rest of rlvr imports:
the error a server that cannot be reached raises, and the probe that raises it.)
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from rlvr.errors import RunStopped


class ServerError(RunStopped):
    """The vLLM server did not answer, or answered with an error; the message names its address."""


def server_info(url: str, timeout_s: float = 10.0) -> dict:
    """The models the server at `url` serves (its /v1/models), or ServerError saying why not."""
    address = url.rstrip("/") + "/v1/models"
    try:
        with urllib.request.urlopen(address, timeout=timeout_s) as reply:
            return json.loads(reply.read().decode())
    except urllib.error.HTTPError as err:
        raise ServerError(f"the vLLM server at {url} answered {address} with HTTP {err.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise ServerError(f"nothing answers at {url} ({reason}); start one with `rlvr serve MODEL_OR_RUN`") from None
