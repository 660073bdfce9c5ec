"""The cross-language example stage in Python (the same job as plugins/orders-{rust,c,js}; see
docs/languages/README.md): parse the value as JSON, keep objects whose top-level `field` is the
string `equals`, add the string field `tag` = `tag_value`, drop the others, and reject input
that has no value, is not JSON, or is not a JSON object."""

import json

import weir

KEYS = ("field", "equals", "tag", "tag_value")


def setup(config: dict[str, str]) -> dict[str, str]:
    for key in KEYS:
        if key not in config:
            raise ValueError(f"missing config key `{key}`")
    return {key: config[key] for key in KEYS}


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")  # Python accepts NaN/Infinity; JSON does not


# Made once: `json.loads`/`json.dumps` with options build a new decoder/encoder on every call.
_DECODE = json.JSONDecoder(parse_constant=_no_constants).decode
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


@weir.stage(init=setup)
def orders(msg: weir.Message, cfg: dict[str, str]) -> weir.Outcome:
    if msg.value is None:
        return weir.reject("no value")
    try:
        doc = _DECODE(msg.value.decode("utf-8"))
    except ValueError:  # also UnicodeDecodeError
        return weir.reject("malformed JSON")
    if not isinstance(doc, dict):
        return weir.reject("not a JSON object")
    if doc.get(cfg["field"]) != cfg["equals"]:
        return weir.drop()
    doc[cfg["tag"]] = cfg["tag_value"]
    return weir.replace(msg, value=_ENCODE(doc))
