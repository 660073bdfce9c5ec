// Write a Weir stage in JavaScript.
//
//   import * as weir from "weir";
//
//   function setup(config) {            // once per instance; throwing stops start-up, naming the stage
//     if (!config.field) throw new Error("`field` is required");
//     return config.field;
//   }
//
//   function process(msg, field) {
//     const doc = JSON.parse(weir.text(msg.value));
//     return field in doc ? weir.keep() : weir.drop();
//   }
//
//   export const stage = weir.stage(process, { init: setup });
//
// Build with `sdk/js/weir-build-js stage.js -o stage.wasm` (esbuild bundles this module with
// the stage, componentize-js makes the component; see docs/languages/js.md). The SDK implements
// the typed `weir:stage/stage` export of the `stage-typed` world: `init` gets the YAML `config`
// as a plain object; each message is `{ key, value, headers, timestamp, topic }` (key/value are
// Uint8Array or undefined, headers `[{ key, value }]`, timestamp a BigInt in ms or undefined);
// the source topic, partition and offset come as a third argument `meta`. An exception thrown by
// `process` traps the instance: the host applies the stage's `on_trap` policy.
//
// What `process` may return: weir.keep() or true (unchanged), weir.drop() or false (filtered),
// weir.next(m, ...), a message or an array of messages (these continue instead),
// weir.reject(reason), weir.fail(reason).

import { log as hostLog } from "weir:stage/log@0.1.0";

const KEEP = Object.freeze({ tag: "keep" });
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** The input continues unchanged. */
export function keep() {
  return KEEP;
}

/** The input is filtered out. */
export function drop() {
  return { tag: "next", val: [] };
}

/** These messages continue instead of the input. */
export function next(...messages) {
  return { tag: "next", val: messages };
}

/** The input goes to the reject path with this reason. */
export function reject(reason) {
  return { tag: "reject", val: String(reason) };
}

/** The pipeline stops with this reason; nothing at or after this message is committed. */
export function fail(reason) {
  return { tag: "fail", val: String(reason) };
}

/** UTF-8 bytes of a string (bytes pass through; null/undefined stay absent). */
export function bytes(v) {
  if (v === undefined || v === null) return undefined;
  if (v instanceof Uint8Array) return v;
  return encoder.encode(String(v));
}

/** The text of UTF-8 bytes; throws a TypeError on invalid UTF-8 (undefined stays undefined). */
export function text(b) {
  return b === undefined ? undefined : decoder.decode(b);
}

/** A new message; string keys/values are UTF-8 encoded, headers are `[key, value]` pairs. */
export function message({ key, value, headers = [], timestamp, topic } = {}) {
  return {
    key: bytes(key),
    value: bytes(value),
    headers: headers.map(([k, v]) => ({ key: String(k), value: bytes(v) })),
    timestamp: timestamp === undefined ? undefined : BigInt(timestamp),
    topic: topic === undefined || topic === null ? undefined : String(topic),
  };
}

/** A copy of `msg` with some fields changed (headers copied). */
export function replace(msg, changes = {}) {
  const out = { ...msg, headers: [...msg.headers] };
  for (const [k, v] of Object.entries(changes)) {
    if (k === "key" || k === "value") out[k] = bytes(v);
    else if (k === "headers") out.headers = v.map((h) => (Array.isArray(h) ? { key: h[0], value: bytes(h[1]) } : h));
    else if (k === "timestamp") out.timestamp = v === undefined ? undefined : BigInt(v);
    else if (k === "topic") out.topic = v ?? undefined;
    else throw new TypeError(`a message has no field ${k}`);
  }
  return out;
}

/** Appends a header to `msg` (in place) and returns it. */
export function header(msg, key, value) {
  msg.headers.push({ key: String(key), value: bytes(value) });
  return msg;
}

/** Logs into the host's logs, tagged with the stage's name (level: trace … error). */
export function log(level, message) {
  hostLog(level, String(message));
}

function isMessage(v) {
  return v !== null && typeof v === "object" && Array.isArray(v.headers) && !("tag" in v);
}

function outcome(v) {
  if (v === true) return KEEP;
  if (v === false) return drop();
  if (v !== null && typeof v === "object" && typeof v.tag === "string") return v;
  if (isMessage(v)) return { tag: "next", val: [v] };
  if (Array.isArray(v) && v.every(isMessage)) return { tag: "next", val: v };
  return fail(`the stage function returned ${v === null ? "null" : typeof v}, not an outcome`);
}

/**
 * The component's `weir:stage/stage` export: `export const stage = weir.stage(process, { init })`.
 * With `init`, `init(config)` runs once per instance and its result is the second argument of
 * `process(msg, state, meta)`; without it, `process(msg, meta)`.
 */
export function stage(process, { init } = {}) {
  if (typeof process !== "function") throw new TypeError("weir.stage needs the stage function");
  let state;
  return {
    init(config) {
      if (init === undefined) return;
      try {
        state = init(Object.fromEntries(config));
      } catch (e) {
        // Becomes the `err` of init's result: the pipeline stops at start-up with this text.
        throw e instanceof Error ? e.message : String(e);
      }
    },
    process: init === undefined
      ? (msg, meta) => outcome(process(msg, meta))
      : (msg, meta) => outcome(process(msg, state, meta)),
  };
}
