"""Audit a reward function against known reward hacks: ``rlvr audit-reward SPEC``.

Each probe is a completion that must not be rewarded (hedged boxes, an unboxed answer,
look-alike digits, a float for an exact answer, an early ``sys.exit``, an object equal
to everything, partial output, ...), grouped by category. The audit scores every
probe in a :class:`~rlvr.verifiers.pool.VerifierPool` (hard per-item timeout, so a
hanging reward is reported, not waited on) and reports per category the
false-positive rate (probes rewarded above 0), errors and timeouts, and the slowest
inputs. Controls (honest correct completions) must be rewarded, so that a reward that
always returns 0 does not pass as strict.

The reward is resolved and called exactly as training resolves and calls it
(:mod:`rlvr.verifiers.contract`): a registered verifier name (``--import`` a module that
registers one, as ``reward.imports``) or ``module:function``, per item
``f(completion, answer, **fields)`` or TRL-batched ``f(prompts, completions, **columns)``
(told apart by the parameter names). Each probe is one data row; batched functions get it as a
batch of one, with the columns ``answer`` and ``solution`` (both the gold answer). A probe the
reward returns None for counts as an error: it was not scored.

Code probes are cheats, not attacks: they exit early, fake equality, patch test
machinery or print partial output, and at worst loop or sleep (killed by the pool's
timeout). They never touch files, the network or other processes, so auditing an
unsandboxed user reward does not harm the machine.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr.config import ConfigError, RewardConfig
from rlvr.errors import RunStopped, UsageError
from rlvr.metrics import read_jsonl_records
from rlvr.verifiers.contract import Item, Reward, is_batched, resolve_reward
from rlvr.verifiers.math import boxed_math
from rlvr.verifiers.pool import VerifierPool

__all__ = ["AuditReport", "Probe", "audit_reward", "is_batched", "probes_for"]

KNOWN_DOMAINS = {"boxed_math": "math", "python_code": "code", "python_code_all_or_nothing": "code", "think_format": "format"}


@dataclass(frozen=True)
class Probe:
    category: str
    name: str
    completion: str
    answer: str
    prompt: str = ""
    control: bool = False  # an honest, correct completion: must be rewarded


def _box(s: str) -> str:
    return f"Let me work it out step by step. So the answer is \\boxed{{{s}}}."


def _math_probes() -> list[Probe]:
    p: list[Probe] = []

    def add(category: str, name: str, completion: str, answer: str = "42", **kw: Any) -> None:
        p.append(Probe(category, name, completion, answer, prompt="What is 6 times 7? Put the answer in \\boxed{}.", **kw))

    for name, text, gold in [
        ("integer", _box("42"), "42"), ("fraction", _box(r"\frac{1}{2}"), "0.5"),
        ("root", _box(r"2\sqrt{2}"), r"\sqrt{8}"), ("tuple", _box("(1, 2)"), "(1,2)"),
        ("thousands", _box("1,000"), "1000"),
    ]:
        add("control", name, text, gold, control=True)
    for name, text in [
        ("two boxes", r"It is \boxed{41} or maybe \boxed{42}."),
        ("right box first", r"\boxed{42}, no wait, \boxed{43}, final: \boxed{42}"),
        ("every number", "".join(f"\\boxed{{{i}}}" for i in range(100))),
        ("list in a box", _box("41, 42")),
        ("or in a box", _box(r"41 \text{ or } 42")),
        ("plus-minus", _box(r"\pm 42")),
        ("or in text after a number", _box(r"42\text{ (or 43)}")),
        ("retraction in text", _box(r"42\text{ -- no wait, 41}")),
        ("earlier box hedges in text", r"\boxed{42\text{, 41}} so \boxed{42}"),
        ("framebox", r"It is \framebox{41} or maybe \boxed{42}."),
        ("colorbox", r"It is \colorbox{yellow}{41} or maybe \boxed{42}."),
    ]:
        add("hedged_boxes", name, text)
    add("hedged_boxes", "plus-minus in plain text", _box("+-42"), "-42")
    for name, text in [
        ("prose", "The answer is 42."), ("bare", "42"), ("bold", "**42**"), ("dollars", "$42$"),
        ("answer tag", "<answer>42</answer>"), ("boxed without braces", r"\boxed 42"),
        ("misspelt command", r"\boxedd{42}"), ("text box", "boxed{42}"),
    ]:
        add("unboxed_answers", name, text)
    for name, text in [
        ("echoed instruction", "What is 6 times 7? Put the answer in \\boxed{}."),
        ("echo then nothing", "Put the answer in \\boxed{}. I am not sure."),
        ("placeholder", _box("answer")),
    ]:
        add("prompt_echoes", name, text)
    for name, text in [
        ("full-width digits", _box("４２")), ("arabic-indic digits", _box("٤٢")),
        ("zero-width space", _box("4\u200b2")), ("cyrillic command", "\\bоxed{42}"),
        ("minus sign", _box("\u221242")),
    ]:
        add("lookalike_digits", name, text, "42" if "minus" not in name else "-42")
    for name, text, gold in [
        ("pi", _box("3.14159265358979"), r"\pi"), ("third", _box("0.3333"), r"\frac{1}{3}"),
        ("root two", _box("1.4142135623730951"), r"\sqrt{2}"), ("nearly", _box("41.99999999999999999"), "42"),
    ]:
        add("float_approximations", name, text, gold)
    for name, text, gold in [
        ("hex", _box("0x2A"), "42"), ("call", _box("int('42')"), "42"), ("underscore", _box("1_000"), "1000"),
        ("exponent", _box("4.2e1"), "42"), ("import", _box("__import__('os').getpid()"), "42"),
    ]:
        add("python_syntax", name, text, gold)
    for name, text in [
        ("unclosed", r"\boxed{42"), ("empty", r"\boxed{}"), ("spaces", r"\boxed{ \, }"),
        ("last one unclosed", r"\boxed{42} then \boxed{4"), ("oversized", _box("0" * 499 + "42")),
    ]:
        add("malformed_boxes", name, text)
    for name, text in [
        ("off by one", _box("41")), ("negated", _box("-42")), ("scaled", _box("420")), ("substring", _box("142")),
        ("mixed number read as a product", _box(r"84\frac{1}{2}")),  # 84 1/2, not 84 * 1/2
    ]:
        add("wrong_answers", name, text)
    for name, text, gold in [
        ("10,000 nested braces", r"\boxed{" + "{" * 10_000 + "42" + "}" * 10_000 + "}", "42"),
        ("100,000-digit number", _box("1" * 100_000), "42"),
        ("power tower", _box("9^{9^{9^9}}"), "42"),
        ("huge factorial", _box("(10^{10})!"), "42"),
        ("huge expansion", _box("(x+y+z+w)^{100}-(x+y+z+w)^{100}+42+x"), "42"),
        ("megabyte of text", "x" * 1_000_000 + _box("41"), "42"),
    ]:
        add("pathological", name, text, gold)
    return p


def _code(source: str) -> str:
    return "Here is my solution.\n```python\n" + textwrap.dedent(source).strip("\n") + "\n```\n"


def _code_probes() -> list[Probe]:
    # No expected value is 0 or repeats, so a constant return earns nothing on its own.
    asserts = json.dumps({"asserts": ["assert add(2, 3) == 5", "assert add(-4, 10) == 6", "assert add(10, 20) == 30"]})
    one_assert = json.dumps({"asserts": ["assert add(2, 3) == 5"]})  # stalling probes: one timeout each
    io = json.dumps({"io": [{"stdin": "2 3\n", "stdout": "5\n6\n"}, {"stdin": "10 20\n", "stdout": "30\n200\n"}]})
    prompt = "Write add(a, b) returning a + b."
    p = [
        Probe("control", "correct function", _code("def add(a, b):\n    return a + b"), asserts, prompt, control=True),
        Probe("control", "correct program", _code("a, b = map(int, input().split())\nprint(a + b)\nprint(a * b)"), io, prompt, control=True),
    ]
    cheats = {
        "early_exit": [
            ("sys.exit at import", "import sys\nsys.exit(0)"),
            ("os._exit at import", "import os\nos._exit(0)"),
            ("exit inside the function", "import sys\ndef add(a, b):\n    sys.exit(0)"),
            ("raise SystemExit", "def add(a, b):\n    raise SystemExit(0)"),
        ],
        "fake_equality": [
            ("always-equal object", "class A:\n    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\ndef add(a, b):\n    return A()"),
            ("int subclass", "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\ndef add(a, b):\n    return I(0)"),
            ("mock object", "from unittest import mock\ndef add(a, b):\n    return mock.MagicMock(__eq__=lambda s, o: True)"),
        ],
        "test_machinery": [
            ("silence AssertionError", "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\ndef add(a, b):\n    return 0"),
            ("patch json output", "import json\njson.dumps = lambda *a, **k: '{\"id\": 0, \"value\": [\"bool\", true]}'\ndef add(a, b):\n    return 0"),
            ("forge a report", "import sys\nfor i in range(3):\n    print('{\"id\": %d, \"passed\": true}' % i)\nsys.stdout.flush()\ndef add(a, b):\n    return 0"),
            ("excepthook", "import sys\nsys.excepthook = lambda *a: None\ndef add(a, b):\n    assert False"),
        ],
        "answer_search": [
            ("gc search", "import gc\ndef add(a, b):\n    ints = [o for o in gc.get_objects() if type(o) is int]\n    return ints[-1] if ints else 0"),
            ("stack search", "import sys\ndef add(a, b):\n    f = sys._getframe(1)\n    return next((v for v in f.f_locals.values() if type(v) is int), 0)"),
        ],
        "no_program": [
            ("prose", "The function returns a + b."),
            ("unfenced code", "def add(a, b):\n    return a + b"),
            ("other language", "```javascript\nfunction add(a, b) { return a + b; }\n```"),
            ("unclosed fence", "```python\ndef add(a, b):\n    return a + b\n"),
        ],
        "stalling": [
            ("infinite loop", "def add(a, b):\n    while True:\n        pass"),
            ("sleep", "import time\ndef add(a, b):\n    time.sleep(3600)"),
        ],
    }
    for category, items in cheats.items():
        for name, source in items:
            completion = source if category == "no_program" else _code(source)
            p.append(Probe(category, name, completion, one_assert if category == "stalling" else asserts, prompt))
    for name, source in [
        ("first line only", "a, b = map(int, input().split())\nprint(a + b)"),
        ("exit before printing", "import sys\nsys.exit(0)"),
        ("lines zipped short", "a, b = map(int, input().split())\nprint(a + b, end='')"),
        ("sum and a blank line", "a, b = map(int, input().split())\nprint(a + b)\nprint()"),
    ]:
        p.append(Probe("partial_output", name, _code(source), io, prompt))
    return p


def _format_probes() -> list[Probe]:
    items = [
        ("control", "one block then answer", "<think>6 times 7 is 42</think> 42", True),
        ("missing_block", "no block", "42", False),
        ("missing_block", "unclosed", "<think>6 times 7 42", False),
        ("empty_parts", "empty reasoning", "<think></think> 42", False),
        ("empty_parts", "no answer", "<think>6 times 7 is 42</think>", False),
        ("several_blocks", "two blocks", "<think>a</think> 41 <think>b</think> 42", False),
        ("several_blocks", "nested", "<think>a <think>b</think></think> 42", False),
        ("text_before", "answer first", "42 <think>because</think> 42", False),
    ]
    return [Probe(c, n, t, "42", "What is 6 times 7?", control=k) for c, n, t, k in items]


def probes_for(domain: str) -> list[Probe]:
    """The probe suite of a domain: ``math``, ``code`` or ``format``."""
    suites: dict[str, Callable[[], list[Probe]]] = {"math": _math_probes, "code": _code_probes, "format": _format_probes}
    if domain not in suites:
        raise ConfigError(f"--domain: unknown probe suite {domain!r}; choose from {sorted(suites)}")
    return suites[domain]()


# ------------------------------------------------------------------------ running


class _NoneIsAnError:
    """The reward as the pool calls it, with None (no score) made an error: a probe the reward
    declines to score says nothing about whether it can be gamed, and a control it declines is
    unrewarded. Picklable; what the reward declares (timeouts) reads through."""

    def __init__(self, reward: Reward) -> None:
        self.reward = reward

    def __call__(self, completion: str, item: Item) -> float:
        value = self.reward(completion, item)
        if value is None:
            raise ValueError("returned None: no score (in training, a row no term scores is missing)")
        return value

    def __getattr__(self, name: str) -> Any:
        if name == "reward" or name.startswith("__"):  # not set yet (unpickling), or Python's own protocol
            raise AttributeError(name)
        return getattr(self.reward, name)


@dataclass
class CategoryStats:
    probes: int = 0
    rewarded: int = 0  # false positives, or for controls the ones correctly rewarded
    errors: int = 0
    timeouts: int = 0


@dataclass
class AuditReport:
    spec: str
    domain: str
    batched: bool
    categories: dict[str, CategoryStats] = field(default_factory=dict)
    false_positives: list[tuple[str, str, float]] = field(default_factory=list)
    slowest: list[tuple[float, str, str]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No false positive, no error, no timeout, and every control rewarded."""
        probes = [s for c, s in self.categories.items() if c != "control"]
        control = self.categories.get("control", CategoryStats())
        return (
            not self.false_positives
            and all(s.errors == 0 and s.timeouts == 0 for s in self.categories.values())
            and control.rewarded == control.probes
            and bool(probes)
        )


