#!/usr/bin/env bash
# The rebalance pause of issue 49, point 5: on three Apache Kafka brokers, 240 partitions
# read by four `weir` members (at-least-once), how long the partitions that do NOT move stop
# delivering when a fifth member joins, when it leaves (SIGTERM) and when a member is killed
# (kill -9), under the classic protocol with the eager assignor, the classic protocol with
# cooperative-sticky, and KIP-848's consumer protocol, one after another in one sitting
# (benches/src/bin/rebalance_pause.rs says how it is measured). Prints a Markdown table and
# the ratios to eager. Results: docs/BENCHMARKS.md, "Rebalance pause".
#   benches/scripts/rebalance-pause.sh [--partitions N] [--rate N] [--protocols a,b,c]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
scripts/ensure-toolchain
export WEIR_KAFKA_HOME="${WEIR_KAFKA_HOME:-$(scripts/ensure-kafka)}"
cargo build --release -p weir --bin weir
cargo build --release -p weir-benches --bin rebalance-pause
WEIR_TEST_LOG="${WEIR_TEST_LOG:-info}" exec target/release/rebalance-pause --weir target/release/weir "$@"
