"""The judge of ``python_code``'s assert tests: what runs in the sandbox, and what runs here.

THE rule: only values returned by calls into what the program (or its setup) defines cross the
boundary, as plain data of built-in types (and the values tests convert: iterators, ranges,
dict views, ``Fraction``, ``Decimal``, ``deque``; see `results.py`). Everything else in an assert
runs here, in a small interpreter over the assert's syntax tree with bounded work: expected
values, arithmetic, comparisons, comprehensions, built-in and standard-library functions, and
the methods and attributes of the returned values.

An assert is split when the tests load (`compile_assert`). A *probe* is a chain of calls,
attributes and subscripts rooted at a name of the program, cut before its trailing *data links*
(a subscript, or an attribute named like one of a built-in data type, and its call): in
``slug(s).startswith("h")`` the sandbox computes ``slug(s)`` and the host's ``str.startswith``
judges it, so a ``str`` subclass whose ``startswith`` lies cannot pass. The cut is static: nothing
the sandbox reports moves it. Names: every built-in is the host's (`HOST_BUILTINS`, bounded; the
others, such as ``eval``, ``open``, ``print``, ``vars``, ``id``, refused); a standard-library
module used as one (``statistics.mean``) is the host's if `host_modules.py` provides it and refused
otherwise (``re``: catastrophic backtracking); setup imports of provided modules bind host names.
Only other names are the program's (or the setup's, which runs beside it).

Refused when the data is loaded, with the test's number (never evaluated in the sandbox
instead): the names above, an assert that calls nothing the program defines, a value computed
with a name the setup imports from a module the judge does not provide, a call into the program
that depends on a comprehension's variable, walrus, f-strings, asserts in setup, a setup that
binds a built-in name.

What the judge trusts, each operation bounded, is in `trusted.py` (built-ins, operators),
`methods.py` (methods of data) and `host_modules.py` (standard-library modules); the probes'
values come back as flat tokens decoded with bounds by `results.py`: a forged result can fail
its test but cannot raise, stall or flood the host.
"""

from __future__ import annotations

import ast
import decimal
import importlib
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from rlvr.verifiers.code.host_modules import HOST_MODULES, REFUSED_MODULES, SAFE_CONSTRUCTORS
from rlvr.verifiers.code.methods import ATTRIBUTE_BUILTINS, DATA_NAMES, data_attribute
from rlvr.verifiers.code.results import ReturnedIterator, decode_value
from rlvr.verifiers.code.trusted import (
    BINARY,
    BUILTINS,
    CALLABLE_TYPES,
    COMPARE,
    MAX_DECIMAL_EXPONENT,
    MAX_LENGTH,
    MAX_PRODUCED,
    MAX_SAME_HASH,
    MAX_STEPS,
    LANGUAGE_BUILTINS,
    REFUSED_BUILTINS,
    SAFE_TYPES,
    UNARY,
    JudgeError,
    ProbeFailed,
    TrustedModule,
    checked,
    materialised,
    safe_dict,
    safe_set,
    size_at_most,
)

__all__ = ["CallsNothing", "CompiledAssert", "DEADLINE_EVERY", "DECIMAL_CONTEXT", "HOST_BUILTINS", "HostCallable", "HostNames",
           "Interpreter", "JudgeError", "MAX_SAME_HASH", "ProbeFailed", "compile_assert", "decode_value", "evaluate", "host_names"]

HOST_BUILTINS: dict[str, Any] = {**BUILTINS, **ATTRIBUTE_BUILTINS}
CONSTRUCTORS: dict[type, Callable] = {**SAFE_TYPES, **SAFE_CONSTRUCTORS}
_CALLABLE = CALLABLE_TYPES | frozenset(SAFE_CONSTRUCTORS)
# Steps between two looks at the clock. One step may do up to linear work on a returned value
# (`x in f()` on 10^5 items: 0.5 ms), so looking every 4096 steps let a quadratic test overrun its
# deadline by seconds; every 64 it overruns by at most ~0.1 s, and a look costs ~1% of a step.
DEADLINE_EVERY = 64
# Decimal arithmetic on the host (asserts, test code): 28 digits, exponents bounded (int() of any
# result stays small).
DECIMAL_CONTEXT = decimal.Context(prec=28, Emax=MAX_DECIMAL_EXPONENT, Emin=-MAX_DECIMAL_EXPONENT)
_TYPE_TESTS = (isinstance, issubclass)  # take types as types: no constructor substituted
_STDLIB = frozenset(name for name in sys.stdlib_module_names if not name.startswith("_"))
_BUILTIN_NAMES = LANGUAGE_BUILTINS
# Fail closed: a built-in of a newer Python that neither list names is refused, never the program's.
REFUSED_BUILTINS.update({name: "is not one the judge provides" for name in
                         LANGUAGE_BUILTINS - HOST_BUILTINS.keys() - REFUSED_BUILTINS.keys() - {"True", "False", "None"}})


