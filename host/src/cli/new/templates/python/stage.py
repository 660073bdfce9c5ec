"""{{name}}: keeps JSON messages whose `field` equals `equals`, tags them with a header, drops
the others and rejects values that are not JSON objects. Edit freely: `weir test` shows what
each message becomes. The SDK (`import weir`) documents every function used here."""

import json

import weir


def setup(config: dict[str, str]) -> tuple[str, str]:
    """Reads the config; an exception here stops the pipeline at start-up, naming the stage."""
    for key in ("field", "equals"):
        if key not in config:
            raise ValueError(f"missing config key `{key}`")
    return config["field"], config["equals"]


@weir.stage(init=setup)
def process(msg: weir.Message, settings: tuple[str, str]) -> weir.Outcome:
    """Decides one message."""
    field, equals = settings
    try:
        doc = json.loads(msg.value or b"")
    except ValueError:
        return weir.reject("value is not JSON")
    if not isinstance(doc, dict):
        return weir.reject("value is not a JSON object")
    if doc.get(field) != equals:
        return weir.drop()
    return weir.header(weir.replace(msg), "{{name}}", "matched")
