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
``stage-fast`` world over that function (and the packed ``batch`` export: one call per batch): ``init`` hands it the YAML ``config`` as a ``dict``,
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

import inspect
import struct
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
    "message", "replace", "header", "log", "config_value", "require_config", "Stage", "Batch",
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
    # Built directly: ``dataclasses.replace`` looks the fields up again on every call.
    unknown = changes.keys() - _MESSAGE_FIELDS
    if unknown:
        raise TypeError(f"a message has no field {sorted(unknown)[0]}")
    key = _bytes(changes["key"]) if "key" in changes else msg.key
    value = _bytes(changes["value"]) if "value" in changes else msg.value
    if "headers" in changes:
        headers = [h if isinstance(h, Header) else Header(h[0], _bytes(h[1]))
                   for h in changes["headers"]]
    else:
        headers = list(msg.headers)
    return Message(key, value, headers,
                   changes["timestamp"] if "timestamp" in changes else msg.timestamp,
                   changes["topic"] if "topic" in changes else msg.topic)


_MESSAGE_FIELDS = frozenset(("key", "value", "headers", "timestamp", "topic"))


def header(msg: Message, key: str, value=None) -> Message:
    """Appends a header to ``msg`` (in place) and returns it."""
    msg.headers.append(Header(key, _bytes(value)))
    return msg


_LEVELS = {name: getattr(_log.Level, name.upper())
           for name in ("trace", "debug", "info", "warn", "error")}


def log(level: str, text: str) -> None:
    """Logs into the host's logs, tagged with the stage's name (``level``: trace … error)."""
    _log.log(_LEVELS[level], str(text))


def config_value(config: dict[str, str], key: str, default: Optional[str] = None) -> Optional[str]:
    """The value of ``key`` in the stage's ``config``, or ``default`` when it is missing or empty
    (``--config word=`` and ``word: ""`` in the YAML give an empty string)::

        def setup(config):
            return weir.config_value(config, "prefix", "eu-")
    """
    value = config.get(key)
    return default if value is None or value == "" else value


def require_config(config: dict[str, str], key: str) -> str:
    """The value of ``key`` in the stage's ``config``; raises ``ValueError`` naming the key when it
    is missing or empty (the error stops start-up, naming the stage)::

        def setup(config):
            return weir.require_config(config, "field")
    """
    value = config.get(key)
    if value is None:
        raise ValueError(f"missing config key `{key}`")
    if value == "":
        raise ValueError(f"config key `{key}` is empty")
    return value


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
        _registered["call"] = _call()

    def process(self, msg: Message, meta: Metadata) -> Outcome:
        return _outcome(_registered["call"](msg, meta))


# ---------------------------------------------------------------------------------------------
# The packed fast path (``weir:stage/batch``): one call per batch instead of one per message.
# The generated entry module exports ``Batch`` next to ``Stage``, so a stage function runs on
# either path with the same answers. The format is the one documented in the contract
# (wit/weir.wit, interface ``batch``).

_MAGIC = 0x5745_4952
_ABSENT = 0xFFFF_FFFF
_NO_TIMESTAMP = -(1 << 63)
_BATCH_HEAD = struct.Struct("<IIII")
_PARTITION = struct.Struct("<i")
_INPUT = struct.Struct("<qqIII")
_PAIR = struct.Struct("<II")
_OUTPUT = struct.Struct("<qIIII")
_U32 = struct.Struct("<I")
_ONE = _U32.pack(1)