def host_names(setup: str) -> HostNames:
    """The names an assert resolves here: every built-in (provided, bounded, in `HOST_BUILTINS`;
    the rest refused when the asserts load), and what the setup imports from the modules the judge
    provides (``import statistics``, ``from fractions import Fraction``). A standard-library
    module used as one in an assert (``statistics.mean``) is the host's without an import too (see
    `compile_assert`). Every other name belongs to the program (or to helpers the setup defines,
    which run beside it)."""
    names: dict[str, Any] = dict(HOST_BUILTINS)
    try:
        tree = ast.parse(setup or "")
    except SyntaxError as err:
        raise ValueError(f"setup is not valid Python: {err.msg} (line {err.lineno})") from None
    except (MemoryError, RecursionError):
        raise ValueError("setup is nested too deeply to parse") from None
    defined: set[str] = set()
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            raise ValueError(
                f"setup line {node.lineno}: an assert in setup runs inside the sandbox, beside the program; "
                'put every check in "asserts", where it is judged outside'
            )
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in HOST_MODULES:
                    names[alias.asname or alias.name] = HOST_MODULES[alias.name]
                else:
                    imported[(alias.asname or alias.name).split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module in HOST_MODULES and node.level == 0:
            for alias in node.names:
                if alias.name == "*":  # MBPP's `from math import *`
                    names.update(_star_import(node.module, imported))
                    continue
                member = HOST_MODULES[node.module].members.get(alias.name)
                if member is None:
                    raise ValueError(f"setup imports {node.module}.{alias.name}, which the judge does not provide")
                names[alias.asname or alias.name] = member
        elif isinstance(node, ast.ImportFrom):
            imported.update({alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names})
        else:
            defined |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
    shadowed = sorted((defined | set(imported)) & _BUILTIN_NAMES)
    if shadowed:
        raise ValueError(f"setup binds {shadowed[0]!r}, a built-in name: in the asserts every built-in is the judge's "
                         "own, so a helper of the setup needs a name of its own")
    for name in defined | set(imported):  # a name the setup binds is the setup's (it runs in the sandbox)
        names.pop(name, None)
    names.update({name: SandboxImport(module) for name, module in imported.items() if name not in defined})
    return HostNames(names, setup_bound=frozenset(defined))


def _star_import(module: str, imported: dict[str, str]) -> dict[str, Any]:
    """``from module import *`` of a provided module: the members the judge provides are the
    host's; every other public name of the real module is recorded in ``imported`` (it lives
    beside the program, see `SandboxImport`); a name that would cover a built-in stays the
    built-in (in an assert, every built-in is the judge's)."""
    real = importlib.import_module(module)
    public = getattr(real, "__all__", None) or [n for n in dir(real) if not n.startswith("_")]
    members = HOST_MODULES[module].members
    imported.update({n: f"{module}.{n}" for n in public if n not in members and n not in _BUILTIN_NAMES})
    return {n: value for n, value in members.items() if n not in _BUILTIN_NAMES}


class HostCallable:
    """A function of the trusted test code the host interprets (a setup helper, `testcode.py`):
    a name bound to one resolves, in an assert, to `bound` with the asserting interpreter, whose
    deadline and budgets the call shares."""

    def bound(self, caller: "Interpreter") -> Callable[..., Any]:
        raise NotImplementedError


class HostNames(dict):
    """What `host_names` returns: the host's names, and the names the setup defines (its own,
    even when a standard-library module has the same name)."""

    def __init__(self, names: dict[str, Any], setup_bound: frozenset[str] = frozenset()) -> None:
        super().__init__(names)
        self.setup_bound = setup_bound


@dataclass(frozen=True)
class SandboxImport:
    """A name the setup imports from a module other than `math`: it lives beside the program, which
    can patch it, so a test may pass it into the program but never compute a value with it."""

    module: str


# --------------------------------------------------------------------- splitting an assert


class _Probe(ast.expr):
    """Stands in the assert's tree for a call into the program: its value comes from the sandbox."""

    _fields = ("index",)


class _Host(ast.expr):
    """Stands in the assert's tree for a standard-library module the judge provides."""

    _fields = ("value",)


class CallsNothing(ValueError):
    """An assert that calls nothing the program defines (``assert True``, ``assert math.pi > 3``):
    it passes or fails whatever the program does. `compile_assert` refuses it; a dataset's such
    lines (MBPP's ``assert True``) are not counted as tests (`formats.py`)."""


@dataclass(frozen=True)
class CompiledAssert:
    """An assert's test with each call into the program replaced by a probe."""

    tree: ast.expr
    source: str


_SUPPORTED = (
    ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Name, ast.UnaryOp, ast.BinOp, ast.BoolOp,
    ast.Compare, ast.IfExp, ast.Call, ast.Attribute, ast.Subscript, ast.Slice, ast.Lambda,
    ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Starred, ast.keyword, ast.comprehension,
    ast.arguments, ast.arg, ast.expr_context, ast.unaryop, ast.operator, ast.boolop, ast.cmpop, _Probe, _Host,
)


def _root_and_parent(node: ast.expr) -> tuple[ast.expr, ast.expr | None]:
    """The name (or other expression) a chain of calls, attributes and subscripts starts at, and
    the link right above it (None when the chain is the root itself)."""
    parent = None
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            parent, node = node, node.value
        elif isinstance(node, ast.Call):
            parent, node = node, node.func
        else:
            return node, parent


def _is_data_link(node: ast.AST) -> bool:
    """THE cut: a subscript, an attribute named like one of a built-in data type, or the call of
    one. Applied on the host to the plain value the program's part of the chain returned."""
    if isinstance(node, ast.Call):
        node = node.func
    return isinstance(node, ast.Subscript) or (isinstance(node, ast.Attribute) and node.attr in DATA_NAMES)


def compile_assert(k: int, source: Any, names: dict[str, Any], probes: list) -> CompiledAssert:
    """Split assert ``k`` into probes (appended to ``probes`` as source) and the tree judged
    here. Raises ValueError, naming the test, for anything the judge cannot evaluate safely.

    THE rule: only values returned by calls into what the program (or its setup) defines cross
    the boundary, as plain data. A name is the program's unless it is a built-in (always the
    host's: provided, or refused here), a standard-library module used as one (``name.attr``:
    provided, or refused here) or a name the setup imports from a provided module. A chain
    rooted at a program name is cut before its trailing data links (`_is_data_link`): the
    sandbox evaluates the part before, the host applies the links to the decoded value."""
    if not isinstance(source, str):
        raise ValueError(f"assert {k}: expected a string, got {type(source).__name__}")
    try:
        body = ast.parse(source.strip()).body
    except SyntaxError as err:
        raise ValueError(f"assert {k}: not valid Python: {err.msg}") from None
    except (MemoryError, RecursionError):
        raise ValueError(f"assert {k}: nested too deeply to parse") from None
    if len(body) != 1 or not isinstance(body[0], ast.Assert):
        raise ValueError(f"assert {k}: must be exactly one assert statement (put helpers in setup): {source!r:.200}")

    def refuse(what: str, kind: type[ValueError] = ValueError) -> ValueError:
        return kind(f"assert {k}: {what}; the judge evaluates asserts outside the sandbox "
                    f"and cannot do this safely: {source!r:.200}")

    setup_bound = getattr(names, "setup_bound", frozenset())

    def module_use(node: ast.Attribute, local: frozenset[str]) -> ast.AST | None:
        """``module.attr`` with a standard-library module the assert does not otherwise bind."""
        if not (isinstance(node.value, ast.Name) and node.value.id not in local and node.value.id in _STDLIB
                and node.value.id not in names and node.value.id not in setup_bound):
            return None
        name = node.value.id
        if name not in HOST_MODULES:
            raise refuse(f"{name}.{node.attr} uses the standard-library module {name!r}, which the judge does not provide"
                         + (f" ({REFUSED_MODULES[name]})" if name in REFUSED_MODULES else ""))
        if node.attr not in HOST_MODULES[name].members:
            raise refuse(f"{name}.{node.attr} is not provided")
        return ast.copy_location(ast.Attribute(value=_Host(value=HOST_MODULES[name]), attr=node.attr, ctx=ast.Load()), node)

    def program_root(node: ast.expr, local: frozenset[str]) -> bool:
        root, parent = _root_and_parent(node)
        if not isinstance(root, ast.Name) or root.id in local:
            return False
        value = names.get(root.id)
        if value is None and root.id in _STDLIB and root.id not in setup_bound and isinstance(parent, ast.Attribute):
            return False  # a module used as one: the host's (module_use provides or refuses it)
        if root.id in REFUSED_BUILTINS:
            raise refuse(f"{root.id!r} is a built-in the judge does not provide: it {REFUSED_BUILTINS[root.id]}")
        if isinstance(value, SandboxImport):
            raise refuse(f"{root.id!r} is imported by the setup ({value.module}), so it runs beside the program, "
                         "which can patch it: write the expected value itself, or pass it into a call of the program")
        return value is None

    def split(node: ast.AST, local: frozenset[str]) -> ast.AST:
        if isinstance(node, ast.Attribute):
            replaced = module_use(node, local)
            if replaced is not None:
                return replaced
        if isinstance(node, ast.expr) and not isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            if program_root(node, local) and not _is_data_link(node):
                used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & local
                if used:
                    raise refuse(f"the call into the program {ast.unparse(node)!r} uses the comprehension "
                                 f"or lambda variable {sorted(used)[0]!r} (write one assert per case)")
                probes.append(ast.unparse(node))
                return ast.copy_location(_Probe(index=len(probes) - 1), node)
        if isinstance(node, ast.NamedExpr):
            raise refuse("an assignment expression (:=)")
        if isinstance(node, ast.JoinedStr):
            raise refuse("an f-string")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and isinstance(names.get(node.value.id), TrustedModule):
            module = names[node.value.id]
            if node.attr not in module.members:
                raise refuse(f"{module.name}.{node.attr} is not provided")
        if not isinstance(node, _SUPPORTED):
            raise refuse(f"{type(node).__name__} is not supported")
        if isinstance(node, ast.Lambda):
            args = node.args
            if args.vararg or args.kwarg or args.kwonlyargs or args.defaults or args.posonlyargs:
                raise refuse("only plain positional lambda parameters are supported")
            inner = local | {a.arg for a in args.args}
            return ast.copy_location(ast.Lambda(args=args, body=split(node.body, inner)), node)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            generators, inner = [], local
            for i, gen in enumerate(node.generators):
                if gen.is_async:
                    raise refuse("async comprehension")
                iter_ = split(gen.iter, local if i == 0 else inner)
                targets = {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
                if not all(isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.expr_context)) for n in ast.walk(gen.target)):
                    raise refuse("comprehension targets must be names or tuples of names")
                inner = inner | targets
                generators.append(ast.comprehension(target=gen.target, iter=iter_, ifs=[split(c, inner) for c in gen.ifs], is_async=0))
            if isinstance(node, ast.DictComp):
                new = ast.DictComp(key=split(node.key, inner), value=split(node.value, inner), generators=generators)
            else:
                new = type(node)(elt=split(node.elt, inner), generators=generators)
            return ast.copy_location(new, node)
        for field, value in ast.iter_fields(node):
            if isinstance(value, ast.AST):
                setattr(node, field, split(value, local))
            elif isinstance(value, list):
                setattr(node, field, [split(v, local) if isinstance(v, ast.AST) else v for v in value])
        return node

    first_probe = len(probes)
    try:
        tree = split(body[0].test, frozenset())
    except RecursionError:
        raise ValueError(f"assert {k}: nested too deeply to judge") from None
    if len(probes) == first_probe:
        raise refuse("it calls nothing the program defines, so it would pass or fail whatever the program does "
                     "(a function named like a built-in, such as `sum`, is the built-in here: bind it in setup, "
                     "`candidate = sum`, and call `candidate(...)`)", CallsNothing)
    return CompiledAssert(tree=tree, source=source)


