// Durable per-key state for a Weir stage in JavaScript: the buckets a stage declares under
// `state` in the pipeline YAML (docs/state.md).
//
//   import * as weir from "weir";
//   import { bucket } from "weir/state";
//
//   function process(msg) {
//     const seen = bucket("seen");               // declared: `state: { buckets: [seen] }`
//     const key = weir.text(msg.key);
//     if (seen.exists(key)) return weir.drop();
//     seen.set(key, "");
//     return weir.keep();
//   }
//
// A bucket belongs to the stage and to the source partition of the message being processed.
// A message sees the writes of every message before it; its writes are kept only when its
// outcome is delivered (`reject` included): a message that fails, traps or times out leaves
// none. This is the host's `wasi:keyvalue@0.2.0-draft2` (store, atomics, batch) with JS types:
// values are Uint8Array (a string is stored as UTF-8), numbers are signed 64-bit, stored as 8
// little-endian bytes. Every call throws a `StateError` (`kind`: "no-such-store",
// "access-denied" or "other") when the host answers an error. State is open only while a
// message is processed (not in `init`).

import { open } from "wasi:keyvalue/store@0.2.0-draft2";
import { increment } from "wasi:keyvalue/atomics@0.2.0-draft2";
import { getMany, setMany, deleteMany } from "wasi:keyvalue/batch@0.2.0-draft2";

const encoder = new TextEncoder();

/** What a state call answered instead of a value. */
export class StateError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = "StateError";
    this.kind = kind;
  }
}

function stateError(e) {
  const p = e !== null && typeof e === "object" && "payload" in e ? e.payload : e;
  const tag = p !== null && typeof p === "object" ? p.tag : undefined;
  if (tag === "access-denied")
    return new StateError(tag, "bucket not declared for this stage (state.buckets in the YAML)");
  if (tag === "no-such-store") return new StateError(tag, "no such bucket");
  if (tag === "other") return new StateError(tag, String(p.val));
  return new StateError("other", String(e && e.message !== undefined ? e.message : e));
}

// Each host call goes through `call` so a host error arrives as a StateError.
function call(f) {
  try {
    return f();
  } catch (e) {
    throw stateError(e);
  }
}

function valueBytes(v) {
  if (typeof v === "string") return encoder.encode(v);
  if (v instanceof Uint8Array) return v;
  if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  throw new TypeError(`a state value is a Uint8Array or a string, not ${typeof v}`);
}

function i64Bytes(n) {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigInt64(0, BigInt.asIntN(64, BigInt(n)), true);
  return b;
}

function safe(key, n) {
  const v = Number(n);
  if (!Number.isSafeInteger(v))
    throw new RangeError(`the number at key ${JSON.stringify(key)} (${n}) is beyond 2^53: use the *Big variant`);
  return v;
}

/** One of the stage's buckets (get one with `bucket(name)`). */
export class Bucket {
  constructor(name, handle) {
    this.name = name;
    this.handle = handle;
  }

  /** The value of `key` (Uint8Array); undefined when it has none. */
  get(key) {
    const v = call(() => this.handle.get(key));
    return v === null ? undefined : v;
  }

  /** The value of `key` as a BigInt written by `increment`/`setInt`; undefined when none. */
  getBigInt(key) {
    const v = this.get(key);
    if (v === undefined) return undefined;
    if (v.length !== 8)
      throw new StateError("other", `key ${JSON.stringify(key)} holds ${v.length} bytes, not a number`);
    return new DataView(v.buffer, v.byteOffset, 8).getBigInt64(0, true);
  }

  /** `getBigInt` as a Number (a RangeError beyond 2^53). */
  getInt(key) {
    const v = this.getBigInt(key);
    return v === undefined ? undefined : safe(key, v);
  }

  /** Sets `key` to a Uint8Array or a string (stored as UTF-8). */
  set(key, value) {
    const bytes = valueBytes(value);
    call(() => this.handle.set(key, bytes));
  }

  /** Sets `key` to a signed 64-bit number (Number or BigInt), as `increment` stores it. */
  setInt(key, n) {
    this.set(key, i64Bytes(n));
  }

  /** Removes `key` (a tombstone in the changelog). */
  delete(key) {
    call(() => this.handle.delete(key));
  }

  /** Whether `key` has a value. */
  exists(key) {
    return call(() => this.handle.exists(key));
  }

  /** Adds `delta` (Number or BigInt) to the number at `key` (absent: 0); returns the sum as a
   *  BigInt (signed 64-bit, wrapping). */
  incrementBig(key, delta = 1n) {
    const d = BigInt.asIntN(64, BigInt(delta));
    if (d >= 0n) return call(() => increment(this.handle, key, d));
    // componentize-js 0.23 traps while lowering a negative BigInt into an `s64` import argument
    // (bytecodealliance/ComponentizeJS#343), so a negative delta is a read and a write: the same
    // thing the host's `increment` does, in one instance that runs one message at a time.
    const sum = BigInt.asIntN(64, (this.getBigInt(key) ?? 0n) + d);
    this.setInt(key, sum);
    return sum;
  }

  /** `incrementBig` as a Number (a RangeError when the sum is beyond 2^53). */
  increment(key, delta = 1) {
    return safe(key, this.incrementBig(key, delta));
  }

  /** The values of `keys` in one host call: a Map from key to Uint8Array or undefined. */
  getMany(keys) {
    const pairs = call(() => getMany(this.handle, Array.from(keys)));
    const out = new Map();
    for (let i = 0; i < pairs.length; i++) out.set(pairs[i][0], pairs[i][1] === null ? undefined : pairs[i][1]);
    return out;
  }

  /** Sets many keys in one host call, in order (a Map, an object or `[key, value]` pairs). */
  setMany(entries) {
    const list = entries instanceof Map ? Array.from(entries) : Array.isArray(entries) ? entries : Object.entries(entries);
    const pairs = list.map((e) => [String(e[0]), valueBytes(e[1])]);
    call(() => setMany(this.handle, pairs));
  }

  /** Removes many keys in one host call. */
  deleteMany(keys) {
    const list = Array.from(keys, String);
    call(() => deleteMany(this.handle, list));
  }

  /** Every key of the bucket in this partition, in order (one host call per page). */
  *keys() {
    let cursor = undefined;
    for (;;) {
      const page = call(() => this.handle.listKeys(cursor));
      yield* page.keys;
      cursor = page.cursor ?? undefined;
      if (cursor === undefined) return;
    }
  }
}

const opened = new Map();

/** The bucket `name` (declared under the stage's `state.buckets`), opened once per instance. */
export function bucket(name) {
  let b = opened.get(name);
  if (b === undefined) {
    b = new Bucket(name, call(() => open(name)));
    opened.set(name, b);
  }
  return b;
}
