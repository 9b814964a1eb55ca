"""An LLM judge over any OpenAI-compatible endpoint as a reward term: ``reward.functions = ["judge"]``.

Its settings are the ``[reward.judge]`` table (:class:`rlvr.config.JudgeConfig`). Each row's rubric
is rendered from its prompt, completion, gold answer and data fields, sent as one user message to
``<url>/chat/completions``, and the reply's text is read by a parser into a score (``scale`` maps it
onto [0, 1]). The term is TRL-batched: one call per batch, the batch's distinct requests in flight up
to ``concurrency`` at once (threads; the standard library's urllib, so no HTTP client is a dependency).

A failure is a missing reward, never a 0: a row whose request timed out on every try is returned
as a ``TimeoutError`` (counted in ``reward/judge/timeouts``), one whose server refused it, broke
off, answered something other than a chat completion, or whose reply the parser cannot read as
another exception (``reward/judge/errors``); the reward contract turns either into that row's
counted error (:mod:`rlvr.verifiers.contract`). Connection failures, timeouts, HTTP 5xx and 429 are
tried again (``retries``, exponential backoff); another 4xx is not. Beside them the term counts, per
step, ``cache_hits``, ``calls``, ``retries`` and ``malformed`` (:meth:`Judge.take_counts`, logged as
``reward/judge/<counter>``).

The cache (``cache = "path.jsonl"``) keeps every reply the server gave, keyed by a hash of the
model, the rendered messages and the sampling settings: read once at start, appended to one line
per reply, so a resumed or repeated run asks nothing twice and a line torn by a crash costs one
entry. The reply text is cached, not the score, so a new parser or scale re-reads old replies.

The judge says ``learned = True``: the hack monitor watches it against the verifier
(``hack/judge/wrong_over_right``, docs/monitoring.md).
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import importlib
import json
import math
import numbers
import os
import re
import threading
import time
import urllib.error
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr.errors import UsageError

NAME = "judge"  # the reward.functions entry and the term's metric name (reward/judge)
ROW_FIELDS = ("prompt", "completion", "answer")  # placeholders every row fills; any other names a data field
COUNTERS = ("cache_hits", "calls", "retries", "malformed")


def is_judge(spec: str) -> bool:
    """Whether a reward.functions entry names the judge (read before a registered name or ``module:function``)."""
    return spec.strip() == NAME


class SettingsError(UsageError):
    """A [reward.judge] setting that cannot work; the message names the field (the contract raises it as a ConfigError)."""


class JudgeError(RuntimeError):
    """A row the judge could not score: the server refused or broke off, or the settings cannot fill its rubric."""


class MalformedReply(JudgeError):
    """The server answered, but not with a score: not a chat completion, or text the parser cannot read."""


class JudgeTimeout(TimeoutError):
    """No reply within reward.judge.timeout_s, on every try."""


# ----------------------------------------------------------------------------- parsers: reply text -> number | None

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)"
_SCORE = re.compile(rf"(?<![\w.])({_NUMBER})(?:\s*(?:/|out of)\s*{_NUMBER})?", re.IGNORECASE)  # "7", "7/10", "7 out of 10"
_TAG = re.compile(r"<score>(.*?)</score>", re.IGNORECASE | re.DOTALL)


def number(text: str) -> float | None:
    """The last number of the reply; "7/10" or "7 out of 10" is the score 7 (out of the scale's top).

    >>> [number(t) for t in ["Score: 7/10", "7.5", "I'd give it 3 out of 5.", "-2", "no number"]]
    [7.0, 7.5, 3.0, -2.0, None]
    """
    found = _SCORE.findall(text)
    return float(found[-1]) if found else None


def yes_no(text: str) -> float | None:
    """1.0 for yes, 0.0 for no: the first word when it is one, else the last yes or no (a judge that reasons
    first ends with its verdict); None when the reply says neither.

    >>> [yes_no(t) for t in ["yes", "No.", "**Yes**, it is right; no errors.", "It is wrong, so: no", "nothing"]]
    [1.0, 0.0, 1.0, 0.0, None]
    """
    words = re.findall(r"[a-z]+", text.lower())
    verdicts = [w for w in words if w in ("yes", "no")]
    if not verdicts:
        return None
    verdict = words[0] if words[0] in ("yes", "no") else verdicts[-1]
    return 1.0 if verdict == "yes" else 0.0


def score_tag(text: str) -> float | None:
    """The number in the last ``<score>x</score>``; None without one, or when it holds anything but a number.

    >>> [score_tag(t) for t in ["Fine. <score>0.8</score>", "<score>2</score> then <score> 9 </score>", "<score>high</score>", "8"]]
    [0.8, 9.0, None, None]
    """
    tags = _TAG.findall(text)
    if not tags or not re.fullmatch(_NUMBER, tags[-1].strip()):
        return None
    return float(tags[-1])


PARSERS: dict[str, Callable[[str], float | None]] = {"number": number, "yes_no": yes_no, "score_tag": score_tag}


def parser_of(name: str) -> Callable[[str], Any]:
    """A built-in parser, or the function a ``module:function`` names; SettingsError naming reward.judge.parser."""
    if name in PARSERS:
        return PARSERS[name]
    module, _, attr = (part.strip() for part in name.partition(":"))
    try:
        fn = functools.reduce(getattr, attr.split("."), importlib.import_module(module))
    except (ImportError, AttributeError, ValueError) as err:
        raise SettingsError(f"reward.judge.parser: cannot import {name!r}: {err}") from None
    if not callable(fn):
        raise SettingsError(f"reward.judge.parser: {name!r} is not callable")
    return fn


# ----------------------------------------------------------------------------- the rubric

_BRACES = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")  # str.format's syntax, named fields only


def read_rubric(value: str) -> str:
    """The rubric's template: the value itself when it has a '{' or a line break, else the file it names."""
    if "{" in value or "\n" in value:
        return value
    try:
        return Path(value).expanduser().read_text(encoding="utf-8")
    except OSError as err:
        raise SettingsError(f"reward.judge.rubric: {value!r} is neither a template (no {{placeholder}} in it) nor a file that can be "
                          f"read ({err.strerror or err})") from None


def placeholders(template: str) -> list[str]:
    """The fields a template names, in order: ``{name}``; ``{{`` and ``}}`` are literal braces. Anything else
    in braces (``{}``, ``{0}``, ``{a.b}``, a lone brace) is a SettingsError naming reward.judge.rubric.

    >>> placeholders(r"Q: {prompt} A: {completion} Put it in \\boxed{{}}.")
    ['prompt', 'completion']
    """
    names = []
    for m in _BRACES.finditer(template):
        if m.group(0) in ("{{", "}}"):
            continue
        if m.group(1) is None or not m.group(1).isidentifier():
            raise SettingsError(f"reward.judge.rubric: {m.group(0)!r} at character {m.start()} is no placeholder: write {{field}} for "
                              "a row's field, and {{ or }} for a literal brace")
        names.append(m.group(1))
    return names


def render(template: str, values: dict[str, str]) -> str:
    """The template with each ``{name}`` replaced by its value (every name checked by `placeholders` first).

    >>> render("{{{x}}} is {x}", {"x": "7"})
    '{7} is 7'
    """
    return _BRACES.sub(lambda m: m.group(0)[0] if m.group(0) in ("{{", "}}") else values[m.group(1)], template)


def as_text(value: Any, roles: tuple[str, ...] | None = None) -> str:
    """A prompt or completion as the judge reads it: chat messages as their contents (of `roles` only, when
    given) separated by blank lines; anything else as text, numbers and JSON data as JSON."""
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        return "\n\n".join(str(m.get("content") or "") for m in value if roles is None or m.get("role") in roles)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# ----------------------------------------------------------------------------- the cache


class ReplyCache:
    """The judge's replies by request key: in memory, and with a path in an append-only JSONL file (one
    ``{"key", "reply"}`` line per reply, each written by one append). Lines that do not read (a line torn
    by a crash mid-write) are skipped when the file is read. Without a path it keeps nothing."""

    def __init__(self, path: str = "") -> None:
        self.path = Path(path).expanduser() if path else None
        self.replies: dict[str, str] = {}
        self.lock = threading.Lock()
        self.torn = False  # the file does not end with a newline: the next line starts on a new one
        self.write_failed = False  # an append failed (warned once): replies are kept in memory only
        if self.path is not None and self.path.exists():
            raw = self.path.read_bytes()
            for line in raw.splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("key"), str) and isinstance(row.get("reply"), str):
                    self.replies[row["key"]] = row["reply"]
            self.torn = bool(raw) and not raw.endswith(b"\n")

    def get(self, key: str) -> str | None:
        with self.lock:
            return self.replies.get(key)

    def put(self, key: str, reply: str) -> None:
        if self.path is None:
            return
        line = json.dumps({"key": key, "reply": reply}, ensure_ascii=False) + "\n"
        with self.lock:
            self.replies[key] = reply
            if self.torn:
                line, self.torn = "\n" + line, False
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line.encode("utf-8"))  # one append: processes sharing the file (Ray's reward workers) do not interleave lines
                finally:
                    os.close(fd)
            except OSError as err:  # a reply in hand is never lost to the disk: kept in memory, the run goes on
                if not self.write_failed:
                    warnings.warn(f"reward.judge.cache: cannot append to {self.path} ({err}); replies are kept in memory only")
                self.write_failed = True