class Interpreter:
    """Evaluates a compiled assert with trusted names, probe values and a step budget
    (`testcode.py` extends it with statements, for trusted test code, and a larger budget)."""

    max_steps = MAX_STEPS

    def __init__(self, names: dict[str, Any], probe: Callable[[int], Any], deadline: float) -> None:
        self.names, self.probe, self.deadline, self.steps, self.produced = names, probe, deadline, 0, 0
        self.sizes: dict[int, tuple[Any, int]] = {}  # id -> (container, size): each walked once

    def charge(self, value: Any) -> Any:
        """Count what comprehensions and lambdas produce: aliasing one large value many times
        would make a comparison or a print of the result unbounded."""
        known = self.sizes.get(id(value))
        if known is not None and known[0] is value:
            size = known[1]
        else:
            size = size_at_most(value, MAX_PRODUCED - self.produced)
            if isinstance(value, (list, tuple, dict, set, frozenset)):
                self.sizes[id(value)] = (value, size)  # held, so the id stays this object's
        self.produced += size
        if self.produced > MAX_PRODUCED:
            raise JudgeError("comprehension or lambda results too large")
        return value

    def run(self, node: ast.AST, env: dict[str, Any]) -> Any:
        self.steps += 1
        if self.steps > self.max_steps:
            raise JudgeError("too much work")
        if self.steps % DEADLINE_EVERY == 0 and time.monotonic() > self.deadline:
            raise JudgeError("Timeout")
        return getattr(self, "do_" + type(node).__name__)(node, env)

    def do__Probe(self, node: _Probe, env: dict) -> Any:
        value = self.probe(node.index)
        return value.fresh() if isinstance(value, ReturnedIterator) else value  # each evaluation is a new call

    def do__Host(self, node: _Host, env: dict) -> Any:
        return node.value

    def do_Constant(self, node: ast.Constant, env: dict) -> Any:
        return node.value

    def do_Name(self, node: ast.Name, env: dict) -> Any:
        value = env[node.id] if node.id in env else self.names[node.id]
        return value.bound(self) if isinstance(value, HostCallable) else value

    def items(self, nodes: list[ast.expr], env: dict) -> list:
        out: list = []
        for n in nodes:
            if isinstance(n, ast.Starred):
                out.extend(materialised(self.run(n.value, env), "unpacking"))
            else:
                out.append(self.charge(self.run(n, env)))  # 200 displayed [0] * 10**6 are 200 million
            if len(out) > MAX_LENGTH:
                raise JudgeError("too many items")
        return out

    def do_Tuple(self, node: ast.Tuple, env: dict) -> Any:
        return tuple(self.items(node.elts, env))

    def do_List(self, node: ast.List, env: dict) -> Any:
        return self.items(node.elts, env)

    def do_Set(self, node: ast.Set, env: dict) -> Any:
        return safe_set(self.items(node.elts, env))

    def do_Dict(self, node: ast.Dict, env: dict) -> Any:
        pairs = []
        for key, value in zip(node.keys, node.values):
            if key is None:
                raise JudgeError("** in a dict display is not supported")
            pairs.append((self.run(key, env), self.run(value, env)))
        return safe_dict(pairs)

    def do_UnaryOp(self, node: ast.UnaryOp, env: dict) -> Any:
        return UNARY[type(node.op)](self.run(node.operand, env))

    def do_BinOp(self, node: ast.BinOp, env: dict) -> Any:
        return checked(BINARY[type(node.op)](self.run(node.left, env), self.run(node.right, env)))

    def do_BoolOp(self, node: ast.BoolOp, env: dict) -> Any:
        value = None
        for operand in node.values:
            value = self.run(operand, env)
            if isinstance(node.op, ast.And) != bool(value):
                return value
        return value

    def do_Compare(self, node: ast.Compare, env: dict) -> Any:
        left = self.run(node.left, env)
        for op, right_node in zip(node.ops, node.comparators):
            right = self.run(right_node, env)
            if not COMPARE[type(op)](left, right):
                return False
            left = right
        return True

    def do_IfExp(self, node: ast.IfExp, env: dict) -> Any:
        return self.run(node.body if self.run(node.test, env) else node.orelse, env)

    def do_Subscript(self, node: ast.Subscript, env: dict) -> Any:
        return self.run(node.value, env)[self.run(node.slice, env)]

    def do_Slice(self, node: ast.Slice, env: dict) -> Any:
        return slice(*(self.run(p, env) if p is not None else None for p in (node.lower, node.upper, node.step)))

    def do_Attribute(self, node: ast.Attribute, env: dict) -> Any:
        return data_attribute(self.run(node.value, env), node.attr)

    def do_Call(self, node: ast.Call, env: dict) -> Any:
        fn = self.run(node.func, env)
        args = self.items(node.args, env)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise JudgeError("** in a call is not supported")
            kwargs[kw.arg] = self.run(kw.value, env)
        if fn not in _TYPE_TESTS:  # a type passed as a function (map(set, xs), key=str) is its bounded constructor
            args = [CONSTRUCTORS.get(a, a) if isinstance(a, type) else a for a in args]
            kwargs = {key: CONSTRUCTORS.get(v, v) if isinstance(v, type) else v for key, v in kwargs.items()}
        if isinstance(fn, type):
            if fn not in _CALLABLE:
                raise JudgeError(f"{fn.__name__} is not callable by the judge")
            fn = CONSTRUCTORS.get(fn, fn)
        elif not callable(fn):
            raise JudgeError(f"{type(fn).__name__} is not callable")
        return checked(fn(*args, **kwargs))

    def do_Lambda(self, node: ast.Lambda, env: dict) -> Any:
        params = [a.arg for a in node.args.args]

        def closure(*values: Any) -> Any:
            if len(values) != len(params):
                raise TypeError(f"lambda takes {len(params)} arguments, {len(values)} given")
            return self.charge(self.run(node.body, {**env, **dict(zip(params, values))}))

        return closure

    def bindings(self, generators: list[ast.comprehension], env: dict):
        """Every environment a comprehension's loops and conditions produce, lazily."""
        if not generators:
            yield env
            return
        first, rest = generators[0], generators[1:]
        count = 0
        for item in self.run(first.iter, env):
            count += 1
            if count > MAX_LENGTH:
                raise JudgeError("comprehension too long")
            inner = dict(env)
            self.bind(first.target, item, inner)
            if all(self.run(cond, inner) for cond in first.ifs):
                yield from self.bindings(rest, inner)

    def bind(self, target: ast.expr, value: Any, env: dict) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
            return
        values = materialised(value, "unpacking")
        if len(values) != len(target.elts):  # type: ignore[attr-defined]
            raise ValueError("cannot unpack")
        for t, v in zip(target.elts, values):  # type: ignore[attr-defined]
            self.bind(t, v, env)

    def do_GeneratorExp(self, node: ast.GeneratorExp, env: dict) -> Any:
        return (self.charge(self.run(node.elt, inner)) for inner in self.bindings(node.generators, env))

    def do_ListComp(self, node: ast.ListComp, env: dict) -> Any:
        return materialised(self.do_GeneratorExp(node, env), "list")  # type: ignore[arg-type]

    def do_SetComp(self, node: ast.SetComp, env: dict) -> Any:
        return safe_set(self.do_GeneratorExp(node, env))  # type: ignore[arg-type]

    def do_DictComp(self, node: ast.DictComp, env: dict) -> Any:
        pairs = (self.charge((self.run(node.key, inner), self.run(node.value, inner))) for inner in self.bindings(node.generators, env))
        return safe_dict(pairs)


def evaluate(compiled: CompiledAssert, names: dict[str, Any], probe: Callable[[int], Any], deadline: float) -> bool:
    """The assert's verdict. Raises JudgeError (or whatever the evaluation raises, as Python
    would: a TypeError comparing ``str`` with ``int`` is a failed test) when it does not pass."""
    with decimal.localcontext(DECIMAL_CONTEXT):
        return bool(Interpreter(names, probe, deadline).run(compiled.tree, {}))