def _decode(data: bytes, with_meta: bool):
    """The packed input batch as ``(message, metadata)`` pairs, the typed path's shapes (the
    metadata ``None`` unless the stage function takes it: one object less per message)."""
    magic, version, count, topic_len = _BATCH_HEAD.unpack_from(data, 0)
    if magic != _MAGIC or version != 1:
        raise ValueError("weir: not a version-1 packed batch")
    topic = data[16:16 + topic_len].decode()
    (partition,) = _PARTITION.unpack_from(data, 16 + topic_len)
    p = 20 + topic_len
    for _ in range(count):
        offset, ts, key_len, value_len, header_count = _INPUT.unpack_from(data, p)
        p += 28
        if key_len == _ABSENT:
            key = None
        else:
            key = data[p:p + key_len]
            p += key_len
        if value_len == _ABSENT:
            value = None
        else:
            value = data[p:p + value_len]
            p += value_len
        headers = []
        for _ in range(header_count):
            hk, hv = _PAIR.unpack_from(data, p)
            p += 8
            name = data[p:p + hk].decode()
            p += hk
            if hv == _ABSENT:
                headers.append(Header(name, None))
            else:
                headers.append(Header(name, data[p:p + hv]))
                p += hv
        yield (Message(key, value, headers, None if ts == _NO_TIMESTAMP else ts, None),
               Metadata(topic, partition, offset) if with_meta else None)


def _checked_bytes(v: Any, what: str) -> Optional[bytes]:
    if v is None or isinstance(v, (bytes, bytearray)):
        return v
    raise TypeError(f"a message's {what} must be bytes or None (see weir.message), "
                    f"not {type(v).__name__}")


def _encode_message(out: bytearray, m: Any) -> None:
    if not isinstance(m, Message):
        raise TypeError(f"`next` takes messages, not {type(m).__name__}")
    key = _checked_bytes(m.key, "key")
    value = _checked_bytes(m.value, "value")
    topic = None if m.topic is None else m.topic.encode()
    ts = _NO_TIMESTAMP if m.timestamp is None else m.timestamp
    out += _OUTPUT.pack(ts, _ABSENT if topic is None else len(topic),
                        _ABSENT if key is None else len(key),
                        _ABSENT if value is None else len(value), len(m.headers))
    if topic is not None:
        out += topic
    if key is not None:
        out += key
    if value is not None:
        out += value
    for h in m.headers:
        name = h.key.encode()
        hv = _checked_bytes(h.value, "header value")
        out += _PAIR.pack(len(name), _ABSENT if hv is None else len(hv))
        out += name
        if hv is not None:
            out += hv


def _call() -> Callable[[Message, Metadata], Any]:
    """The registered function with the arguments it takes, bound once."""
    f = _registered["process"]
    with_state = _registered["init"] is not None
    state = _registered.get("state")
    if _registered["meta"]:
        return (lambda msg, meta: f(msg, state, meta)) if with_state else f
    return (lambda msg, meta: f(msg, state)) if with_state else (lambda msg, meta: f(msg))


class Batch:
    """The component's ``weir:stage/batch`` export (used by the generated entry module): each
    message of the packed batch goes through the same function as on the typed path; answers
    are packed in order, stopping after the first ``fail``."""

    def process_batch(self, input: bytes) -> bytes:  # noqa: A002 - the contract's name
        call = _registered["call"]
        verdicts = bytearray()
        body = bytearray()
        for msg, meta in _decode(input, _registered["meta"]):
            r = call(msg, meta)
            # The two commonest answers without making an Outcome first.
            if r is _KEEP or r is True:
                verdicts.append(0)
                continue
            if isinstance(r, Message):
                verdicts.append(1)
                body += _ONE
                _encode_message(body, r)
                continue
            o = _outcome(r)
            if isinstance(o, _types.Outcome_Keep):
                verdicts.append(0)
            elif isinstance(o, _types.Outcome_Next):
                verdicts.append(1)
                body += _U32.pack(len(o.value))
                for m in o.value:
                    _encode_message(body, m)
            else:
                reason = str(o.value).encode()
                verdicts.append(2 if isinstance(o, _types.Outcome_Reject) else 3)
                body += _U32.pack(len(reason))
                body += reason
                if isinstance(o, _types.Outcome_Fail):
                    break
        return bytes(_U32.pack(len(verdicts)) + verdicts + body)
