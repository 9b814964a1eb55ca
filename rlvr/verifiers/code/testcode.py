"""Trusted test code with statements, interpreted on the host: HumanEval's ``check(candidate)``.

A dataset's test code (``def check(candidate): ...`` with loops, assignments, helper functions,
``import random``...) is the dataset's, so it runs here, never in the sandbox, in the judge's
bounded interpreter (`judge.Interpreter`) extended with statements. The rule is the judge's
own: only calls into what the program defines cross the boundary. A call of ``candidate`` (the
row's ``entry_point``) or of any other name neither the test code nor the judge defines
(``sort_third``, ``poly``) is a *data-argument probe*: its arguments are computed here and sent
as plain data, the program's function runs in the sandbox, and its result comes back as data.
Everything else (expected values, ``random`` draws, helper functions, comparisons) runs here.

A sandbox job runs its probes in one go, so the check is interpreted in *rounds*: interpret
with the results known so far; a call whose arguments are known but whose result is not yet
returns an unknown value. It is carried by assignments, container slots, arguments, arithmetic
and pure built-ins (whose results are unknown too), and stops whatever needs the value itself:
an ``assert`` on it is left for the next round (the calls after it are still collected); an
``if``/``for``/``while`` on it, a ``random`` draw with it, or a change of state that needs it
ends the round. The round's calls run in one job; then the check is interpreted again from the
start with their results. ``random`` is seeded the same way every round, so each replay makes
the same calls. HumanEval needs one job, or two for the checks that call prompt helpers the
program defines; past `MAX_ROUNDS` the test fails, saying so. The whole check is one test
(HumanEval's pass/fail).

What test code may use (anything else is refused when the tests load, naming the line):
statements ``def`` (plain parameters and defaults), ``for``/``while``/``if``, ``=``/``+=``,
``assert``, ``return``/``break``/``continue``/``pass``, ``raise`` (a failure), expression
statements, and imports of the modules the judge provides (`host_modules`: ``math``, ``random``,
``copy``, ``string``, ``collections``...; ``random`` seeded alike on every round); the judge's
built-ins plus ``print`` (which prints nothing);
the methods of plain data the judge allows, and the ones that change their receiver
(``append``, ``sort``, ``update``... `methods.MUTATING`) on the values the test code holds, each
bounded (MAX_LENGTH items, MAX_SAME_HASH colliding hashes), and item assignment to a list or dict.
A Python built-in the judge does not provide (``eval``, ``id``, ``open``...) is refused, never
taken for the program's. Arguments reach the program by value: its changes to them are not seen
by the test.
"""

from __future__ import annotations

import ast
import builtins
import decimal
import json
import math
import random
import re
from collections import ChainMap
from dataclasses import dataclass, field
from typing import Any, Callable

from rlvr.verifiers.code.host_modules import HOST_MODULES, REFUSED_MODULES, new_random, random_members
from rlvr.verifiers.code.judge import DECIMAL_CONTEXT, HostCallable, HostNames, Interpreter, host_names
from rlvr.verifiers.code.methods import DATA_NAMES, MUTATING, BoundMethod, data_attribute
from rlvr.verifiers.code.results import decode_value, encode_value
from rlvr.verifiers.code.trusted import BINARY, COMPARE, MAX_LENGTH, MAX_SAME_HASH, JudgeError, ProbeFailed, TrustedModule, checked, materialised

__all__ = ["MAX_ROUNDS", "Round", "SetupHelper", "TestCode", "assert_names", "compile_test_code", "interpret_round",
           "trusted_helpers"]

MAX_ROUNDS = 4  # sandbox jobs one check may take (HumanEval: 1, or 2 with the program's prompt helpers)
MAX_CHECK_STEPS = 2_000_000  # interpreter steps per round, the whole check
MAX_CALLS = 5_000  # distinct calls into the program per check
MAX_HOST_DEPTH = 40  # nested calls of the test code's own functions
SEED = 20_240_601  # every round replays the same draws


# ------------------------------------------------------------------------ loading the tests


@dataclass(frozen=True)
class TestCode:
    """Test code checked for what the host interpreter can run; ``entry``: the function to call;
    ``program_names``: the free names it calls that are neither its own nor the judge's (the
    program's, unless trusted helpers define them)."""

    module: ast.Module
    entry: str
    program_names: frozenset[str] = frozenset()


_STATEMENTS = (ast.FunctionDef, ast.Assign, ast.AugAssign, ast.For, ast.While, ast.If, ast.Assert, ast.Expr,
               ast.Return, ast.Break, ast.Continue, ast.Pass, ast.Import, ast.ImportFrom, ast.Raise)