def request_key(body: dict[str, Any]) -> str:
    """The cache key of a request: a hash of the model, the messages and the sampling settings (not the URL)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------- the judge


class Judge:
    """A TRL-batched reward function: ``judge(prompts, completions, **columns)`` -> one value per row: a
    score, or the exception that left the row unscored (the contract counts it: a TimeoutError as a timeout)."""

    learned = True  # a judged reward: the hack monitor compares it with the verifier (hack/<term>/wrong_over_right)

    def __init__(self, settings: Any, *, where: str = "reward.functions", backoff_s: float = 0.5) -> None:
        """`settings`: the [reward.judge] section (rlvr.config.JudgeConfig, taken as it is: this floor sits below the config).
        SettingsError naming the field that is missing or cannot work (`where`: the entry that asked for the judge)."""
        self.settings, self.backoff_s = settings, backoff_s
        for key in ("url", "model", "rubric"):
            if not getattr(settings, key).strip():
                raise SettingsError(f"reward.judge.{key}: is needed by {where} = 'judge' (set [reward.judge] {key}; "
                                    "audit-reward: --config FILE)")
        if not settings.url.startswith(("http://", "https://")):
            raise SettingsError(f"reward.judge.url: {settings.url!r} is not an http:// or https:// URL")
        self.template = read_rubric(settings.rubric)
        self.fields = placeholders(self.template)
        if "completion" not in self.fields:
            raise SettingsError("reward.judge.rubric: never shows the judge the completion: put {completion} in it")
        self.parse = parser_of(settings.parser)
        self.endpoint = settings.url.rstrip("/") + "/chat/completions"
        self.cache = ReplyCache(settings.cache)
        self.opener = urllib.request.build_opener()  # the environment's proxies (and no_proxy) apply, as for any HTTP client
        self.lock = threading.Lock()
        self.counts = dict.fromkeys(COUNTERS, 0)

    # ---------------------------------------------------------------- the reward contract
    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | Exception]:
        unknown = [f for f in self.fields if f not in ROW_FIELDS and f not in columns]
        if unknown:  # the whole batch fails, counted: the run stops at its first step (reward.max_missing_frac)
            known = sorted({*ROW_FIELDS, *columns} - {"completion_ids", "prompts", "completions"})
            raise JudgeError(f"reward.judge.rubric: {{{unknown[0]}}} is no field of the data rows (fields: {', '.join(known)})")
        bodies: list[dict[str, Any] | Exception] = [self._request(prompts, completions, columns, i) for i in range(len(completions))]
        keys = {request_key(b): b for b in bodies if isinstance(b, dict)}  # a batch's identical rows are asked once
        replies: dict[str, str | Exception] = {}
        for key in keys:
            cached = self.cache.get(key)
            if cached is not None:
                replies[key] = cached
        asked = [key for key in keys if key not in replies]
        if asked:
            # A server that takes connections but never answers would cost (retries + 1) x timeout_s per row, wave after
            # wave: once a whole wave's worth of rows (concurrency) has timed out on every try, the rest are not asked.
            timed_out, limit = [0], self.settings.concurrency

            def ask(key: str) -> str | Exception:
                if timed_out[0] >= limit:
                    return JudgeTimeout(f"not asked: {timed_out[0]} rows of this batch got no reply from {self.endpoint} in time")
                reply = self._ask_safely(keys[key])
                if isinstance(reply, JudgeTimeout):
                    with self.lock:
                        timed_out[0] += 1
                return reply

            with ThreadPoolExecutor(min(self.settings.concurrency, len(asked)), thread_name_prefix="judge") as pool:
                for key, reply in zip(asked, pool.map(ask, asked)):
                    replies[key] = reply
                    if isinstance(reply, str):
                        self.cache.put(key, reply)
        values = [body if isinstance(body, Exception) else self._score(replies[request_key(body)]) for body in bodies]
        self._count("calls", len(asked))
        self._count("cache_hits", sum(isinstance(b, dict) for b in bodies) - len(asked))
        self._count("malformed", sum(isinstance(v, MalformedReply) for v in values))
        return values

    def take_counts(self) -> dict[str, int]:
        """What the judge did since the last take (the reward term reads this after each batch): rows answered
        from the cache or by an identical row (cache_hits), requests (calls) and tries again (retries) sent,
        rows whose reply gave no score (malformed)."""
        with self.lock:
            counts, self.counts = self.counts, dict.fromkeys(COUNTERS, 0)
        return counts

    def preflight(self) -> None:
        """Before any model loads: the key's variable is set, and a server answers at the URL (any HTTP status:
        not every compatible server has GET /models)."""
        name = self.settings.api_key_env
        if name and not os.environ.get(name):
            raise ValueError(f"reward.judge.api_key_env: ${name} is not set in this process's environment")
        try:
            self.opener.open(urllib.request.Request(self.settings.url.rstrip("/") + "/models", headers=self._headers()),
                             timeout=min(self.settings.timeout_s, 10.0)).close()
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            raise ConnectionError(f"nothing answers at reward.judge.url = {self.settings.url}: {getattr(err, 'reason', err)}") from None

    # ---------------------------------------------------------------- one row
    def _request(self, prompts: Sequence[Any], completions: Sequence[Any], columns: dict[str, Any], i: int) -> dict[str, Any] | Exception:
        """Row i's request body, or the JudgeError of a row that lacks a field its rubric shows."""
        row = {"prompt": prompts[i], "completion": completions[i],
               **{k: v[i] for k, v in columns.items() if isinstance(v, list) and len(v) > i}}
        values = {}
        for name in self.fields:
            if row.get(name) is None:
                return JudgeError(f"reward.judge.rubric: this row has no {{{name}}}")
            values[name] = as_text(row[name], ("assistant",) if name == "completion" else None)
        s = self.settings
        return {"model": s.model, "messages": [{"role": "user", "content": render(self.template, values)}],
                "max_tokens": s.max_tokens, "temperature": s.temperature}

    def _ask(self, body: dict[str, Any]) -> str | Exception:
        """The reply's text, after up to `retries` more tries; or the exception that left it unanswered."""
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        failure: Exception = JudgeError("not asked")
        retry_after: float | None = None  # what a 429 or 503 asked for
        for attempt in range(self.settings.retries + 1):
            if attempt:
                self._count("retries")
                time.sleep(retry_after if retry_after is not None else self.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(self.endpoint, data=data, headers=self._headers(), method="POST")
            try:
                with self.opener.open(request, timeout=self.settings.timeout_s) as reply:
                    raw = reply.read()
            except urllib.error.HTTPError as err:
                detail = err.read().decode("utf-8", errors="replace").strip()[:300]
                failure = JudgeError(f"HTTP {err.code} from {self.endpoint}: {detail}")
                if err.code != 429 and err.code < 500:
                    return failure  # a request the server will never take (a wrong model name, too long a prompt)
                after = (err.headers.get("Retry-After") or "").strip() if err.headers else ""
                retry_after = min(float(after), 60.0) if after.isdigit() else None
                continue
            except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
                reason, retry_after = getattr(err, "reason", err), None
                if isinstance(reason, TimeoutError):
                    failure = JudgeTimeout(f"no reply from {self.endpoint} within {self.settings.timeout_s:g} s (reward.judge.timeout_s)")
                else:
                    failure = JudgeError(f"{self.endpoint}: {type(reason).__name__}: {reason}")
                continue
            return reply_text(raw)
        if self.settings.retries:
            failure.args = (f"{failure.args[0]}; {self.settings.retries} tries again failed too",)
        return failure

    def _ask_safely(self, body: dict[str, Any]) -> str | Exception:
        try:
            return self._ask(body)
        except Exception as err:  # noqa: BLE001 - whatever else goes wrong is this row's error, not the batch's
            return JudgeError(f"{type(err).__name__}: {err}")

    def _score(self, reply: str | Exception) -> float | Exception:
        """The parser's number, mapped by `scale`; a MalformedReply when there is none."""
        if isinstance(reply, Exception):
            return reply
        name, shown = self.settings.parser, reply[:200]
        try:
            value = self.parse(reply)
        except Exception as err:  # noqa: BLE001 - a user's parser may fail in any way: that row is malformed
            return MalformedReply(f"the parser {name!r} failed on the reply {shown!r}: {type(err).__name__}: {err}")
        if value is None or not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
            return MalformedReply(f"the parser {name!r} cannot read a score in the reply {shown!r}" +
                                  ("" if value is None else f" (it returned {value!r})"))
        if self.settings.scale:
            low, high = self.settings.scale
            if not low <= value <= high:
                return MalformedReply(f"{float(value):g} is outside reward.judge.scale [{low:g}, {high:g}] (the reply {shown!r})")
            return (float(value) - low) / (high - low)
        return float(value)

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.settings.api_key_env, "") if self.settings.api_key_env else ""
        return {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}

    def _count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] += n


def reply_text(raw: bytes) -> str | MalformedReply:
    """The text of a chat completion's first choice (``choices[0].message.content``), or why there is none.

    >>> reply_text(b'{"choices": [{"message": {"role": "assistant", "content": "7"}}]}')
    '7'
    """
    try:
        content = json.loads(raw)["choices"][0]["message"]["content"]
    except ValueError:
        return MalformedReply(f"the reply is not JSON: {raw[:200]!r}")
    except (KeyError, IndexError, TypeError):
        return MalformedReply(f"the reply is not a chat completion (choices[0].message.content): {raw[:200]!r}")
    if not isinstance(content, str):
        return MalformedReply(f"the reply's content is {type(content).__name__}, not text: {raw[:200]!r}")
    return content

