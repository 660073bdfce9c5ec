#!/usr/bin/env bash
# Compares a criterion bench at another revision with the working tree, in one sitting:
# builds the bench at REV in a git worktree (its own target dir, seeded with hard links to this
# one's compiled dependencies, so only the workspace's own crates and plugins are built again),
# then runs the two binaries alternately, ROUNDS times each (default 2), and prints every row's
# median per run side by side with the change. Use it before resolving an issue that touches
# the engine, the chain, state or schema (issue 55).
#
#   benches/scripts/compare.sh REV [BENCH] [FILTER]
#   benches/scripts/compare.sh 9e57115 stage 'boundary/(native|wasm_batch|wasm_typed)/(1|256)$'
#   ROUNDS=3 benches/scripts/compare.sh HEAD~3 schema
#   OLD_BIN=/tmp/stage-old benches/scripts/compare.sh 9e57115 stage   (REV's binary reused)
#
# BENCH is a bench of benches/Cargo.toml (default `stage`); FILTER is criterion's row filter (a
# regular expression; default: every row).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
rev="${1:?usage: compare.sh REV [BENCH] [FILTER]}"
bench="${2:-stage}"
filter="${3:-}"
rounds="${ROUNDS:-2}"
scripts/ensure-toolchain
short="$(git rev-parse --short "$rev")"
wt="$root/target/compare/$short"
if [ ! -d "$wt/src" ]; then
  rm -rf "$wt"
  mkdir -p "$root/target/compare"
  git worktree prune
  git worktree add --detach "$wt/src" "$rev" >/dev/null
fi
# The dependencies compiled once: hard links into the worktree's own target dir (cargo's
# fingerprints do not name the target dir, so it takes them as built). The workspace's crates
# and plugins are built there from the revision's sources.
if [ ! -d "$wt/target/release/deps" ] && [ -d "$root/target/release/deps" ]; then
  mkdir -p "$wt/target/release"
  for d in deps build .fingerprint; do
    cp -al "$root/target/release/$d" "$wt/target/release/$d"
  done
fi
# Never the workspace's own crates: those are built again from the revision's sources, and a
# build writes some files in place (a build script's output, dep-info), which through a hard
# link rewrote this tree's files (the tests' plugin list of the old revision: this tree's
# next build failed).
for n in $(cargo metadata --no-deps --format-version 1 | python3 -c 'import json, sys
m = json.load(sys.stdin)
names = {p["name"] for p in m["packages"]}
names |= {t["name"] for p in m["packages"] for t in p["targets"]}
print("\n".join(sorted(names | {n.replace("-", "_") for n in names})))'); do
  rm -rf "$wt/target/release/deps/$n-"* "$wt/target/release/deps/lib$n-"* \
    "$wt/target/release/build/$n-"* "$wt/target/release/.fingerprint/$n-"*
done

# Builds BENCH in the workspace at $1 with target dir $2 and prints the bench binary's path.
build() {
  (cd "$1" && CARGO_TARGET_DIR="$2" cargo bench -p weir-benches --bench "$bench" --no-run \
    --message-format=json 2>/dev/null) |
    python3 -c 'import json, sys
found = [j["executable"] for j in map(json.loads, sys.stdin.read().splitlines())
         if j.get("executable") and j.get("target", {}).get("kind") == ["bench"]]
print(found[-1])'
}
echo "building $bench at $short (worktree $wt/src) and at the working tree" >&2
# OLD_BIN: a bench binary built at REV before (a copy: the next build there replaces it).
old="${OLD_BIN:-$(build "$wt/src" "$wt/target")}"
new="$(build "$root" "$root/target")"

out="$(mktemp -d)"
# Runs bench binary $1 (from package dir $2) with the filter; criterion's output in $3.
run() {
  local args=(--bench --noplot)
  [ -n "$filter" ] && args+=("$filter")
  (cd "$2/benches" && "$1" "${args[@]}") >"$3" 2>&1
}
for r in $(seq 1 "$rounds"); do
  echo "round $r: $short" >&2
  run "$old" "$wt/src" "$out/old-$r"
  echo "round $r: working tree" >&2
  run "$new" "$root" "$out/new-$r"
done
python3 - "$out" "$rounds" "$short" <<'EOF'
import re, sys
out, rounds, short = sys.argv[1], int(sys.argv[2]), sys.argv[3]
unit = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}
def rows(path):
    text = open(path).read()
    found = {}
    name = None
    for line in text.splitlines():
        # A `change:` block's `time:` line holds percentages against criterion's last
        # saved run, not a time: skipped.
        if "%" in line:
            continue
        m = re.match(r"^(\S.*?)\s+time:\s+\[(.*)\]", line)
        if m:
            name = m.group(1).strip()
            mid = m.group(2).split()[2:4]
        else:
            m2 = re.match(r"^\s+time:\s+\[(.*)\]", line)
            if not m2 or name is None:
                if re.match(r"^\S", line) and "time:" not in line:
                    name = line.strip()
                continue
            mid = m2.group(1).split()[2:4]
        found[name] = float(mid[0]) * unit[mid[1]]
    return found
def median(v):
    v = sorted(v)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2
def fmt(ns):
    if ns >= 1e6: return f"{ns/1e6:.2f} ms"
    if ns >= 1e3: return f"{ns/1e3:.2f} µs"
    return f"{ns:.1f} ns"
olds = [rows(f"{out}/old-{r}") for r in range(1, rounds + 1)]
news = [rows(f"{out}/new-{r}") for r in range(1, rounds + 1)]
names = [n for n in olds[0] if all(n in x for x in olds + news)]
head = " | ".join([f"{short} #{r}" for r in range(1, rounds + 1)] + [f"tree #{r}" for r in range(1, rounds + 1)])
print(f"| row | {head} | change (medians) |")
print("|---|" + "---:|" * (2 * rounds) + "---:|")
for n in names:
    o, w = median([x[n] for x in olds]), median([x[n] for x in news])
    cells = " | ".join(fmt(x[n]) for x in olds + news)
    print(f"| {n} | {cells} | {100 * (w - o) / o:+.0f} % |")
EOF
echo "criterion's output: $out" >&2