_EXPRESSIONS = (
    ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Name, ast.UnaryOp, ast.BinOp, ast.BoolOp,
    ast.Compare, ast.IfExp, ast.Call, ast.Attribute, ast.Subscript, ast.Slice, ast.Lambda, ast.ListComp,
    ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Starred, ast.keyword, ast.comprehension, ast.arguments,
    ast.arg, ast.expr_context, ast.unaryop, ast.operator, ast.boolop, ast.cmpop, ast.alias,
)


def _test_modules() -> dict[str, TrustedModule]:
    """The modules test code may import: the judge's host versions (`host_modules`), with a
    ``random`` of its own seeded the same way on every round, so that each replay draws alike."""
    def seeded(seed: Any = None) -> TrustedModule:
        return _impure(new_random(SEED if seed is None else seed))
    # math.pow converts to float first: constant time (HumanEval/32's poly uses it)
    math_module = TrustedModule("math", {**HOST_MODULES["math"].members, "pow": math.pow})
    return {**HOST_MODULES, "math": math_module,
            "random": _impure(TrustedModule("random", {**random_members(random.Random(SEED)), "Random": seeded}))}


def compile_test_code(source: Any, entry: str = "check", what: str = "test code") -> TestCode:
    """Check ``source`` (a module defining ``entry``) for what the host can interpret; ValueError
    naming the line of anything it cannot (``what`` names the field in the message)."""
    if not isinstance(source, str):
        raise ValueError(f"{what}: expected Python source, got {type(source).__name__}")
    try:
        module = ast.parse(source)
    except SyntaxError as err:
        raise ValueError(f"{what}: not valid Python: {err.msg} (line {err.lineno})") from None
    except (MemoryError, RecursionError):
        raise ValueError(f"{what}: nested too deeply to parse") from None
    function = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == entry), None)
    if function is None or len(function.args.args) != 1:
        raise ValueError(f"{what}: defines no top-level function {entry}(candidate) of one parameter")
    program_names = _check_module(module, what)
    candidate = function.args.args[0].arg
    if not program_names and not any(isinstance(n, ast.Name) and n.id == candidate for n in ast.walk(function)):
        raise ValueError(f"{what}: {entry}() calls nothing the program defines (neither {candidate} nor another name), "
                         "so it would pass whatever the program does")
    return TestCode(module=module, entry=entry, program_names=program_names)


def _check_module(module: ast.Module, what: str) -> frozenset[str]:
    """Refuse (ValueError naming the line) what the host interpreter cannot run; the free names
    left are the program's."""
    provided = set(host_names("")) | {"print"} | set(HOST_MODULES)
    bound = _bound_names(module)
    free: set[str] = set()

    def refuse(node: ast.AST, why: str) -> ValueError:
        return ValueError(f"{what} line {getattr(node, 'lineno', '?')}: {why}; test code is interpreted "
                          "outside the sandbox, which cannot do this")

    try:
        todo: list[ast.AST] = list(module.body)
        while todo:
            node = todo.pop()
            if isinstance(node, ast.JoinedStr):
                raise refuse(node, "an f-string")
            if isinstance(node, ast.stmt):
                _check_statement(node, refuse)
            elif not isinstance(node, _EXPRESSIONS):
                raise refuse(node, f"{type(node).__name__} is not supported")
            if isinstance(node, ast.Name) and node.id not in bound and node.id not in provided:
                if hasattr(builtins, node.id):
                    raise refuse(node, f"the built-in {node.id!r} is not provided by the judge (it is never taken "
                                       "for a function of the program)")
                free.add(node.id)
            if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
                raise refuse(node, f"the attribute {node.attr!r}")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in _MODULES \
                    and node.attr not in _MODULES[node.value.id].members:
                raise refuse(node, f"{node.value.id}.{node.attr} is not provided by the judge")
            children = list(ast.iter_child_nodes(node))
            if isinstance(node, ast.Assert) and node.msg is not None:
                children.remove(node.msg)  # the message is never evaluated
            todo.extend(children)
    except RecursionError:
        raise ValueError(f"{what}: nested too deeply") from None
    return frozenset(free)


_DEF = r"^def[ \t]+{name}[ \t]*\("


