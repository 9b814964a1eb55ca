"""The judge of ``python_code``'s assert tests: what runs in the sandbox, and what runs here.

An assert is split when the data is loaded. Each call into the program under test (a
*probe*: the longest chain of calls, attributes and subscripts that starts at a name the
program or the setup defines, such as ``f(x)``, ``Solution().solve(xs)[0]``) is sent to the
sandbox as source and comes back as plain data. Everything else in the assert, expected
values, arithmetic, tolerances, containers, boolean structure and reference functions
(``abs``, ``set``, ``sorted``, ``math.isclose``, ...), is evaluated here by a small
interpreter over the assert's syntax tree, with the real built-ins and bounded work. So the
program never sees an expected value and cannot shadow a function the test judges with.

Refused when the data is loaded, with the test's number (never evaluated in the sandbox
instead): an assert that calls nothing the program defines, a value computed with a name the
setup imports from a module other than ``math``, a call into the program that depends on a
comprehension's variable, walrus, f-strings, and asserts in setup.

What the judge trusts, each operation bounded, is in `trusted.py`; the probes' values come
back as flat tokens decoded with bounds by `results.py`: a forged result can fail its test but
cannot raise, stall or flood the host.
"""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass
from typing import Any, Callable

from rlvr.verifiers.results import decode_value
from rlvr.verifiers.trusted import (
    BINARY,
    BUILTINS,
    CHECKED_ARGS,
    COMPARE,
    DATA_ATTRIBUTES,
    HOST_MODULES,
    MAX_PRODUCED,
    MAX_SAME_HASH,
    MAX_STEPS,
    MAX_LENGTH,
    METHODS,
    SAFE_TYPES,
    CALLABLE_TYPES,
    UNARY,
    JudgeError,
    SET_BUILDERS,
    ProbeFailed,
    TrustedModule,
    check_hashes,
    checked,
    materialised,
    safe_dict,
    safe_set,
    size_at_most,
    size_of,
)

__all__ = ["CompiledAssert", "JudgeError", "MAX_SAME_HASH", "ProbeFailed", "compile_assert", "decode_value", "evaluate", "host_names"]


def host_names(setup: str) -> dict[str, Any]:
    """The names an assert resolves here: the trusted built-ins, ``math``, and what the setup
    imports from ``math`` (``import math as m``, ``from math import isclose``). Every other name
    belongs to the program (or to helpers the setup defines, which run beside it)."""
    names: dict[str, Any] = {**BUILTINS, **HOST_MODULES}
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
    for name in defined | set(imported):  # a name the setup binds is the setup's (it runs in the sandbox)
        names.pop(name, None)
    names.update({name: SandboxImport(module) for name, module in imported.items() if name not in defined})
    return names


@dataclass(frozen=True)
class SandboxImport:
    """A name the setup imports from a module other than `math`: it lives beside the program, which
    can patch it, so a test may pass it into the program but never compute a value with it."""

    module: str


# --------------------------------------------------------------------- splitting an assert


class _Probe(ast.expr):
    """Stands in the assert's tree for a call into the program: its value comes from the sandbox."""

    _fields = ("index",)


@dataclass(frozen=True)
class CompiledAssert:
    """An assert's test with each call into the program replaced by a probe."""

    tree: ast.expr
    source: str


_SUPPORTED = (
    ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Name, ast.UnaryOp, ast.BinOp, ast.BoolOp,
    ast.Compare, ast.IfExp, ast.Call, ast.Attribute, ast.Subscript, ast.Slice, ast.Lambda,
    ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Starred, ast.keyword, ast.comprehension,
    ast.arguments, ast.arg, ast.expr_context, ast.unaryop, ast.operator, ast.boolop, ast.cmpop, _Probe,
)


def _chain_root(node: ast.expr) -> ast.expr:
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return node


