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

// ---------------------------------------------------------------------------------------------
// The packed fast path (`weir:stage/batch`): one call per batch instead of one per message.
// `weir-build-js` exports `batch = weir.batch(stage)` next to the user's `stage`, so a stage
// written against the typed API above runs on either path with the same answers. The format is
// the one documented in the contract (wit/weir.wit, interface `batch`).

const MAGIC = 0x5745_4952;
const ABSENT = 0xffff_ffff;
const NO_TIMESTAMP = -(2n ** 63n);
const VERDICT = { keep: 0, next: 1, reject: 2, fail: 3 };

/** Reads the packed input batch: `[meta, message][]` with the same shapes as the typed path. */
function decodeBatch(input) {
  const view = new DataView(input.buffer, input.byteOffset, input.byteLength);
  if (view.getUint32(0, true) !== MAGIC || view.getUint32(4, true) !== 1) {
    throw new Error("weir: not a version-1 packed batch");
  }
  const count = view.getUint32(8, true);
  const topicLen = view.getUint32(12, true);
  const topic = decoder.decode(input.subarray(16, 16 + topicLen));
  const partition = view.getInt32(16 + topicLen, true);
  let p = 20 + topicLen;
  const bytesAt = (len) => {
    if (len === ABSENT) return undefined;
    const b = input.subarray(p, p + len);
    p += len;
    return b;
  };
  const out = new Array(count);
  for (let i = 0; i < count; i++) {
    const offset = view.getBigInt64(p, true);
    const ts = view.getBigInt64(p + 8, true);
    const keyLen = view.getUint32(p + 16, true);
    const valueLen = view.getUint32(p + 20, true);
    const headerCount = view.getUint32(p + 24, true);
    p += 28;
    const key = bytesAt(keyLen);
    const value = bytesAt(valueLen);
    const headers = new Array(headerCount);
    for (let h = 0; h < headerCount; h++) {
      const hk = view.getUint32(p, true);
      const hv = view.getUint32(p + 4, true);
      p += 8;
      const hkey = decoder.decode(bytesAt(hk));
      headers[h] = { key: hkey, value: bytesAt(hv) };
    }
    out[i] = [
      { topic, partition, offset },
      { key, value, headers, timestamp: ts === NO_TIMESTAMP ? undefined : ts, topic: undefined },
    ];
  }
  return out;
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
  u8(v) {
    this.reserve(1);
    this.buf[this.len++] = v;
  }
  u32(v) {
    this.reserve(4);
    this.view.setUint32(this.len, v, true);
    this.len += 4;
  }
  i64(v) {
    this.reserve(8);
    this.view.setBigInt64(this.len, v, true);
    this.len += 8;
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

// Not `instanceof`: the runtime hands inputs over as Uint8Arrays of another realm.
const isBytes = (v) => ArrayBuffer.isView(v) && Object.prototype.toString.call(v) === "[object Uint8Array]";

function optionalBytes(v, what) {
  if (v === undefined || v === null) return undefined;
  if (isBytes(v)) return v;
  throw new TypeError(`weir: a message's ${what} must be a Uint8Array or undefined (see weir.bytes)`);
}

function encodeMessage(w, m) {
  if (m === null || typeof m !== "object") throw new TypeError("weir: `next` takes messages");
  const key = optionalBytes(m.key, "key");
  const value = optionalBytes(m.value, "value");
  const topic = m.topic === undefined || m.topic === null ? undefined : encoder.encode(String(m.topic));
  const headers = m.headers ?? [];
  w.i64(m.timestamp === undefined || m.timestamp === null ? NO_TIMESTAMP : BigInt.asIntN(64, BigInt(m.timestamp)));
  w.u32(topic === undefined ? ABSENT : topic.length);
  w.u32(key === undefined ? ABSENT : key.length);
  w.u32(value === undefined ? ABSENT : value.length);
  w.u32(headers.length);
  if (topic !== undefined) w.raw(topic);
  if (key !== undefined) w.raw(key);
  if (value !== undefined) w.raw(value);
  for (const h of headers) {
    const hk = encoder.encode(String(h.key));
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
      const messages = decodeBatch(input);
      const outcomes = [];
      for (const [meta, msg] of messages) {
        const o = stageExport.process(msg, meta);
        outcomes.push(o);
        if (o.tag === "fail") break;
      }
      const w = new Writer(size);
      w.u32(outcomes.length);
      for (const o of outcomes) {
        const v = VERDICT[o.tag];
        if (v === undefined) throw new TypeError(`weir: unknown outcome ${o.tag}`);
        w.u8(v);
      }
      for (const o of outcomes) {
        if (o.tag === "next") {
          const list = o.val;
          if (!Array.isArray(list)) throw new TypeError("weir: `next` takes a list of messages");
          w.u32(list.length);
          for (const m of list) encodeMessage(w, m);
        } else if (o.tag === "reject" || o.tag === "fail") {
          w.text(o.val);
        }
      }
      size = Math.max(size, w.len);
      return w.buf.subarray(0, w.len);
    },
  };
}
