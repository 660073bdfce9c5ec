#!/bin/bash
# A stall, then the rest: 200,000 messages over 8 partitions on `weir broker` through
# `misbehave`, the first SLOW*8 of them every 8th `slow` (20 ms each: SLOW=50 stalls the driver
# for about a second), so flow control holds, then pauses, then resumes. Prints the report's
# read, written and consuming_ms. WEIR_BIN picks the binary (default target/release/weir).
# docs/BENCHMARKS.md ("A stall and the resume after it").
# usage: benches/scripts/stall-resume.sh SLOW at-least-once|exactly-once
#   (after cargo build --release -p weir and the tests' plugin build, target/plugins/...)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
W="${WEIR_BIN:-$root/target/release/weir}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT; cd "$work"
python3 - "$1" <<'PY'
import sys
slow = int(sys.argv[1])
with open('in.jsonl', 'w') as f:
    for i in range(200000):
        v = 'slow' if i < slow * 8 and i % 8 == 0 else '{\\"id\\":%d,\\"pad\\":\\"%s\\"}' % (i, "x" * 48)
        f.write('{"key":"key-%06d","value":"%s"}\n' % (i, v))
PY
mkfifo bfifo
($W broker --topic in:8 --topic out:8 --seed in=in.jsonl < bfifo > broker.out 2>broker.err &)
exec 3>bfifo
B=""; for _ in $(seq 1 600); do B=$(head -1 broker.out 2>/dev/null); [ -n "$B" ] && break; sleep 0.1; done
[ -n "$B" ] || { echo "weir broker did not start: $(cat broker.err)"; exit 1; }
cat > p.yaml <<Y
delivery: $2
source:
  kafka: { brokers: "$B", topics: [in], group: g$RANDOM, stop_at_end: true, commit_interval: 1s, properties: { fetch.wait.max.ms: 10 } }
stages:
  - name: m
    plugin: $root/target/plugins/wasm32-wasip2/release/misbehave.wasm
sink: { kafka: { brokers: "$B", topic: out } }
runtime: { report: report.json, watch_plugins: false }
Y
WEIR_LOG=${WEIR_LOG:-warn} "$W" run p.yaml 2> run.log >/dev/null || { cat run.log; exit 1; }
python3 -c "import json;r=json.load(open('report.json'));print('read',r['read'],'written',r['written'],'consuming_ms',r.get('consuming_ms'))"
exec 3>&-
