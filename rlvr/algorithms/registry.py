"""Named choices of one setting: the config's allowed values and the functions behind them.

Every choice an algorithm setting offers (`algo.surrogate`, `algo.aggregation`, ...) is written
once, where its function is registered; the config accepts exactly the registered names, and
`rlvr config` lists them with the first line of each function's docstring.

>>> SCALES = Registry("algo.example")
>>> @SCALES.register("double")
... def double(x):
...     '''Twice x.'''
...     return 2 * x
>>> SCALES.lookup("double")(3), list(SCALES)
(6, ['double'])
>>> SCALES.lookup("triple")
Traceback (most recent call last):
...
ValueError: algo.example must be one of ['double'], got 'triple'
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """name -> function, in registration order, for the setting named `setting`."""

    def __init__(self, setting: str) -> None:
        self.setting = setting
        self._items: dict[str, T] = {}
        self._traits: dict[str, dict[str, Any]] = {}

    def register(self, name: str, **traits: Any) -> Callable[[T], T]:
        """Decorator: make `fn` selectable as `name`; `traits` are facts the shared code asks
        about (e.g. whether a surrogate supports the dual clip)."""

        def add(fn: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.setting}: {name!r} is already registered")
            self._items[name] = fn
            self._traits[name] = traits
            return fn

        return add

    def lookup(self, name: str) -> T:
        """The function registered as `name`; an unknown name raises naming the setting and the choices."""
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise ValueError(f"{self.setting} must be one of {list(self._items)}, got {name!r}") from None

    def trait(self, name: str, trait: str, default: Any = None) -> Any:
        self.lookup(name)
        return self._traits[name].get(trait, default)

    def describe(self) -> str:
        """'name: first docstring line; ...' for help texts."""
        return "; ".join(f"{name}: {_summary(fn)}" for name, fn in self._items.items())

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.setting!r}: {list(self._items)})"


def _summary(fn: Any) -> str:
    doc = (getattr(fn, "__doc__", None) or "").strip()
    return doc.splitlines()[0].rstrip(".") if doc else ""
