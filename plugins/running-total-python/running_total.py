"""A running total per key in Python (the same job as plugins/running-total, in Rust, and
plugins/running-total-{c,js}): each message's value is a JSON object with an integer field
(config `field`, default `amount`); the stage adds it to its key's total in the state bucket
`totals` and emits the message with the field `total` set to the new total. A message without a
key (or a key that is not UTF-8), or whose field is not an integer, is rejected and counts
nothing.

Pipeline YAML: `state: { buckets: [totals] }`.
"""

import json

import weir
from weir import state


def setup(config: dict[str, str]) -> str:
    return config.get("field", "amount")


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")  # Python accepts NaN/Infinity; JSON does not


_DECODE = json.JSONDecoder(parse_constant=_no_constants).decode
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_I64 = range(-(1 << 63), 1 << 63)


@weir.stage(init=setup)
def running_total(msg: weir.Message, field: str) -> weir.Outcome:
    try:
        key = msg.key.decode("utf-8") if msg.key is not None else None
    except UnicodeDecodeError:
        key = None
    if key is None:
        return weir.reject("no key (or a key that is not UTF-8)")
    try:
        doc = _DECODE((msg.value or b"").decode("utf-8"))
    except ValueError as e:  # also UnicodeDecodeError
        return weir.reject(f"malformed JSON: {e}")
    if not isinstance(doc, dict):
        return weir.reject("not a JSON object")
    amount = doc.get(field)
    # bool is an int in Python; JSON's true is not a number.
    if type(amount) is not int or amount not in _I64:
        return weir.reject(f"field `{field}` is not an integer")
    try:
        total = state.bucket("totals").increment(key, amount)
    except state.StateError as e:  # the store is not usable: stop rather than emit a wrong total
        return weir.fail(f"state: {e}")
    doc["total"] = total
    return weir.replace(msg, value=_ENCODE(doc))
