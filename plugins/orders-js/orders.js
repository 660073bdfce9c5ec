// The cross-language example stage in JavaScript (the same job as plugins/orders-{rust,c,python};
// see docs/languages/README.md): parse the value as JSON, keep objects whose top-level `field` is
// the string `equals`, add the string field `tag` = `tag_value`, drop the others, and reject
// input that has no value, is not JSON, or is not a JSON object.
import * as weir from "weir";

const KEYS = ["field", "equals", "tag", "tag_value"];

function setup(config) {
  for (const key of KEYS) {
    if (!(key in config)) throw new Error(`missing config key \`${key}\``);
  }
  return config;
}

function orders(msg, cfg) {
  if (msg.value === undefined) return weir.reject("no value");
  let doc;
  try {
    doc = JSON.parse(weir.text(msg.value)); // weir.text throws on invalid UTF-8
  } catch {
    return weir.reject("malformed JSON");
  }
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
    return weir.reject("not a JSON object");
  }
  if (!Object.hasOwn(doc, cfg.field) || doc[cfg.field] !== cfg.equals) return weir.drop();
  doc[cfg.tag] = cfg.tag_value;
  return weir.replace(msg, { value: JSON.stringify(doc) });
}

export const stage = weir.stage(orders, { init: setup });