def trusted_helpers(prompt: str, code: TestCode, entry_point: str) -> ast.Module | None:
    """The functions the check calls besides the one under test (HumanEval's ``poly``,
    ``encode_cyclic``, ``encode_shift``), as trusted source taken from the dataset's prompt, which
    shows them: the top-level ``def`` of each, and the prompt's imports of provided modules. None
    unless every one is found and the host can interpret it (then they stay the program's)."""
    wanted = sorted(code.program_names - {entry_point})
    if not wanted or not isinstance(prompt, str):
        return None
    lines = prompt.replace("\r\n", "\n").split("\n")
    body: list[ast.stmt] = []
    for line in lines:  # the prompt's own imports (poly uses math)
        if re.match(r"^(import|from)[ \t]", line):
            try:
                body += [n for n in ast.parse(line).body if _provided_import(n)]
            except SyntaxError:
                continue
    for name in wanted:
        start = next((i for i, line in enumerate(lines) if re.match(_DEF.format(name=re.escape(name)), line)), None)
        if start is None:
            return None
        end = start + 1
        while end < len(lines) and (not lines[end].strip() or lines[end][:1] in " \t"):
            end += 1
        try:
            body += ast.parse("\n".join(lines[start:end])).body
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return None
    module = ast.Module(body=body, type_ignores=[])
    try:
        if _check_module(module, "prompt helpers") - {n.name for n in body if isinstance(n, ast.FunctionDef)}:
            return None  # a helper that calls the program in turn stays the program's
    except ValueError:
        return None
    return module


def _provided_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return all(alias.name in HOST_MODULES for alias in node.names)
    return isinstance(node, ast.ImportFrom) and node.module in _MODULES and not node.level and all(
        alias.name in _MODULES[node.module].members for alias in node.names)


def _check_statement(node: ast.stmt, refuse: Callable[[ast.AST, str], ValueError]) -> None:
    if not isinstance(node, _STATEMENTS):
        raise refuse(node, f"the statement {type(node).__name__}")
    if isinstance(node, ast.FunctionDef):
        args = node.args
        if node.decorator_list or args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            raise refuse(node, f"def {node.name}: only plain parameters (with defaults) and no decorators")
        if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(node)):
            raise refuse(node, f"def {node.name} is a generator")
    if isinstance(node, (ast.For, ast.While)) and node.orelse:
        raise refuse(node, "a loop with an else clause")
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name not in HOST_MODULES:
                raise refuse(node, f"import {alias.name}: {_why_not(alias.name)}")
    if isinstance(node, ast.ImportFrom):
        module = _MODULES.get(node.module or "")
        if module is None or node.level:
            raise refuse(node, f"from {node.module} import ...: {_why_not(node.module or '')}")
        missing = [a.name for a in node.names if a.name not in module.members]
        if missing:
            raise refuse(node, f"{node.module}.{missing[0]} is not provided by the judge")
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.For)) else []
    for target in targets:
        for part in ast.walk(target):
            if isinstance(part, ast.Attribute) or isinstance(part, ast.Starred):
                raise refuse(node, "assigning to an attribute or a starred target")


def _why_not(module: str) -> str:
    return REFUSED_MODULES.get(module, f"the judge provides only {sorted(HOST_MODULES)}")


def _bound_names(module: ast.Module) -> set[str]:
    """Every name the test code binds somewhere (a local `str = ...` shadows the built-in there)."""
    names: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


# ------------------------------------------------------------------------ values of a round


def _print(*args: Any, **kwargs: Any) -> None:
    """Test code's ``print``: debugging output, which the judge does not show."""


class _Pending(BaseException):
    """An operation needs the value of a result not known yet (its truth, length, items, hash...).
    A BaseException, so that no ``except Exception`` on the way swallows it."""


class _Unknown:
    """The result of a call into the program not run yet. It flows where a value is only carried
    (a variable, a container's slot, an argument, arithmetic, a pure built-in: their result is
    unknown too) and raises _Pending where the value itself is needed (truth, length, iteration,
    hashing, conversion): there the statement waits for a later round."""

    def _unknown(self, *args: Any, **kwargs: Any) -> "_Unknown":
        return self

    def _pending(self, *args: Any, **kwargs: Any) -> Any:
        raise _Pending

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _unknown
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = _unknown
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __lshift__ = __rlshift__ = __rshift__ = _unknown
    __rrshift__ = __invert__ = __getitem__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _unknown  # type: ignore[assignment]
    __bool__ = __len__ = __iter__ = __hash__ = __contains__ = __index__ = __int__ = __float__ = __complex__ = _pending
    __round__ = __str__ = __repr__ = __format__ = __getattr__ = __reduce_ex__ = __deepcopy__ = __copy__ = _pending  # type: ignore[assignment]


UNKNOWN = _Unknown()


@dataclass(frozen=True)
class ProgramName:
    """A callable of the program, named by the expression the sandbox evaluates to find it."""

    expr: str


