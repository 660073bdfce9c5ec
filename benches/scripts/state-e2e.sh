#!/bin/bash
# One drain of N messages (default 200,000) over 8 partitions through the release `weir`
# binary on `weir broker` (librdkafka's mock cluster), with the `misbehave` stage keeping
# state (one get and one set per message: STATE=1) or not (0); DELIVERY=exactly-once or
# at-least-once; KEYS=K: the messages' keys cycle over K keys (default: every key new).
# DRIVERS=D: driver threads (default 1, the default of runtime.drivers). WEIR_BIN: another binary.
# Prints the report's read count, consuming_ms (wall) and consuming_cpu_ms (the weir process's
# CPU time over the same span: what the drain cost, whatever the machine's neighbours did
# meanwhile; the broker's is not in it). docs/BENCHMARKS.md.
# usage: benches/scripts/state-e2e.sh 0|1   (after cargo build --release -p weir and the tests'
# plugin build, target/plugins/...)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
W="${WEIR_BIN:-$root/target/release/weir}"
N="${N:-200000}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 - "$N" "${KEYS:-0}" <<'PY'
import sys
n, keys = int(sys.argv[1]), int(sys.argv[2]) or int(sys.argv[1])
with open('in.jsonl', 'w') as f:
    for i in range(n):
        v = '{\\"id\\":%d,\\"status\\":\\"paid\\",\\"pad\\":\\"%s\\"}' % (i, "x" * 48)
        f.write('{"key":"key-%05d","value":"%s"}\n' % (i % keys, v))
PY
mkfifo bfifo
($W broker --topic in:8 --topic out:8 --topic weir.m.kv.changelog:8 --seed in=in.jsonl < bfifo > broker.out 2>broker.err &)
exec 3>bfifo
B=""; for _ in $(seq 1 600); do B=$(head -1 broker.out 2>/dev/null); [ -n "$B" ] && break; sleep 0.1; done
[ -n "$B" ] || { echo "weir broker did not start: $(cat broker.err)"; exit 1; }
ST=""; [ "$1" = 1 ] && ST=$'    config: { get_set: kv }\n    state: { buckets: [kv] }'
cat > p.yaml <<Y
delivery: ${DELIVERY:-at-least-once}
source:
  kafka: { brokers: "$B", topics: [in], group: g$RANDOM, stop_at_end: true, commit_interval: 1s, properties: { fetch.wait.max.ms: 10 } }
stages:
  - name: m
    plugin: $root/target/plugins/wasm32-wasip2/release/misbehave.wasm
$ST
sink: { kafka: { brokers: "$B", topic: out } }
runtime: { report: report.json, watch_plugins: false, drivers: ${DRIVERS:-1} }
Y
WEIR_LOG=${WEIR_LOG:-warn} ${WRAP:-} "$W" run p.yaml 2> run.log >/dev/null || { cat run.log; exit 1; }
python3 -c "import json;r=json.load(open('report.json'));print('read',r['read'],'consuming_ms',round(r['consuming_ms']),'consuming_cpu_ms',round(r['consuming_cpu_ms']))"
exec 3>&-
