#!/usr/bin/env bash
# The broker faults of issue 49, point 4, at a given input rate: on three Apache
# Kafka brokers (replication factor 3, `min.insync.replicas` 2) through four faults in turn,
# two pipelines at once, one exactly-once and one at-least-once (the test
# `exactly_once::on_three_brokers_four_faults_…`, which also checks every fault: 0 lost,
# exactly-once 0 duplicates, no open transaction in `kafka-transactions list`, the committed
# offsets in `kafka-consumer-groups --describe` at the ends of the input):
#
#   LeaderKilled       kill -9 the broker leading the source's (and the sink's) partition 0
#   CoordinatorKilled  kill -9 the broker coordinating the exactly-once pipeline's
#                      transactions of partition 0, mid-transaction
#   BrokerRestarted    SIGTERM a broker, started again 10 s later
#   ClusterDown        every broker stopped (SIGTERM) for 20 s, then started again
#
# For each it prints the time from the fault (a kill; the restart for the other two) to the
# group's next commit, and from the last input produced to every input being visible. Input:
# RATE messages a second (default 5000). Results: docs/BENCHMARKS.md, docs/kafka.md.
#   benches/scripts/faults.sh [RATE]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
rate="${1:-5000}"
export WEIR_KAFKA_HOME="${WEIR_KAFKA_HOME:-$(scripts/ensure-kafka)}"
export WEIR_FAULT_RATE="$rate"
log="${TMPDIR:-/tmp}/weir-faults.log"
status=0
cargo test --release -p weir --test exactly_once on_three_brokers_four_faults \
  -- --nocapture --test-threads 1 >"$log" 2>&1 || status=$?
grep -oE 'fault [A-Za-z]+ \(.*|test .* (ok|FAILED)$' "$log"
[ "$status" -eq 0 ] || echo "failed (exit $status): see $log"
exit "$status"