class _Impure:
    """A host function with state (``random``'s): never skipped for an unknown argument, since a
    replay must draw exactly as the round before."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _impure(module: TrustedModule) -> TrustedModule:
    return TrustedModule(module.name, {k: v if isinstance(v, type) else _Impure(v) for k, v in module.members.items()})


class _Value(ast.expr):
    """A value computed already, standing in a node handed to the base interpreter."""

    _fields = ("value",)


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Stall(Exception):
    """Control flow or a change of state depends on a result not known yet: this round ends here."""


class _Failed(Exception):
    """A definitive failure of the check (an assert, a raise, an error of the test or the program)."""


@dataclass
class Round:
    """One interpretation of the check: its verdict when reached (``passed`` True/False, None when
    it needs the ``calls`` first) and the calls into the program it needs next, as probes."""

    passed: bool | None
    detail: str
    calls: list[tuple[str, dict]] = field(default_factory=list)  # (key, probe)


def call_key(expr: str, args: list, kwargs: dict) -> tuple[str, dict]:
    """(key, probe) of a call into the program with these data arguments (JudgeError if one is not data)."""
    probe = {"call": expr, "args": encode_value(list(args)), "kwargs": encode_value(dict(kwargs))}
    return json.dumps([probe["call"], probe["args"], probe["kwargs"]], separators=(",", ":")), probe


# ------------------------------------------------------------------------ the interpreter


class _TestInterpreter(Interpreter):
    """The judge's expression interpreter with statements, host functions and calls into the program."""

    max_steps = MAX_CHECK_STEPS  # the whole check, each round

    def __init__(self, known: dict[str, dict], deadline: float) -> None:
        self.modules = _test_modules()
        super().__init__({**host_names(""), "print": _print}, self._no_probe, deadline)
        self.known, self.pending = known, {}  # key -> the runner's result line / the probe to run
        self.depth = 0
        self.hash_counts: dict[int, tuple[Any, dict[int, int]]] = {}
        self.waiting = 0  # asserts left for a later round
        self.placeholders = False  # some container holds UNKNOWN: arguments are searched for it

    @staticmethod
    def _no_probe(index: int) -> Any:
        raise JudgeError("a static probe in test code")

    # ---------------------------------------------------------------- values
    def do__Value(self, node: _Value, env: Any) -> Any:
        return node.value

    def charge(self, value: Any) -> Any:
        if value is UNKNOWN:  # a slot of a container, an argument: carried, counted as one
            self.placeholders = True
            return value
        return super().charge(value)

    def unknown_in(self, values: list) -> bool:
        """Whether UNKNOWN is among ``values`` (or, once a container may hold one, inside them)."""
        if any(v is UNKNOWN for v in values):
            return True
        if not self.placeholders:
            return False
        todo, seen = list(values), 0
        while todo:
            item = todo.pop()
            seen += 1
            if seen > 2 * MAX_LENGTH:
                raise JudgeError("arguments too large to search")
            if item is UNKNOWN:
                return True
            if type(item) in (list, tuple):
                todo.extend(item)
            elif isinstance(item, dict):
                todo.extend(item.values())
        return False

    def do_Name(self, node: ast.Name, env: Any) -> Any:
        if node.id in env:
            return env[node.id]
        if node.id in self.names:
            return self.names[node.id]
        if node.id in self.modules:  # a provided module used without an import is the host's, as in asserts
            return self.modules[node.id]
        return ProgramName(node.id)  # neither the test nor the judge defines it: the program's

    def do_Attribute(self, node: ast.Attribute, env: Any) -> Any:
        owner = self.run(node.value, env)
        if owner is UNKNOWN:  # a method or attribute of an unknown result is unknown
            return UNKNOWN
        if isinstance(owner, ProgramName):  # `Solution().f`: the program's, named in the sandbox
            return ProgramName(f"{owner.expr}.{node.attr}")
        return data_attribute(owner, node.attr)

    def do_Subscript(self, node: ast.Subscript, env: Any) -> Any:
        owner, key = self.run(node.value, env), self.run(node.slice, env)
        return UNKNOWN if owner is UNKNOWN or key is UNKNOWN else owner[key]

    def do_Dict(self, node: ast.Dict, env: Any) -> Any:
        value = super().do_Dict(node, env)
        self.placeholders |= any(v is UNKNOWN for v in value.values())
        return value

    def do_Compare(self, node: ast.Compare, env: Any) -> Any:
        left = self.run(node.left, env)
        for op, right_node in zip(node.ops, node.comparators):
            right = self.run(right_node, env)
            if left is UNKNOWN or right is UNKNOWN:  # `is None` too: decided with the value, later
                return UNKNOWN
            if not COMPARE[type(op)](left, right):
                return False
            left = right
        return True

    def do_GeneratorExp(self, node: ast.GeneratorExp, env: Any) -> Any:
        def items():  # consumed by host code (join, sum, all): an unknown item cannot be handed over
            for item in super(_TestInterpreter, self).do_GeneratorExp(node, env):
                if item is UNKNOWN:
                    raise _Pending
                yield item
        return items()

    def do_ListComp(self, node: ast.ListComp, env: Any) -> Any:
        elements = (self.charge(self.run(node.elt, inner)) for inner in self.bindings(node.generators, env))
        return materialised(elements, "list")

    def do_Call(self, node: ast.Call, env: Any) -> Any:
        callee = self.run(node.func, env)
        args, kwargs = self.arguments(node, env)
        if isinstance(callee, ProgramName):
            return self.call_program(callee.expr, args, kwargs)
        if isinstance(callee, HostFunction):
            return callee(*args, **kwargs)
        if isinstance(callee, BoundMethod) and callee.name in MUTATING.get(type(callee.owner), ()):
            return self.mutate(callee.owner, callee.name, args, kwargs)
        if callee is UNKNOWN or self.unknown_in([*args, *kwargs.values()]):
            if isinstance(callee, _Impure):
                raise _Stall  # a draw skipped now would shift every later draw of this replay
            return UNKNOWN  # a pure function of an unknown value
        # everything else as the judge calls it (its bounds, its constructors), on the values computed here;
        # the program's function handed to a host function (`map(candidate, xs)`, `key=candidate`) calls
        # into the program like any call of it: a data-argument probe, its result unknown until reported
        args = [self.program_callable(a) if isinstance(a, ProgramName) else a for a in args]
        kwargs = {k: self.program_callable(v) if isinstance(v, ProgramName) else v for k, v in kwargs.items()}
        synthetic = ast.Call(func=_Value(callee), args=[_Value(a) for a in args],
                             keywords=[ast.keyword(arg=k, value=_Value(v)) for k, v in kwargs.items()])
        return super().do_Call(synthetic, env)

    def arguments(self, node: ast.Call, env: Any) -> tuple[list, dict]:
        args = self.items(node.args, env)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise JudgeError("** in a call is not supported")
            kwargs[kw.arg] = self.charge(self.run(kw.value, env))
        return args, kwargs

    def program_callable(self, name: ProgramName) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.call_program(name.expr, list(args), kwargs)
        return call

    def call_program(self, expr: str, args: list, kwargs: dict) -> Any:
        """A call into the program: its reported result, or UNKNOWN until the sandbox runs it."""
        if self.unknown_in([*args, *kwargs.values()]):
            return UNKNOWN  # made in a later round, once its arguments are known
        key, probe = call_key(expr, args, kwargs)
        line = self.known.get(key)
        if line is None:
            self.pending.setdefault(key, probe)
            if len(self.pending) + len(self.known) > MAX_CALLS:
                raise JudgeError(f"more than {MAX_CALLS} calls into the program")
            return UNKNOWN
        if "value" not in line:
            raise ProbeFailed(f"{expr}(...) raised {str(line.get('error', 'no value'))[:100]}")
        return decode_value(line["value"])  # decoded on each use: the test may change what it gets

    # ---------------------------------------------------------------- mutation of the host's values
    def mutate(self, owner: Any, method: str, args: list, kwargs: dict) -> Any:
        """A method that changes a value the test code built (or got back as data), bounded: the
        value stays within MAX_LENGTH items and a set or dict within MAX_SAME_HASH colliding hashes.
        An unknown value may fill a list's slot (``seen.append(candidate(x))``); one that a set or
        dict would hash, or a sort would compare, ends the round."""
        added: list = []
        if method in ("append", "appendleft", "insert", "add", "setdefault"):
            added = [args[-1] if method == "insert" else args[0]] if args else []
        elif method in ("extend", "extendleft", "update") and args:
            if isinstance(args[0], dict):
                added = list(args[0].keys())
            else:
                args = [materialised(args[0], method), *args[1:]]
                added = [pair[0] if isinstance(owner, dict) and isinstance(pair, (tuple, list)) and pair else pair for pair in args[0]]
        added += list(kwargs) if method == "update" else []
        if len(owner) + len(added) > MAX_LENGTH:
            raise JudgeError(f"{type(owner).__name__} too large")
        try:
            if isinstance(owner, (set, dict)):
                self.guard_hashes(owner, added if method != "setdefault" or not args or args[0] not in owner else [])
            result = checked(getattr(owner, method)(*args, **kwargs))
        except _Pending:
            raise _Stall from None
        self.placeholders |= self.unknown_in(added)
        return result

    def guard_hashes(self, container: dict | set, new: list) -> None:
        """Inserting members one by one could build a set or dict of colliding hashes (quadratic):
        the counts of each container's hashes are kept from its first insertion here."""
        held = self.hash_counts.get(id(container))
        if held is None or held[0] is not container:
            counts: dict[int, int] = {}
            for member in container:
                counts[hash(member)] = counts.get(hash(member), 0) + 1
            held = self.hash_counts[id(container)] = (container, counts)
        for member in new:
            h = hash(member)
            held[1][h] = held[1].get(h, 0) + 1
            if held[1][h] > MAX_SAME_HASH:
                raise JudgeError(f"more than {MAX_SAME_HASH} colliding hashes")

    # ---------------------------------------------------------------- statements
    def block(self, body: list[ast.stmt], env: Any) -> None:
        for statement in body:
            self.run(statement, env)

    def do_FunctionDef(self, node: ast.FunctionDef, env: Any) -> None:
        defaults = [self.run(d, env) for d in node.args.defaults]
        env[node.name] = HostFunction(self, node, env, defaults)

    def do_Import(self, node: ast.Import, env: Any) -> None:
        for alias in node.names:
            env[alias.asname or alias.name] = self.modules[alias.name]

    def do_ImportFrom(self, node: ast.ImportFrom, env: Any) -> None:
        module = self.modules[node.module or ""]
        for alias in node.names:
            env[alias.asname or alias.name] = module.members[alias.name]

    def do_Pass(self, node: ast.Pass, env: Any) -> None:
        return None

    def do_Break(self, node: ast.Break, env: Any) -> None:
        raise _Break

    def do_Continue(self, node: ast.Continue, env: Any) -> None:
        raise _Continue

    def do_Return(self, node: ast.Return, env: Any) -> None:
        raise _Return(None if node.value is None else self.value_of(node.value, env))

    def do_Raise(self, node: ast.Raise, env: Any) -> None:
        what = ast.unparse(node.exc) if node.exc is not None else "raise"
        raise _Failed(f"the test raised {what[:80]} (line {node.lineno})")

    def do_Expr(self, node: ast.Expr, env: Any) -> None:
        try:
            self.run(node.value, env)
        except _Pending:  # a change of state that needs an unknown value: later statements could see it
            raise _Stall from None

    def do_Assert(self, node: ast.Assert, env: Any) -> None:
        try:
            passed = bool(self.run(node.test, env))
        except _Pending:
            self.waiting += 1  # decided in a later round; the calls after it are collected now
            return
        if not passed:
            raise _Failed(f"assert on line {node.lineno} failed")

    def value_of(self, node: ast.expr, env: Any) -> Any:
        """An expression's value, UNKNOWN when it needs a result not known yet."""
        try:
            return self.run(node, env)
        except _Pending:
            return UNKNOWN

    def do_Assign(self, node: ast.Assign, env: Any) -> None:
        value = self.value_of(node.value, env)
        for target in node.targets:
            self.store(target, value, env)

    def do_AugAssign(self, node: ast.AugAssign, env: Any) -> None:
        target = node.target
        load = target if isinstance(target, ast.Name) else ast.Subscript(value=target.value, slice=target.slice, ctx=ast.Load())  # type: ignore[attr-defined]
        current, operand = self.value_of(load, env), self.value_of(node.value, env)
        if isinstance(node.op, ast.Add) and type(current) is list:  # in place, as Python does
            self.mutate(current, "extend", [operand], {}) if operand is not UNKNOWN else self.stall()
            value = current
        elif current is UNKNOWN or operand is UNKNOWN:
            value = UNKNOWN
        else:  # bounded as `x = x + y` is: a loop of `t += x` or `p *= x` cannot grow a value past the judge's bounds
            value = checked(BINARY[type(node.op)](current, operand))
        self.store(target, value, env)

    @staticmethod
    def stall() -> None:
        raise _Stall

    def store(self, target: ast.expr, value: Any, env: Any) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
            return
        if isinstance(target, ast.Subscript):
            container, key = self.run(target.value, env), self.run(target.slice, env)
            if container is UNKNOWN or key is UNKNOWN:
                raise _Stall  # which container, which slot: not known yet
            if isinstance(container, dict):
                try:
                    self.guard_hashes(container, [key] if key not in container else [])
                except _Pending:
                    raise _Stall from None
                container[key] = value
            elif type(container) is list and not isinstance(key, slice):
                container[key] = value
            else:
                raise JudgeError(f"item assignment to a {type(container).__name__} is not supported by the judge")
            self.placeholders |= value is UNKNOWN
            return
        if value is UNKNOWN:  # `a, b = candidate(x)`: each part unknown
            for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                env[name] = UNKNOWN
            return
        try:
            values = materialised(value, "unpacking")
        except _Pending:
            raise _Stall from None
        if len(values) != len(target.elts):  # type: ignore[attr-defined]
            raise ValueError("cannot unpack")
        for part, item in zip(target.elts, values):  # type: ignore[attr-defined]
            self.store(part, item, env)

    def do_If(self, node: ast.If, env: Any) -> None:
        self.block(node.body if self.decide(node.test, env) else node.orelse, env)

    def do_While(self, node: ast.While, env: Any) -> None:
        turns = 0
        while self.decide(node.test, env):
            turns += 1
            if not self.turn(node.body, env, turns):
                break

    def do_For(self, node: ast.For, env: Any) -> None:
        try:
            iterator = iter(self.run(node.iter, env))
        except _Pending:
            raise _Stall from None
        turns = 0
        while True:
            try:
                item = next(iterator)
            except StopIteration:
                break
            except _Pending:
                raise _Stall from None
            turns += 1
            self.store(node.target, item, env)
            if not self.turn(node.body, env, turns):
                break

    def turn(self, body: list[ast.stmt], env: Any, turns: int) -> bool:
        """A loop's ``turns``-th pass over its body (bounded); False when it breaks. (A loop's
        ``else`` is refused when the test code loads.)"""
        if turns > MAX_LENGTH:
            raise JudgeError("loop too long")
        try:
            self.block(body, env)
        except _Break:
            return False
        except _Continue:
            pass
        return True

    def decide(self, test: ast.expr, env: Any) -> bool:
        try:
            return bool(self.run(test, env))
        except _Pending:
            raise _Stall from None


