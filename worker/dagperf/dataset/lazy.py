"""A sequence whose items are built when they are read, never kept: a run holds what it runs,
not the whole dataset built at once."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TypeVar, overload

T = TypeVar("T")


class BuiltOnRead(Sequence[T]):
    """Subclasses say how many items there are and how to build one."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def _build(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...
    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if isinstance(index, slice):
            return [self._build(i) for i in range(*index.indices(len(self)))]
        return self._build(index)
