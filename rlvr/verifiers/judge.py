"""The judge of ``python_code``'s assert tests: what runs in the sandbox, and what runs here.

An assert is split when the data is loaded. Each call into the program under test (a
*probe*: the longest chain of calls, attributes and subscripts that starts at a name the
program or the setup defines, such as ``f(x)``, ``Solution().solve(xs)[0]``) is sent to the
sandbox as source and comes back as plain data. Everything else in the assert, expected
values, arithmetic, tolerances, containers, boolean structure and reference functions
(``abs``, ``set``, ``sorted``, ``math.isclose``, ...), is evaluated here by a small
interpreter over the assert's syntax tree, with the real built-ins and bounded work. So the
program never sees an expected value and cannot shadow a function the test judges with.

What the interpreter does not support is refused when the data is loaded, with the test's
number and the construct (never evaluated in the sandbox instead): walrus, f-strings,
``%``-formatting, calls into the program that depend on a comprehension's variable, and
names of modules other than ``math``.

Results come back from the sandbox as a flat list of tokens (no nesting, so no recursion
when the line is decoded), rebuilt here with bounds on depth, size, integer width and hash
collisions: a forged result can fail its test but cannot raise, stall or flood the host.
"""

from __future__ import annotations

import ast
import builtins
import math
import operator
import time
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["CompiledAssert", "JudgeError", "ProbeFailed", "compile_assert", "decode_value", "evaluate", "host_names"]

MAX_NODES = 100_000  # tokens in one decoded value (the runner refuses larger values too)
MAX_DEPTH = 100
MAX_INT_BITS = 1 << 17  # ~39,000 decimal digits: any test's answer, never a stall
MAX_LENGTH = 1_000_000  # items or characters of anything the judge builds
MAX_STEPS = 250_000  # interpreter steps per assert (~0.3 s of CPU)
MAX_SAME_HASH = 32  # members of one set or dict sharing a hash (honest data: ~1)
MAX_PRODUCED = 2 * MAX_LENGTH  # logical size of all comprehensions and lambdas build, per assert


class JudgeError(Exception):
    """A verdict that cannot be reached safely: the test fails with this message."""


class ProbeFailed(JudgeError):
    """The call into the program raised, timed out or sent nothing usable back."""


# ------------------------------------------------------------------------ what is trusted


_SIZED = frozenset([str, bytes, list, tuple, set, frozenset, dict])


def _size_at_most(value: Any, limit: int) -> int:
    """The logical size of `value` (items of every nested container, strings by 16 characters),
    counted up to just past `limit`: the walk costs about that, aliasing or not. `[[0] * 1000]
    * 1000` is small in memory but a million to compare or print."""
    total, todo = 0, [value]
    while todo and total <= limit:
        item = todo.pop()
        kind = type(item)
        if kind is str or kind is bytes:
            total += 1 + len(item) // 16
            continue
        total += 1 + (2 * len(item) if kind is dict else len(item) if kind in _SIZED else 0)
        if total > limit or kind not in _SIZED:
            continue
        members = [*item.keys(), *item.values()] if kind is dict else item
        todo.extend(x for x in members if type(x) in _SIZED)  # scalars are counted by len() above
    return total


