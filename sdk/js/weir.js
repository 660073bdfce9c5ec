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
// the typed `weir:stage/stage` export of the `stage-fast` world, and `weir-build-js` adds the
// packed `weir:stage/batch` export over the same function (`weir.batch`, below): `init` gets the YAML `config`
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
  if (isBytes(v)) return v;
  return encoder.encode(String(v));
}

/** The text of UTF-8 bytes; throws a TypeError on invalid UTF-8 (undefined stays undefined). */
export function text(b) {
  return b === undefined ? undefined : decoder.decode(b);
}

/**
 * The text of UTF-8 bytes, or `null` when they are absent or not valid UTF-8: the twin of `text`
 * that never throws (C's `weir_utf8_valid`).
 */
export function textOrNull(b) {
  if (b === undefined || b === null) return null;
  try {
    return decoder.decode(b);
  } catch {
    return null;
  }
}

/**
 * The value of `key` in the stage's `config`, or `fallback` when it is missing or empty
 * (`--config word=` and `word: ""` in the YAML give an empty string).
 */
export function configValue(config, key, fallback = undefined) {
  const v = config[key];
  return v === undefined || v === "" ? fallback : v;
}

/** The value of `key` in the stage's `config`; throws an Error naming the key when it is missing or empty. */
export function requireConfig(config, key) {
  const v = config[key];
  if (v === undefined) throw new Error(`missing config key \`${key}\``);
  if (v === "") throw new Error(`config key \`${key}\` is empty`);
  return v;
}

/** A new message; string keys/values are UTF-8 encoded, headers are `[key, value]` pairs. */
export function message({ key, value, headers = [], timestamp, topic } = {}) {
  return {
    key: bytes(key),
    value: bytes(value),
    headers: headers.map((h) => ({ key: String(h[0]), value: bytes(h[1]) })),
    timestamp: timestamp === undefined ? undefined : BigInt(timestamp),
    topic: topic === undefined || topic === null ? undefined : String(topic),
  };
}

/** A copy of `msg` with some fields changed (headers copied). */
export function replace(msg, changes = {}) {
  // No spread, destructuring or for-of in the SDK's per-message code: without a JIT each is the
  // iterator protocol (an interpreted call and a result object per step).
  const out = {
    key: msg.key,
    value: msg.value,
    headers: msg.headers.slice(),
    timestamp: msg.timestamp,
    topic: msg.topic,
  };
  const keys = Object.keys(changes);
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i];
    const v = changes[k];
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

// ---------------------------------------------------------------------------------------------
// The packed fast path (`weir:stage/batch`): one call per batch instead of one per message.
// `weir-build-js` exports `batch = weir.batch(stage)` next to the user's `stage`, so a stage
// written against the typed API above runs on either path with the same answers. The format is
// the one documented in the contract (wit/weir.wit, interface `batch`).

const MAGIC = 0x5745_4952;
const ABSENT = 0xffff_ffff;
const NO_TIMESTAMP = -(2n ** 63n);
const VERDICT = { keep: 0, next: 1, reject: 2, fail: 3 };

/**
 * Reads the packed input batch and hands each message to `each(msg, meta)` (the same shapes as
 * on the typed path) as it is read, until `each` returns false. Indexed loops and no
 * intermediate arrays: the per-message work of the glue is what a stage without a JIT pays on
 * top of its own.
 */
function readBatch(input, each) {
  const view = new DataView(input.buffer, input.byteOffset, input.byteLength);
  if (view.getUint32(0, true) !== MAGIC || view.getUint32(4, true) !== 1) {
    throw new Error("weir: not a version-1 packed batch");
  }
  const count = view.getUint32(8, true);
  const topicLen = view.getUint32(12, true);
  const topic = decoder.decode(input.subarray(16, 16 + topicLen));
  const partition = view.getInt32(16 + topicLen, true);
  let p = 20 + topicLen;
  for (let i = 0; i < count; i++) {
    const offset = view.getBigInt64(p, true);
    const ts = view.getBigInt64(p + 8, true);
    const keyLen = view.getUint32(p + 16, true);
    const valueLen = view.getUint32(p + 20, true);
    const headerCount = view.getUint32(p + 24, true);
    p += 28;
    let key;
    if (keyLen !== ABSENT) {
      key = input.subarray(p, p + keyLen);
      p += keyLen;
    }
    let value;
    if (valueLen !== ABSENT) {
      value = input.subarray(p, p + valueLen);
      p += valueLen;
    }
    const headers = [];
    for (let h = 0; h < headerCount; h++) {
      const hk = view.getUint32(p, true);
      const hv = view.getUint32(p + 4, true);
      p += 8;
      const hkey = decoder.decode(input.subarray(p, p + hk));
      p += hk;
      let hvalue;
      if (hv !== ABSENT) {
        hvalue = input.subarray(p, p + hv);
        p += hv;
      }
      headers.push({ key: hkey, value: hvalue });
    }
    const msg = { key, value, headers, timestamp: ts === NO_TIMESTAMP ? undefined : ts, topic: undefined };
    if (!each(msg, { topic, partition, offset })) return;
  }
}

