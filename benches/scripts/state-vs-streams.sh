#!/usr/bin/env bash
# Stateful stages against Kafka Streams (issue 50), on one Apache Kafka broker in one sitting:
# Weir's `running-total` stage against its Kafka Streams peer (benches/peers/kafka-streams,
# built with Maven by scripts/ensure-streams-peer), 1,000,000 records over 8 partitions with
# 1,000 and 100,000 keys, exactly-once and at-least-once, the sides alternating, three rounds:
# throughput, CPU seconds per million (each side's and the broker's), latency, resident memory,
# and a check of every total (benches/src/bin/state_vs_streams.rs says how each is measured).
# `restart` instead: kill -9 mid-run with 1,000,000 keys in the store, then the time to the
# first output and the records restored, state directory kept and wiped.
# Results: docs/BENCHMARKS.md, "Weir and Kafka Streams".
#   benches/scripts/state-vs-streams.sh [throughput|restart] [--records N] [--keys a,b]
#       [--deliveries exactly-once,at-least-once] [--rounds N] [--sides weir,streams,streams-cached]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
scripts/ensure-toolchain
export WEIR_KAFKA_HOME="${WEIR_KAFKA_HOME:-$(scripts/ensure-kafka)}"
peer="$(scripts/ensure-streams-peer)"
cargo build --release -p weir --bin weir
cargo build --release -p weir-benches --bin state-vs-streams
WEIR_TEST_LOG="${WEIR_TEST_LOG:-info}" exec target/release/state-vs-streams \
  --weir target/release/weir --peer "$peer" "$@"