def _printable(fn: Callable[[Any], str]) -> Callable[[Any], str]:
    def bounded(value: Any = "") -> str:
        if _size_at_most(value, MAX_LENGTH // 16) > MAX_LENGTH // 16:
            raise JudgeError(f"{fn.__name__}() of a value too large")
        return fn(value)
    bounded.__name__ = fn.__name__
    return bounded


def _safe_type(*args: Any) -> type:
    if len(args) != 1:
        raise JudgeError("type() takes one argument in the judge (it builds no classes)")
    return type(args[0])


def _bounded_range(*args: int) -> range:
    r = range(*args)
    if len(r) > MAX_LENGTH:
        raise JudgeError(f"range of more than {MAX_LENGTH} items")
    return r


def _check_hashes(items: list, what: str) -> list:
    """Refuse members whose hashes collide en masse: building them would take quadratic time."""
    counts: dict[int, int] = {}
    for item in items:
        h = hash(item)
        counts[h] = counts.get(h, 0) + 1
        if counts[h] > MAX_SAME_HASH:
            raise JudgeError(f"{what} with more than {MAX_SAME_HASH} colliding hashes")
    return items


def _materialised(iterable: Any, what: str) -> list:
    items = []
    for item in iterable:
        items.append(item)
        if len(items) > MAX_LENGTH:
            raise JudgeError(f"{what} of more than {MAX_LENGTH} items")
    return items


def _safe_set(iterable: Any = ()) -> set:
    return set(_check_hashes(_materialised(iterable, "set"), "set"))


def _safe_frozenset(iterable: Any = ()) -> frozenset:
    return frozenset(_check_hashes(_materialised(iterable, "frozenset"), "frozenset"))


def _safe_dict(*args: Any, **kwargs: Any) -> dict:
    if len(args) > 1:
        raise JudgeError("dict() takes at most one positional argument")
    pairs = list(args[0].items()) if args and isinstance(args[0], dict) else _materialised(args[0] if args else (), "dict")
    pairs = [tuple(p) for p in pairs] + list(kwargs.items())
    if any(len(p) != 2 for p in pairs):
        raise JudgeError("dict() needs pairs")
    _check_hashes([k for k, _ in pairs], "dict")
    return dict(pairs)


def _safe_pow(base: Any, exp: Any, mod: Any = None) -> Any:
    if mod is None:
        return _power(base, exp)
    return pow(base, exp, mod)


def _safe_sum(iterable: Any, start: Any = 0) -> Any:
    if not isinstance(start, (int, float, complex)):
        raise JudgeError("sum() of sequences is not supported by the judge (quadratic)")
    total = start
    for item in iterable:
        total = _checked(total + item)
    return total


def _safe_round(number: Any, ndigits: Any = None) -> Any:
    if ndigits is not None and isinstance(ndigits, int) and abs(ndigits) > 1000:
        raise JudgeError("round() digits out of range")
    return round(number) if ndigits is None else round(number, ndigits)


def _safe_prod(iterable: Any, *, start: Any = 1) -> Any:
    total = start
    for item in iterable:
        total = _checked(_multiply(total, item))
    return total


def _safe_lcm(*integers: int) -> int:
    total = 1
    for n in integers:
        total = _checked(math.lcm(total, n))
    return total


def _safe_factorial(n: int) -> int:
    if not isinstance(n, int) or n > 20_000:
        raise JudgeError("factorial argument too large")
    return math.factorial(n)


def _safe_comb_perm(fn: Callable) -> Callable:
    def bounded(n: int, k: int | None = None) -> int:
        if not isinstance(n, int) or n > 20_000:
            raise JudgeError(f"{fn.__name__} argument too large")
        return fn(n) if k is None else fn(n, k)
    bounded.__name__ = fn.__name__
    return bounded


def _safe_bytes(*args: Any) -> bytes:
    if args and isinstance(args[0], int) and args[0] > MAX_LENGTH:
        raise JudgeError("bytes() too long")
    return bytes(*args)


_BUILTINS: dict[str, Any] = {
    name: getattr(builtins, name)
    for name in (
        "abs", "all", "any", "bool", "chr", "complex", "divmod", "enumerate", "filter", "float", "int",
        "isinstance", "len", "list", "map", "max", "min", "ord", "reversed", "sorted",
        "tuple", "zip", "hex", "oct", "bin", "callable",
    )
}
_BUILTINS.update(range=_bounded_range, set=_safe_set, frozenset=_safe_frozenset, dict=_safe_dict, pow=_safe_pow,
                 bytes=_safe_bytes, sum=_safe_sum, round=_safe_round, type=_safe_type,
                 str=_printable(str), repr=_printable(repr), ascii=_printable(ascii))
# Calling a type the data can carry (``type(x)(...)``) goes through the same bounded versions.
_SAFE_TYPES: dict[type, Callable] = {set: _safe_set, frozenset: _safe_frozenset, dict: _safe_dict, bytes: _safe_bytes,
                                     str: _BUILTINS["str"], type: _safe_type, range: _bounded_range}
_CALLABLE_TYPES = frozenset([type(None), *_SAFE_TYPES, *(v for v in _BUILTINS.values() if isinstance(v, type))])

_MATH_NAMES = (
    "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "copysign", "cos", "cosh", "degrees",
    "dist", "e", "erf", "erfc", "exp", "expm1", "fabs", "floor", "fmod", "frexp", "fsum", "gamma", "gcd",
    "hypot", "inf", "isclose", "isfinite", "isinf", "isnan", "isqrt", "lcm", "ldexp", "lgamma", "log",
    "log10", "log1p", "log2", "modf", "nan", "pi", "prod", "radians", "remainder", "sin", "sinh", "sqrt",
    "tan", "tanh", "tau", "trunc",
)
_MATH: dict[str, Any] = {name: getattr(math, name) for name in _MATH_NAMES if hasattr(math, name)}
_MATH.update(factorial=_safe_factorial, comb=_safe_comb_perm(math.comb), perm=_safe_comb_perm(math.perm),
             prod=_safe_prod, lcm=_safe_lcm)


class _Module:
    """A trusted module as the judge exposes it: only the listed attributes."""

    def __init__(self, name: str, members: dict[str, Any]) -> None:
        self.name, self.members = name, members


HOST_MODULES = {"math": _Module("math", _MATH)}

# Methods of plain data the judge may call: none mutates, each costs at most linear time
# in its receiver and arguments (``replace``, the padding methods are checked separately).
_STR_METHODS = frozenset(
    "capitalize casefold center count endswith find index isalnum isalpha isascii isdecimal isdigit "
    "isidentifier islower isnumeric isspace istitle isupper join ljust lower lstrip partition "
    "removeprefix removesuffix replace rfind rindex rjust rpartition rsplit rstrip split splitlines "
    "startswith strip swapcase title upper zfill encode".split()
)
_METHODS: dict[type, frozenset[str]] = {
    str: _STR_METHODS,
    bytes: frozenset("count decode endswith find hex index lower split startswith strip upper".split()),
    list: frozenset(["count", "index", "copy"]),
    tuple: frozenset(["count", "index"]),
    dict: frozenset(["get", "items", "keys", "values", "copy"]),
    set: frozenset("copy difference intersection isdisjoint issubset issuperset symmetric_difference union".split()),
    frozenset: frozenset("copy difference intersection isdisjoint issubset issuperset symmetric_difference union".split()),
    int: frozenset(["bit_length", "bit_count", "conjugate"]),
    float: frozenset(["is_integer", "conjugate", "hex"]),
    complex: frozenset(["conjugate"]),
}
_DATA_ATTRIBUTES = {int: frozenset(["real", "imag"]), float: frozenset(["real", "imag"]), complex: frozenset(["real", "imag"])}


def host_names(setup: str) -> dict[str, Any]:
    """The names an assert resolves here: the trusted built-ins, ``math``, and what the setup
    imports from ``math`` (``import math as m``, ``from math import isclose``). Every other name
    belongs to the program (or to helpers the setup defines, which run beside it)."""
    names: dict[str, Any] = {**_BUILTINS, **HOST_MODULES}
    try:
        tree = ast.parse(setup or "")
    except SyntaxError as err:
        raise ValueError(f"setup is not valid Python: {err.msg} (line {err.lineno})") from None
    defined: set[str] = set()
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
                    defined.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module in HOST_MODULES and node.level == 0:
            for alias in node.names:
                member = HOST_MODULES[node.module].members.get(alias.name)
                if member is None:
                    raise ValueError(f"setup imports {node.module}.{alias.name}, which the judge does not provide")
                names[alias.asname or alias.name] = member
        else:
            defined |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
    for name in defined:  # a name the setup rebinds is the setup's (it runs in the sandbox)
        names.pop(name, None)
    return names


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
    if len(body) != 1 or not isinstance(body[0], ast.Assert):
        raise ValueError(f"assert {k}: must be exactly one assert statement (put helpers in setup): {source!r:.200}")

    def refuse(what: str) -> ValueError:
        return ValueError(f"assert {k}: {what}; the judge evaluates asserts outside the sandbox "
                          f"and cannot do this safely: {source!r:.200}")

    def split(node: ast.AST, local: frozenset[str]) -> ast.AST:
        if isinstance(node, ast.expr) and not isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            root = _chain_root(node)
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
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and isinstance(names.get(node.value.id), _Module):
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
        if isinstance(node, ast.Name) and node.id not in local and node.id not in names:
            raise refuse(f"unknown name {node.id!r}")  # unreachable: program names become probes
        return node

    return CompiledAssert(tree=split(body[0].test, frozenset()), source=source)


# ----------------------------------------------------------------------- evaluating here


def _size_of(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)) else 1