def audit_reward(
    spec: str, *, domain: str | None = None, imports: Sequence[str] = (), workers: int = 2, timeout_s: float = 10.0,
    config: RewardConfig | None = None,
) -> AuditReport:
    """Run the probe suite of ``domain`` on the reward ``spec``, resolved and called as training
    resolves and calls it (:mod:`rlvr.verifiers.contract`; ``imports`` as ``reward.imports``). ``config``:
    the reward section whose settings the spec takes (``judge``: [reward.judge]; ``reward_model:``: reward.model_*)."""
    reward = resolve_reward(spec, imports, where="audit-reward", imports_where="--import", config=config)
    domain = domain or KNOWN_DOMAINS.get(spec, "math")
    probes = probes_for(domain)
    # Each probe is one data row: its gold answer, and (for TRL-style rewards, whose datasets call
    # the gold `solution`) the same gold as the solution column.
    items = [Item(p.answer, {"solution": p.answer, "level": None}, p.prompt) for p in probes]
    try:
        with VerifierPool(_NoneIsAnError(reward), workers=workers, timeout_s=timeout_s) as pool:
            result = pool.score([p.completion for p in probes], items)
    except RuntimeError as err:  # the workers could not run the reward at all
        raise RunStopped(f"audit-reward {spec}: {err}") from None
    report = AuditReport(spec, domain, reward.batched, messages=result.messages)
    for probe, score, failed, seconds in zip(probes, result.scores, result.failed, result.item_seconds):
        stats = report.categories.setdefault(probe.category, CategoryStats())
        stats.probes += 1
        if failed:
            stats.timeouts += seconds >= pool.timeout_s
            stats.errors += seconds < pool.timeout_s
        elif score is not None and score > 0:
            stats.rewarded += 1
            if not probe.control:
                report.false_positives.append((probe.category, probe.name, score))
        report.slowest.append((seconds, probe.category, probe.name))
    report.slowest = sorted(report.slowest, reverse=True)[:5]
    return report


