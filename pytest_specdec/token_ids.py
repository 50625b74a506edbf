"""`TokenIds`: each prompt's output token ids of one test, held as one flat machine array.

Every greedy test's outputs stay in memory to the run's end, where the summary's losslessness
verdicts compare them. As tuples of Python ints a token takes a pointer and an int object (36
bytes past id 256); in a 32-bit array it takes 4, so a long matrix holds each test's ids at a
ninth of the cost. `Outputs` converts whatever sequences it is given (a server's tuples, a
journal's lists); readers see a sequence of tuples (None where the server sent no ids), made
prompt by prompt as they are read, so the comparison and its messages are as before.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

#: the narrowest item that holds every vocabulary's ids, and the one a larger id widens it to
NARROW, WIDE = "i", "q"


@dataclass(frozen=True, eq=False)
class TokenIds(Sequence["tuple[int, ...] | None"]):
    """Prompt i's ids are `flat[ends[i - 1]:ends[i]]` (from 0 for the first), None where i is
    `missing`: an equal-length run of ids needs no per-prompt object."""

    flat: array
    ends: array  # where each prompt's ids end in `flat`
    missing: frozenset[int] = frozenset()  # prompts the server sent no token ids for

    @classmethod
    def of(cls, tokens: Iterable[Iterable[int] | None]) -> TokenIds:
        """`tokens` (each prompt's ids, or None) held compactly; a ValueError names an id that no
        64-bit integer holds (no server's vocabulary has one)."""
        if isinstance(tokens, TokenIds):
            return tokens
        flat, ends, missing = array(NARROW), array(WIDE), set()
        for index, ids in enumerate(tokens):
            if ids is None:
                missing.add(index)
            else:
                flat = _extended(flat, ids, index)
            ends.append(len(flat))
        return cls(array(flat.typecode, flat), ends, frozenset(missing))  # the copy sheds extend's spare room

    def __len__(self) -> int:
        return len(self.ends)

    def _one(self, index: int) -> tuple[int, ...] | None:
        ids = self._slice(index)
        return None if ids is None else tuple(ids)

    def _slice(self, index: int) -> array | None:
        if index in self.missing:
            return None
        return self.flat[self.ends[index - 1] if index else 0:self.ends[index]]

    def arrays(self) -> Iterator[array | None]:
        """Each prompt's ids as an array (None where missing): compared and cut with no int
        object made for each id, as a tuple would."""
        return (self._slice(i) for i in range(len(self)))

    @overload
    def __getitem__(self, index: int) -> tuple[int, ...] | None: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[tuple[int, ...] | None, ...]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self._one(i) for i in range(*index.indices(len(self))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"prompt {index} of {len(self)}")
        return self._one(index)

    def __iter__(self) -> Iterator[tuple[int, ...] | None]:
        return (self._one(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TokenIds):
            return NotImplemented
        return self.ends == other.ends and self.missing == other.missing and self.flat == other.flat

    def __hash__(self) -> int:  # `of` gives equal ids one item type, so equal ones hash alike
        return hash((self.flat.typecode, self.flat.tobytes(), self.ends.tobytes(), self.missing))

    def to_json(self) -> list[list[int] | None]:
        return [None if ids is None else list(ids) for ids in self]


def _extended(flat: array, ids: Iterable[int], index: int) -> array:
    """`flat` with `ids` appended, widened to 64-bit items where an id needs them."""
    ids = ids if isinstance(ids, (tuple, list)) else tuple(ids)  # read twice where an id overflows
    start = len(flat)
    try:
        flat.extend(ids)
        return flat
    except OverflowError:
        del flat[start:]  # extend appended the ids before the large one
    wide = flat if flat.typecode == WIDE else array(WIDE, flat)
    try:
        wide.extend(ids)
    except OverflowError:
        big = next(i for i in ids if not -2 ** 63 <= i < 2 ** 63)
        raise ValueError(f"token id {big} of prompt {index + 1} does not fit in 64 bits: no vocabulary "
                         f"has such an id, so these output ids are damaged") from None
    return wide


__all__ = ["TokenIds"]
