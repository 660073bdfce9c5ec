"""Durable per-key state: the buckets a stage declares under ``state`` in the pipeline YAML.

A bucket belongs to the stage and to the source partition of the message being processed: the
messages of one key meet their state in one place, and it moves with the partition. A message
sees the writes of every message before it. Its writes are kept only when its outcome is
delivered (``reject`` included); a message that fails, traps or times out leaves none. Under
``delivery: exactly-once`` state, outputs and committed offsets move together (docs/state.md)::

    import weir
    from weir import state

    @weir.stage
    def first_only(msg: weir.Message) -> weir.Outcome:
        seen = state.bucket("seen")          # declared: `state: { buckets: [seen] }`
        key = msg.key.decode()
        if seen.exists(key):
            return weir.drop()
        seen.set(key, b"")
        return weir.keep()

This is the host's ``wasi:keyvalue@0.2.0-draft2`` (store, atomics, batch) with Python types.
Every call raises :class:`StateError` when the host answers an error: ``access-denied`` for a
bucket the YAML does not declare, ``other`` for a value over ``state.max_value`` or a store
error. State is open only while a message is processed (not in ``init``).
"""

from __future__ import annotations

import struct
from typing import Iterable, Iterator, Mapping, Optional, Union

from componentize_py_types import Err
from wit_world.imports import atomics as _atomics
from wit_world.imports import batch as _batch
from wit_world.imports import store as _store

__all__ = ["StateError", "Bucket", "bucket"]

_I64 = struct.Struct("<q")
Value = Union[bytes, bytearray, memoryview, str]


class StateError(Exception):
    """What a state call answered instead of a value. ``kind`` is ``"no-such-store"``,
    ``"access-denied"`` or ``"other"``."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _error(e: Err) -> StateError:
    v = e.value
    if isinstance(v, _store.Error_AccessDenied):
        return StateError("access-denied",
                          "bucket not declared for this stage (state.buckets in the YAML)")
    if isinstance(v, _store.Error_NoSuchStore):
        return StateError("no-such-store", "no such bucket")
    return StateError("other", str(getattr(v, "value", v)))


def _value(v: Value) -> bytes:
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise TypeError(f"a state value is bytes or str, not {type(v).__name__}")


def _int(key: str, v: Optional[bytes]) -> Optional[int]:
    if v is None:
        return None
    if len(v) != 8:
        raise StateError("other", f"key {key!r} holds {len(v)} bytes, not a number")
    return _I64.unpack(v)[0]


class Bucket:
    """One of the stage's buckets (get one with :func:`bucket`)."""

    __slots__ = ("name", "_b")

    def __init__(self, name: str, handle: _store.Bucket):
        self.name = name
        self._b = handle

    def get(self, key: str) -> Optional[bytes]:
        """The value of ``key``; ``None`` when it has none."""
        try:
            return self._b.get(key)
        except Err as e:
            raise _error(e) from None

    def get_int(self, key: str) -> Optional[int]:
        """The value of ``key`` as a number written by :meth:`increment` or :meth:`set_int`
        (8 little-endian bytes); ``None`` when it has none."""
        return _int(key, self.get(key))

    def set(self, key: str, value: Value) -> None:
        """Sets ``key`` (a ``str`` value is stored as UTF-8)."""
        try:
            self._b.set(key, _value(value))
        except Err as e:
            raise _error(e) from None

    def set_int(self, key: str, value: int) -> None:
        """Sets ``key`` to a signed 64-bit number (as :meth:`increment` stores it)."""
        self.set(key, _I64.pack(value))

    def delete(self, key: str) -> None:
        """Removes ``key`` (a tombstone in the changelog)."""
        try:
            self._b.delete(key)
        except Err as e:
            raise _error(e) from None

    def exists(self, key: str) -> bool:
        """Whether ``key`` has a value."""
        try:
            return self._b.exists(key)
        except Err as e:
            raise _error(e) from None

    def increment(self, key: str, delta: int = 1) -> int:
        """Adds ``delta`` to the number at ``key`` (absent: 0) and returns the sum (signed 64-bit,
        wrapping)."""
        try:
            return _atomics.increment(self._b, key, delta)
        except Err as e:
            raise _error(e) from None

    def get_many(self, keys: Iterable[str]) -> dict[str, Optional[bytes]]:
        """The values of ``keys`` in one host call (``None`` for a key without one)."""
        try:
            return dict(_batch.get_many(self._b, list(keys)))
        except Err as e:
            raise _error(e) from None

    def set_many(self, items: Union[Mapping[str, Value], Iterable[tuple[str, Value]]]) -> None:
        """Sets many keys in one host call, in order."""
        pairs = items.items() if isinstance(items, Mapping) else items
        try:
            _batch.set_many(self._b, [(k, _value(v)) for k, v in pairs])
        except Err as e:
            raise _error(e) from None

    def delete_many(self, keys: Iterable[str]) -> None:
        """Removes many keys in one host call."""
        try:
            _batch.delete_many(self._b, list(keys))
        except Err as e:
            raise _error(e) from None

    def keys(self) -> Iterator[str]:
        """Every key of the bucket in this partition, in order, a page per host call."""
        cursor: Optional[str] = None
        while True:
            try:
                page = self._b.list_keys(cursor)
            except Err as e:
                raise _error(e) from None
            yield from page.keys
            cursor = page.cursor
            if cursor is None:
                return


_open: dict[str, Bucket] = {}


def bucket(name: str) -> Bucket:
    """The bucket ``name`` (declared under the stage's ``state.buckets``), opened once per
    instance."""
    b = _open.get(name)
    if b is None:
        try:
            b = Bucket(name, _store.open(name))
        except Err as e:
            raise _error(e) from None
        _open[name] = b
    return b