class HostFunction:
    """A function the test code defines, run by the interpreter (callable from host built-ins
    too: ``sorted(xs, key=helper)``)."""

    def __init__(self, interpreter: _TestInterpreter, node: ast.FunctionDef, closure: Any, defaults: list) -> None:
        self.interpreter, self.node, self.closure, self.defaults = interpreter, node, closure, defaults
        self.__name__ = node.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        params = [a.arg for a in self.node.args.args]
        if len(args) > len(params):
            raise TypeError(f"{self.node.name}() takes {len(params)} arguments, {len(args)} given")
        local: dict[str, Any] = dict(zip(params, args))
        for name, value in kwargs.items():
            if name not in params or name in local:
                raise TypeError(f"{self.node.name}() got an unexpected or repeated argument {name!r}")
            local[name] = value
        first_default = len(params) - len(self.defaults)
        for i, name in enumerate(params):
            if name not in local:
                if i < first_default:
                    raise TypeError(f"{self.node.name}() missing argument {name!r}")
                local[name] = self.defaults[i - first_default]
        interpreter = self.interpreter
        if interpreter.depth >= MAX_HOST_DEPTH:
            raise JudgeError("test code recursion too deep")
        interpreter.depth += 1
        try:
            interpreter.block(self.node.body, ChainMap(local, *getattr(self.closure, "maps", [self.closure])))
        except _Return as ret:
            return ret.value
        finally:
            interpreter.depth -= 1
        return None


