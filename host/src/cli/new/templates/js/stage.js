// {{name}}: keeps JSON messages whose `field` equals `equals`, tags them with a header, drops
// the others and rejects values that are not JSON objects. Edit freely: `weir test` shows what
// each message becomes. The SDK (`import * as weir from "weir"`) documents every function used here.
import * as weir from "weir";

// Reads the config; throwing here stops the pipeline at start-up, naming the stage.
function setup(config) {
  for (const key of ["field", "equals"]) {
    if (!(key in config)) throw new Error(`missing config key \`${key}\``);
  }
  return config;
}

// Decides one message.
function process(msg, { field, equals }) {
  let doc;
  try {
    doc = JSON.parse(weir.text(msg.value) ?? "");
  } catch {
    return weir.reject("value is not JSON");
  }
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
    return weir.reject("value is not a JSON object");
  }
  if (doc[field] !== equals) return weir.drop();
  return weir.header(weir.replace(msg), "{{name}}", "matched");
}

export const stage = weir.stage(process, { init: setup });
