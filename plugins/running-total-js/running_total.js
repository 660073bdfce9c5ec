// A running total per key in JavaScript (the same job as plugins/running-total, in Rust, and
// plugins/running-total-{c,python}): each message's value is a JSON object with an integer field
// (config `field`, default `amount`); the stage adds it to its key's total in the state bucket
// `totals` and emits the message with the field `total` set to the new total. A message without
// a key (or a key that is not UTF-8), or whose field is not an integer, is rejected and counts
// nothing.
//
// JSON numbers are doubles in JavaScript: an amount must be a safe integer (|n| < 2^53), and
// `5.0` or `5e0` parse to the integer 5 here where the Rust, C and Python stages reject them.
//
// Pipeline YAML: `state: { buckets: [totals] }`.

import * as weir from "weir";
import { bucket, StateError } from "weir/state";

function setup(config) {
  return config.field ?? "amount";
}

function runningTotal(msg, field) {
  let key;
  try {
    key = weir.text(msg.key);
  } catch {
    key = undefined;
  }
  if (key === undefined) return weir.reject("no key (or a key that is not UTF-8)");
  let doc;
  try {
    doc = JSON.parse(weir.text(msg.value ?? new Uint8Array()));
  } catch (e) {
    return weir.reject(`malformed JSON: ${e.message}`);
  }
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) return weir.reject("not a JSON object");
  const amount = doc[field];
  if (!Number.isSafeInteger(amount)) return weir.reject(`field \`${field}\` is not an integer`);
  let total;
  try {
    total = bucket("totals").incrementBig(key, amount);
  } catch (e) {
    // The store is not usable: stop rather than emit a wrong total.
    if (e instanceof StateError) return weir.fail(`state: ${e.message}`);
    throw e;
  }
  // The total as a JSON number, exact even beyond 2^53: `total` is made the last member (a
  // string key keeps insertion order), so the text ends with `"total":0}`.
  const out = Object.assign({}, doc);
  delete out.total;
  out.total = 0;
  const json = JSON.stringify(out);
  return weir.replace(msg, { value: `${json.slice(0, -2)}${total}}` });
}

export const stage = weir.stage(runningTotal, { init: setup });