# ------------------------------------------------------------------------ one round


def interpret_round(code: TestCode, entry_point: str, known: dict[str, dict], deadline: float,
                    helpers: ast.Module | None = None) -> Round:
    """Interpret the check once with the calls ``known`` so far (key -> the runner's line);
    ``helpers`` (`trusted_helpers`) define names the check calls on the host instead of the program."""
    interpreter = _TestInterpreter(known, deadline)
    module_env: dict[str, Any] = {}
    try:
        with decimal.localcontext(DECIMAL_CONTEXT):  # Decimal arithmetic bounded, as in asserts
            if helpers is not None:
                interpreter.block(helpers.body, ChainMap(module_env))
            interpreter.block(code.module.body, ChainMap(module_env))
            module_env[code.entry](ProgramName(entry_point))
    except _Failed as failure:
        return Round(False, str(failure))
    except (_Stall, _Pending):  # the rest of the check needs this round's results
        interpreter.waiting += 1
    except (_Return, _Break, _Continue):
        return Round(False, "return, break or continue outside its place in the test code")
    except JudgeError as err:
        return Round(False, str(err))
    except RecursionError:
        return Round(False, "test code nested too deeply")
    except Exception as err:  # an error of the test's own evaluation fails the test, as in Python
        return Round(False, f"{type(err).__name__} in the test code")
    if interpreter.pending:
        return Round(None, "waiting for calls into the program", list(interpreter.pending.items()))
    if interpreter.waiting:  # unreachable: an unknown value comes from a call made this round
        return Round(False, "the test could not be decided")
    return Round(True, "ok")