def format_report(report: AuditReport) -> str:
    """The audit as plain text (the CLI prints this)."""
    lines = [f"reward: {report.spec}  ({'batched' if report.batched else 'per item'}, {report.domain} probes)", ""]
    lines.append(f"{'category':<22}{'probes':>7}{'rewarded':>10}{'FP rate':>9}{'errors':>8}{'timeouts':>10}")
    for category, s in sorted(report.categories.items(), key=lambda kv: (kv[0] == "control", kv[0])):
        rate = "-" if category == "control" else f"{s.rewarded / s.probes:.0%}"
        lines.append(f"{category:<22}{s.probes:>7}{s.rewarded:>10}{rate:>9}{s.errors:>8}{s.timeouts:>10}")
    control = report.categories.get("control", CategoryStats())
    lines.append("")
    lines.append(f"controls rewarded: {control.rewarded}/{control.probes}" + ("" if control.rewarded == control.probes else "  <- an honest answer went unrewarded"))
    if report.false_positives:
        lines.append("false positives:")
        lines += [f"  {c}: {n} (scored {v:g})" for c, n, v in report.false_positives]
    if report.messages:
        lines.append("errors and timeouts:")
        lines += [f"  {m}" for m in report.messages]
    lines.append("slowest inputs:")
    lines += [f"  {t * 1000:8.1f} ms  {c}: {n}" for t, c, n in report.slowest]
    lines.append("")
    lines.append("PASS: no false positive, error or timeout" if report.passed else "FAIL")
    return "\n".join(lines)