/** Grows as needed; what `processBatch` answers is written here. */
class Writer {
  constructor(size) {
    this.buf = new Uint8Array(size);
    this.view = new DataView(this.buf.buffer);
    this.len = 0;
  }
  reserve(n) {
    if (this.len + n <= this.buf.length) return;
    const grown = new Uint8Array(Math.max(this.buf.length * 2, this.len + n));
    grown.set(this.buf.subarray(0, this.len));
    this.buf = grown;
    this.view = new DataView(grown.buffer);
  }
  u32(v) {
    this.reserve(4);
    this.view.setUint32(this.len, v, true);
    this.len += 4;
  }
  raw(b) {
    this.reserve(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }
  /** A length-prefixed string. */
  text(s) {
    if (typeof s !== "string") throw new TypeError(`weir: expected a string, got ${typeof s}`);
    const b = encoder.encode(s);
    this.u32(b.length);
    this.raw(b);
  }
}

// `instanceof` first (the batch path's inputs and what a stage makes), then the check that also
// holds for the typed path's inputs, Uint8Arrays of another realm.
const isBytes = (v) =>
  v instanceof Uint8Array || (ArrayBuffer.isView(v) && Object.prototype.toString.call(v) === "[object Uint8Array]");

function optionalBytes(v, what) {
  if (v === undefined || v === null) return undefined;
  if (isBytes(v)) return v;
  throw new TypeError(`weir: a message's ${what} must be a Uint8Array or undefined (see weir.bytes)`);
}

// Header keys repeat from message to message: their UTF-8 bytes are kept (a bounded cache).
const headerKeyBytes = new Map();
function headerKey(k) {
  let b = headerKeyBytes.get(k);
  if (b === undefined) {
    if (headerKeyBytes.size >= 256) headerKeyBytes.clear();
    b = encoder.encode(k);
    headerKeyBytes.set(k, b);
  }
  return b;
}

function encodeMessage(w, m) {
  if (m === null || typeof m !== "object") throw new TypeError("weir: `next` takes messages");
  const key = optionalBytes(m.key, "key");
  const value = optionalBytes(m.value, "value");
  const topic = m.topic === undefined || m.topic === null ? undefined : encoder.encode(String(m.topic));
  const headers = m.headers ?? [];
  const t = m.timestamp;
  // setBigInt64 wraps to 64 bits itself; a number is made a BigInt (a fraction throws).
  const ts = t === undefined || t === null ? NO_TIMESTAMP : typeof t === "bigint" ? t : BigInt(t);
  const topicLen = topic === undefined ? 0 : topic.length;
  const keyLen = key === undefined ? 0 : key.length;
  const valueLen = value === undefined ? 0 : value.length;
  w.reserve(24 + topicLen + keyLen + valueLen); // the fixed part: timestamp and four u32
  const view = w.view;
  let at = w.len;
  view.setBigInt64(at, ts, true);
  view.setUint32(at + 8, topic === undefined ? ABSENT : topicLen, true);
  view.setUint32(at + 12, key === undefined ? ABSENT : keyLen, true);
  view.setUint32(at + 16, value === undefined ? ABSENT : valueLen, true);
  view.setUint32(at + 20, headers.length, true);
  at += 24;
  const buf = w.buf;
  if (topic !== undefined) {
    buf.set(topic, at);
    at += topicLen;
  }
  if (key !== undefined) {
    buf.set(key, at);
    at += keyLen;
  }
  if (value !== undefined) {
    buf.set(value, at);
    at += valueLen;
  }
  w.len = at;
  for (let i = 0; i < headers.length; i++) {
    const h = headers[i];
    const hk = headerKey(String(h.key));
    const hv = optionalBytes(h.value, "header value");
    w.u32(hk.length);
    w.u32(hv === undefined ? ABSENT : hv.length);
    w.raw(hk);
    if (hv !== undefined) w.raw(hv);
  }
}

/**
 * The component's `weir:stage/batch` export for a stage made with `weir.stage` (added by
 * `weir-build-js`): each message of the packed batch goes through the same `process` as on the
 * typed path, and the answers are packed in order, stopping after the first `fail`.
 */
export function batch(stageExport) {
  if (stageExport === null || typeof stageExport?.process !== "function") {
    throw new TypeError("weir.batch needs the object made by weir.stage");
  }
  let size = 4096;
  return {
    processBatch(input) {
      const outcomes = [];
      readBatch(input, (msg, meta) => {
        const o = stageExport.process(msg, meta);
        outcomes.push(o);
        return o.tag !== "fail";
      });
      const n = outcomes.length;
      const w = new Writer(size);
      w.u32(n);
      w.reserve(n);
      for (let i = 0; i < n; i++) {
        const v = VERDICT[outcomes[i].tag];
        if (v === undefined) throw new TypeError(`weir: unknown outcome ${outcomes[i].tag}`);
        w.buf[w.len++] = v;
      }
      for (let i = 0; i < n; i++) {
        const o = outcomes[i];
        if (o.tag === "next") {
          const list = o.val;
          if (!Array.isArray(list)) throw new TypeError("weir: `next` takes a list of messages");
          w.u32(list.length);
          for (let j = 0; j < list.length; j++) encodeMessage(w, list[j]);
        } else if (o.tag === "reject" || o.tag === "fail") {
          w.text(o.val);
        }
      }
      size = Math.max(size, w.len);
      return w.buf.subarray(0, w.len);
    },
  };
}