_MODULES = _test_modules()  # what imports and module attributes are checked against when the tests load


# ------------------------------------------------------------------------ helpers of an asserts setup


class SetupHelper(HostCallable):
    """A function an asserts spec's setup (MBPP's ``test_setup_code``) defines and the host can
    interpret on data: trusted test code, so it runs here, like a HumanEval check's helpers (the
    calls of one assert share a check's step budget, `MAX_CHECK_STEPS`, and its deadline). In
    the sandbox it ran beside the program, which could patch what it uses (``builtins.sorted``)
    or hand it a value whose methods lie: ``assert is_sorted(f(3))`` passed a wrong ``f``."""

    def __init__(self, module: ast.Module, name: str) -> None:
        self.module, self.name = module, name

    def bound(self, caller: Interpreter) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            # one interpreter per assert for all its helper calls: they share a check's step
            # budget (a helper may compute an expected value the long way), the assert's deadline
            # and its size budget
            interpreter, env = self.interpreter_for(caller)
            interpreter.produced = caller.produced
            try:
                return env[self.name](*args, **kwargs)
            except _Failed as failure:
                raise JudgeError(f"setup helper {self.name}: {failure}") from None
            except (_Return, _Break, _Continue, _Stall, _Pending):
                raise JudgeError(f"setup helper {self.name} cannot be judged") from None
            finally:
                caller.produced = interpreter.produced
        call.__name__ = self.name
        return call

    def interpreter_for(self, caller: Interpreter) -> tuple[_TestInterpreter, ChainMap]:
        held = caller.__dict__.setdefault("setup_interpreters", {})
        if id(self.module) not in held:
            interpreter, env = _TestInterpreter({}, caller.deadline), ChainMap({})
            interpreter.block(self.module.body, env)  # the imports and the defs
            held[id(self.module)] = (interpreter, env, self.module)  # the module held: its id stays its own
        return held[id(self.module)][:2]