def _power(base: Any, exp: Any) -> Any:
    if isinstance(base, int) and isinstance(exp, int) and exp > 0 and abs(base) > 1:
        if exp * base.bit_length() > MAX_INT_BITS:
            raise JudgeError("power too large")
    return base**exp


def _checked(value: Any) -> Any:
    if type(value) is int and value.bit_length() > MAX_INT_BITS:
        raise JudgeError("integer too large")
    if _size_of(value) > MAX_LENGTH:
        raise JudgeError("value too large")
    return value


def _repeat(seq: Any, n: Any) -> Any:
    if isinstance(n, int) and n > 0 and isinstance(seq, (str, bytes, list, tuple)):
        per_copy = _size_at_most(seq, MAX_LENGTH // n + 1) - 1  # the items, nested ones included
        if len(seq) * n > MAX_LENGTH or per_copy * n > MAX_LENGTH:
            raise JudgeError("repetition too large")
    return seq * n


def _multiply(a: Any, b: Any) -> Any:
    if isinstance(a, int) and not isinstance(b, int):
        return _repeat(b, a)
    if isinstance(b, int) and not isinstance(a, int):
        return _repeat(a, b)
    return a * b


def _shift_left(a: Any, b: Any) -> Any:
    if isinstance(b, int) and isinstance(a, int) and a and b + a.bit_length() > MAX_INT_BITS:
        raise JudgeError("shift too large")
    return a << b


def _modulo(a: Any, b: Any) -> Any:
    if isinstance(a, (str, bytes)):
        raise JudgeError("%-formatting is not supported by the judge")
    return a % b


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: _multiply, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: _modulo, ast.Pow: _power, ast.LShift: _shift_left,
    ast.RShift: operator.rshift, ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Invert: operator.invert, ast.Not: operator.not_}
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_CHECKED_ARGS = {"center", "ljust", "rjust", "zfill"}  # width arguments: bounded before the call


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
            size = _size_at_most(value, MAX_PRODUCED - self.produced)
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
                out.extend(_materialised(self.run(n.value, env), "unpacking"))
            else:
                out.append(self.run(n, env))
            if len(out) > MAX_LENGTH:
                raise JudgeError("too many items")
        return out

    def do_Tuple(self, node: ast.Tuple, env: dict) -> Any:
        return tuple(self.items(node.elts, env))

    def do_List(self, node: ast.List, env: dict) -> Any:
        return self.items(node.elts, env)

    def do_Set(self, node: ast.Set, env: dict) -> Any:
        return _safe_set(self.items(node.elts, env))

    def do_Dict(self, node: ast.Dict, env: dict) -> Any:
        pairs = []
        for key, value in zip(node.keys, node.values):
            if key is None:
                raise JudgeError("** in a dict display is not supported")
            pairs.append((self.run(key, env), self.run(value, env)))
        return _safe_dict(pairs)

    def do_UnaryOp(self, node: ast.UnaryOp, env: dict) -> Any:
        return _UNARY[type(node.op)](self.run(node.operand, env))

    def do_BinOp(self, node: ast.BinOp, env: dict) -> Any:
        return _checked(_BINARY[type(node.op)](self.run(node.left, env), self.run(node.right, env)))

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
            if not _COMPARE[type(op)](left, right):
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
        if isinstance(owner, _Module):
            return owner.members[node.attr]
        if node.attr in _DATA_ATTRIBUTES.get(type(owner), ()):
            return getattr(owner, node.attr)
        raise JudgeError(f"attribute {node.attr!r} of {type(owner).__name__} is not available to the judge")

    def do_Call(self, node: ast.Call, env: dict) -> Any:
        method = isinstance(node.func, ast.Attribute) and not (
            isinstance(node.func.value, ast.Name) and node.func.value.id not in env and isinstance(self.names.get(node.func.value.id), _Module))
        owner: Any = None
        if method:
            owner = self.run(node.func.value, env)
            if node.func.attr not in _METHODS.get(type(owner), ()):
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
            if fn not in _CALLABLE_TYPES:
                raise JudgeError(f"{fn.__name__} is not callable by the judge")
            fn = _SAFE_TYPES.get(fn, fn)
        elif not callable(fn):
            raise JudgeError(f"{type(fn).__name__} is not callable")
        if isinstance(node.func, ast.Attribute) and method:
            attr = node.func.attr
            if attr in _CHECKED_ARGS and args and isinstance(args[0], int) and args[0] > MAX_LENGTH:
                raise JudgeError("width too large")
            if attr == "replace" and len(args) >= 2 and type(args[0]) is type(owner) and type(args[1]) is type(owner):
                count = owner.count(args[0]) if args[0] else len(owner) + 1
                if len(owner) + count * len(args[1]) > MAX_LENGTH:
                    raise JudgeError("replacement too large")
            if attr == "join" and args:
                args[0] = _materialised(args[0], "join")
                if sum(_size_of(x) for x in args[0]) + len(owner) * len(args[0]) > MAX_LENGTH:
                    raise JudgeError("join too large")
        return _checked(fn(*args, **kwargs))

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
        values = _materialised(value, "unpacking")
        if len(values) != len(target.elts):  # type: ignore[attr-defined]
            raise ValueError("cannot unpack")
        for t, v in zip(target.elts, values):  # type: ignore[attr-defined]
            self.bind(t, v, env)

    def do_GeneratorExp(self, node: ast.GeneratorExp, env: dict) -> Any:
        return (self.charge(self.run(node.elt, inner)) for inner in self.bindings(node.generators, env))

    def do_ListComp(self, node: ast.ListComp, env: dict) -> Any:
        return _materialised(self.do_GeneratorExp(node, env), "list")  # type: ignore[arg-type]

    def do_SetComp(self, node: ast.SetComp, env: dict) -> Any:
        return _safe_set(self.do_GeneratorExp(node, env))  # type: ignore[arg-type]

    def do_DictComp(self, node: ast.DictComp, env: dict) -> Any:
        pairs = (self.charge((self.run(node.key, inner), self.run(node.value, inner))) for inner in self.bindings(node.generators, env))
        return _safe_dict(pairs)


