"""Write a Weir stage in Python.

A stage is one function over a message::

    import json
    import weir

    def setup(config: dict[str, str]):
        return config["field"]          # any state; an exception stops start-up, naming the stage

    @weir.stage(init=setup)
    def process(msg: weir.Message, field) -> weir.Outcome:
        doc = json.loads(msg.value)
        return weir.keep() if field in doc else weir.drop()

Build it with ``sdk/python/weir-build-python stage.py -o stage.wasm`` (componentize-py; see
docs/languages/python.md). The SDK implements the typed ``weir:stage/stage`` export of the
``stage-typed`` world over that function: ``init`` hands it the YAML ``config`` as a ``dict``,
each message arrives as a :class:`Message` (key, value, headers, timestamp; the source topic,
partition and offset are in ``weir.Metadata``, passed as a third argument when the function takes
one). An exception raised by the function traps the instance: the host applies the stage's
``on_trap`` policy and keeps its delivery promise.

What ``process`` may return:

* ``weir.keep()`` or ``True``            -- the input continues unchanged (cheapest),
* ``weir.drop()`` or ``False``           -- filtered out,
* ``weir.next(m, ...)``, a ``Message`` or a list of them -- these continue instead,
* ``weir.reject(reason)``                -- to the reject path / dead-letter queue,
* ``weir.fail(reason)``                  -- the pipeline stops without committing past it.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Iterable, Optional, Union

from componentize_py_types import Err
from wit_world.imports import log as _log
from wit_world.imports import types as _types

Message = _types.Message
Header = _types.Header
Metadata = _types.Metadata
Outcome = _types.Outcome

__all__ = [
    "Message", "Header", "Metadata", "Outcome", "stage", "keep", "drop", "next", "reject", "fail",
    "message", "replace", "header", "log", "Stage",
]

_KEEP = _types.Outcome_Keep()


def keep() -> Outcome:
    """The input continues unchanged."""
    return _KEEP


def drop() -> Outcome:
    """The input is filtered out."""
    return _types.Outcome_Next([])


def next(*messages: Message) -> Outcome:  # noqa: A001 - `weir.next` mirrors the contract
    """These messages continue instead of the input."""
    return _types.Outcome_Next(list(messages))


def reject(reason: str) -> Outcome:
    """The input goes to the reject path with this reason."""
    return _types.Outcome_Reject(str(reason))


def fail(reason: str) -> Outcome:
    """The pipeline stops with this reason; nothing at or after this message is committed."""
    return _types.Outcome_Fail(str(reason))


def _bytes(v: Union[bytes, bytearray, str, None]) -> Optional[bytes]:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


def message(value=None, key=None, headers: Iterable = (), timestamp: Optional[int] = None,
            topic: Optional[str] = None) -> Message:
    """A new message. ``str`` keys/values are UTF-8 encoded; ``headers`` are ``(key, value)``
    pairs; ``topic`` routes it (``None``: the sink's topic)."""
    return Message(_bytes(key), _bytes(value), [Header(k, _bytes(v)) for k, v in headers],
                   timestamp, topic)


def replace(msg: Message, **changes: Any) -> Message:
    """A copy of ``msg`` with some fields changed (``value="..."`` etc.; headers are copied)."""
    for name in ("key", "value"):
        if name in changes:
            changes[name] = _bytes(changes[name])
    if "headers" in changes:
        changes["headers"] = [h if isinstance(h, Header) else Header(h[0], _bytes(h[1]))
                              for h in changes["headers"]]
    else:
        changes["headers"] = list(msg.headers)
    return dataclasses.replace(msg, **changes)


def header(msg: Message, key: str, value=None) -> Message:
    """Appends a header to ``msg`` (in place) and returns it."""
    msg.headers.append(Header(key, _bytes(value)))
    return msg


_LEVELS = {name: getattr(_log.Level, name.upper())
           for name in ("trace", "debug", "info", "warn", "error")}


def log(level: str, text: str) -> None:
    """Logs into the host's logs, tagged with the stage's name (``level``: trace … error)."""
    _log.log(_LEVELS[level], str(text))


_registered: dict[str, Any] = {}


def stage(func: Optional[Callable] = None, *, init: Optional[Callable] = None):
    """Registers the stage function (one per component). With ``init``, ``init(config)`` runs
    once per instance and its result is passed to the function as the second argument."""

    def register(f: Callable) -> Callable:
        if "process" in _registered:
            raise RuntimeError("weir.stage registered twice: a component has one stage function")
        params = len(inspect.signature(f).parameters)
        want = 1 + (init is not None)
        if params not in (want, want + 1):
            raise TypeError(
                f"{f.__name__} takes {params} arguments; expected (msg{', state' if init else ''}"
                f"[, meta])")
        _registered.update(process=f, init=init, meta=params == want + 1)
        return f

    return register(func) if func is not None else register


def _outcome(value: Any) -> Outcome:
    if isinstance(value, (_types.Outcome_Keep, _types.Outcome_Next, _types.Outcome_Reject,
                          _types.Outcome_Fail)):
        return value
    if value is True:
        return _KEEP
    if value is False:
        return drop()
    if isinstance(value, Message):
        return _types.Outcome_Next([value])
    if isinstance(value, list) and all(isinstance(m, Message) for m in value):
        return _types.Outcome_Next(value)
    return fail(f"the stage function returned {type(value).__name__}, not an outcome")


class Stage:
    """The component's ``weir:stage/stage`` export (used by the generated entry module).
    componentize-py may make a new ``Stage`` for every call, so the state lives in the module."""

    def init(self, config: list[tuple[str, str]]) -> None:
        if "process" not in _registered:
            raise Err("no stage function: decorate one with @weir.stage")
        init = _registered["init"]
        if init is not None:
            try:
                _registered["state"] = init(dict(config))
            except Exception as e:  # the reason reaches the operator, naming the stage
                raise Err(f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else str(e))

    def process(self, msg: Message, meta: Metadata) -> Outcome:
        f = _registered["process"]
        args = [msg]
        if _registered["init"] is not None:
            args.append(_registered["state"])
        if _registered["meta"]:
            args.append(meta)
        return _outcome(f(*args))
