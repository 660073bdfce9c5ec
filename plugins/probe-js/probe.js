// Weir test fixture: a hostile / curious JavaScript stage. Each message value names a probe:
//   loop   spin forever            bomb    allocate until the memory cap
//   trap   throw an exception      env     what the runtime exposes of process/env/fetch
//   anything else passes unchanged
import * as weir from "weir";

function probe(msg) {
  const v = msg.value === undefined ? "" : weir.text(msg.value);
  if (v === "loop") {
    for (;;) {}
  }
  if (v === "bomb") {
    const hoard = [];
    for (;;) hoard.push(new Uint8Array(1 << 20).fill(1));
  }
  if (v === "trap") throw new Error("probe asked to trap");
  if (v === "env") {
    const env = typeof process === "object" && process.env ? Object.keys(process.env).length : "none";
    return weir.reject(`probe: process.env ${env}`);
  }
  return weir.keep();
}

export const stage = weir.stage(probe);