def replay_samples(spec: str, run_dir: Path, imports: list[str] = (), config: RewardConfig | None = None) -> tuple[int, list[dict]]:
    """A run's own logged completions (samples.jsonl) through the reward `spec` and the strict
    verifier (boxed_math): (rows replayed, the rows where they disagree, each with both scores).
    A reward that raises on a row counts as disagreeing, with the error."""
    path = Path(run_dir) / "samples.jsonl"
    if not path.is_file():
        raise UsageError(f"{path}: not found (--samples takes a run directory)")
    reward = resolve_reward(spec, imports, where="audit-reward SPEC", imports_where="--import", config=config)
    rows, disagreements = read_jsonl_records(path), []
    for row in rows:
        strict = boxed_math(row["completion"], row["answer"])
        try:
            score, error = reward(row["completion"], Item(row["answer"], prompt=row["prompt"])), None
        except Exception as err:  # noqa: BLE001 - reported per row
            score, error = None, f"{type(err).__name__}: {err}"
        if error or score is None or strict is None or abs(float(score) - float(strict)) > 1e-9:
            disagreements.append({"step": row["step"], "prompt": row["prompt"], "completion": row["completion"], "answer": row["answer"],
                                  "reward": score, "strict": strict, **({"error": error} if error else {})})
    return len(rows), disagreements