def assert_names(setup: str) -> HostNames:
    """The names an assert resolves on the host (`judge.host_names`), plus the setup's helpers
    the host interprets (`setup_helpers`)."""
    names = host_names(setup)
    names.update(setup_helpers(setup))
    return names


def setup_helpers(setup: str) -> dict[str, SetupHelper]:
    """THE rule for a setup's functions: a top-level ``def`` of the setup is trusted test code
    and runs on the host when the host can interpret it on data: the test code rules above hold
    for it (no class, ``try``, refused built-in...), every attribute it reads is one of a
    built-in data type's (`methods.DATA_NAMES`) or of a provided module, it is bound once, and
    every free name it uses is the judge's or another such helper. Any other helper (one that
    walks a program's objects, ``node.val``; one that calls the program) builds inputs or reads
    the program's objects, so it stays beside the program, in the sandbox."""
    try:
        module = ast.parse(setup or "")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return {}
    imports = [n for n in module.body if isinstance(n, (ast.Import, ast.ImportFrom)) and _provided_import(n)]
    bindings: dict[str, int] = {}
    for node in ast.walk(module):
        names = [node.id] if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) else \
            [node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else \
            [(a.asname or a.name).split(".")[0] for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
        for name in names:
            bindings[name] = bindings.get(name, 0) + 1
    free: dict[str, frozenset[str]] = {}
    for node in module.body:
        if not isinstance(node, ast.FunctionDef) or bindings.get(node.name) != 1 or not _reads_data_only(node):
            continue
        try:
            free[node.name] = _check_module(ast.Module(body=[*imports, node], type_ignores=[]), "setup") - {node.name}
        except ValueError:
            continue
    helpers = set(free)
    while True:  # a helper that needs a name other than the judge's or another helper's stays in the sandbox
        left = {name for name in helpers if free[name] <= helpers}
        if left == helpers:
            break
        helpers = left
    body = [*imports, *(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name in helpers)]
    shared = ast.Module(body=body, type_ignores=[])
    return {name: SetupHelper(shared, name) for name in sorted(helpers)}


def _reads_data_only(function: ast.FunctionDef) -> bool:
    """Every attribute the function reads is a built-in data type's or a provided module's member."""
    for node in ast.walk(function):
        if isinstance(node, ast.Attribute) and node.attr not in DATA_NAMES and not (
                isinstance(node.value, ast.Name) and node.value.id in _MODULES and node.attr in _MODULES[node.value.id].members):
            return False
    return True