def evaluate(compiled: CompiledAssert, names: dict[str, Any], probe: Callable[[int], Any], deadline: float) -> bool:
    """The assert's verdict. Raises JudgeError (or whatever the evaluation raises, as Python
    would: a TypeError comparing ``str`` with ``int`` is a failed test) when it does not pass."""
    return bool(_Interpreter(names, probe, deadline).run(compiled.tree, {}))


# ------------------------------------------------------------------ decoding sandbox results

_CONTAINERS: dict[str, type] = {"l": list, "t": tuple, "S": set, "z": frozenset, "d": dict}


def decode_value(tokens: Any) -> Any:
    """Rebuild a value from the runner's flat tokens, strictly; raises JudgeError on anything
    malformed, too deep, too large or built to be slow (colliding hashes)."""
    if not isinstance(tokens, list) or not tokens or len(tokens) > 3 * MAX_NODES:
        raise JudgeError("malformed value")
    pos = 0

    def take() -> Any:
        nonlocal pos
        if pos >= len(tokens):
            raise JudgeError("malformed value")
        pos += 1
        return tokens[pos - 1]

    def text() -> str:
        value = take()
        if type(value) is not str:
            raise JudgeError("malformed value")
        return value

    # An explicit stack of [kind, expected count, items]: no recursion, whatever the depth.
    stack: list[list] = []
    nodes = work = 0
    result: Any = None
    while True:
        nodes += 1
        if nodes > MAX_NODES:
            raise JudgeError("value too large")
        tag = text()
        try:
            if tag == "N":
                value: Any = None
            elif tag in ("T", "F"):
                value = tag == "T"
            elif tag == "i":
                digits = text()
                if len(digits) > MAX_INT_BITS // 4 + 2:
                    raise JudgeError("integer too large")
                value = int(digits, 16)
            elif tag == "f":
                value = float.fromhex(text())
            elif tag == "c":
                value = complex(float.fromhex(text()), float.fromhex(text()))
            elif tag == "s":
                value = text()
            elif tag == "b":
                value = bytes.fromhex(text())
            elif tag in _CONTAINERS:
                count = take()
                if type(count) is not int or not 0 <= count <= MAX_NODES:
                    raise JudgeError("malformed value")
                if len(stack) >= MAX_DEPTH:
                    raise JudgeError("value too deep")
                stack.append([tag, count * (2 if tag == "d" else 1), [], nodes])
                value = _EMPTY
            else:
                raise JudgeError("malformed value")
        except (ValueError, OverflowError):
            raise JudgeError("malformed value") from None
        while True:  # close every container this value completes
            if value is not _EMPTY:
                if not stack:
                    result = value
                    break
                stack[-1][2].append(value)
            if not stack or len(stack[-1][2]) < stack[-1][1]:
                break
            kind, _, items, opened = stack.pop()
            if kind in "Sdz":  # hashing the members walks their subtrees again: charged
                work += nodes - opened
                if work > 4 * MAX_NODES:
                    raise JudgeError("value too costly to rebuild")
            value = _build(kind, items)
        if not stack and value is not _EMPTY:
            if pos != len(tokens):
                raise JudgeError("malformed value")
            return result


_EMPTY = object()


def _build(kind: str, items: list) -> Any:
    try:
        if kind == "l":
            return items
        if kind == "t":
            return tuple(items)
        if kind == "d":
            keys = items[0::2]
            return dict(zip(_check_hashes(keys, "dict"), items[1::2]))
        return _CONTAINERS[kind](_check_hashes(items, "set"))
    except TypeError:  # an unhashable member: a forged line
        raise JudgeError("malformed value") from None