def compile_assert(k: int, source: Any, names: dict[str, Any], probes: list[str]) -> CompiledAssert:
    """Split assert ``k`` into probes (appended to ``probes`` as source) and the tree judged
    here. Raises ValueError, naming the test, for anything the judge cannot evaluate safely."""
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

    def refuse(what: str) -> ValueError:
        return ValueError(f"assert {k}: {what}; the judge evaluates asserts outside the sandbox "
                          f"and cannot do this safely: {source!r:.200}")

    def split(node: ast.AST, local: frozenset[str]) -> ast.AST:
        if isinstance(node, ast.expr) and not isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            root = _chain_root(node)
            if isinstance(root, ast.Name) and root.id not in local and isinstance(names.get(root.id), SandboxImport):
                raise refuse(f"{root.id!r} is imported by the setup ({names[root.id].module}), so it runs beside the program, "
                             "which can patch it: write the expected value itself, or pass it into a call of the program")
            if isinstance(root, ast.Name) and root.id not in local and root.id not in names:
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
                     "`candidate = sum`, and call `candidate(...)`)")
    return CompiledAssert(tree=tree, source=source)


class _Interpreter:
    """Evaluates a compiled assert with trusted names, probe values and a step budget."""

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
        if self.steps > MAX_STEPS:
            raise JudgeError("too much work")
        if self.steps % 4096 == 0 and time.monotonic() > self.deadline:
            raise JudgeError("Timeout")
        return getattr(self, "do_" + type(node).__name__)(node, env)

    def do__Probe(self, node: _Probe, env: dict) -> Any:
        return self.probe(node.index)

    def do_Constant(self, node: ast.Constant, env: dict) -> Any:
        return node.value

    def do_Name(self, node: ast.Name, env: dict) -> Any:
        return env[node.id] if node.id in env else self.names[node.id]

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
        owner = self.run(node.value, env)
        if isinstance(owner, TrustedModule):
            return owner.members[node.attr]
        if node.attr in DATA_ATTRIBUTES.get(type(owner), ()):
            return getattr(owner, node.attr)
        raise JudgeError(f"attribute {node.attr!r} of {type(owner).__name__} is not available to the judge")

    def do_Call(self, node: ast.Call, env: dict) -> Any:
        method = isinstance(node.func, ast.Attribute) and not (
            isinstance(node.func.value, ast.Name) and node.func.value.id not in env and isinstance(self.names.get(node.func.value.id), TrustedModule))
        owner: Any = None
        if method:
            owner = self.run(node.func.value, env)
            if node.func.attr not in METHODS.get(type(owner), ()):
                raise JudgeError(f"method {node.func.attr!r} of {type(owner).__name__} is not available to the judge")
            fn = getattr(owner, node.func.attr)
        else:
            fn = self.run(node.func, env)
        args = self.items(node.args, env)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise JudgeError("** in a call is not supported")
            kwargs[kw.arg] = self.run(kw.value, env)
        if isinstance(fn, type):
            if fn not in CALLABLE_TYPES:
                raise JudgeError(f"{fn.__name__} is not callable by the judge")
            fn = SAFE_TYPES.get(fn, fn)
        elif not callable(fn):
            raise JudgeError(f"{type(fn).__name__} is not callable")
        if isinstance(node.func, ast.Attribute) and method:
            attr = node.func.attr
            if attr in CHECKED_ARGS and args and isinstance(args[0], int) and args[0] > MAX_LENGTH:
                raise JudgeError("width too large")
            if attr == "replace" and len(args) >= 2 and type(args[0]) is type(owner) and type(args[1]) is type(owner):
                count = owner.count(args[0]) if args[0] else len(owner) + 1
                if len(owner) + count * len(args[1]) > MAX_LENGTH:
                    raise JudgeError("replacement too large")
            if attr in SET_BUILDERS and isinstance(owner, (set, frozenset)):
                args = [materialised(a, "set argument") for a in args]
                check_hashes([*owner, *(x for a in args for x in a)], "set")
            if attr == "join" and args:
                args[0] = materialised(args[0], "join")
                if sum(size_of(x) for x in args[0]) + len(owner) * len(args[0]) > MAX_LENGTH:
                    raise JudgeError("join too large")
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
    return bool(_Interpreter(names, probe, deadline).run(compiled.tree, {}))
