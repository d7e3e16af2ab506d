#!/usr/bin/env bash
# Compares two builds of the JIT benchmark chain on a shared machine by wall time: runs
# `iters jit_fused N` on each build and `iters hand_written N` on the first, one after the
# other, for ROUNDS rounds, and reports per case the minimum and the median ns per RPC.
# This VM exposes no cycle counter to `perf stat`, and criterion runs one build at a time, so
# a change of load between two criterion runs can look like a change of the code.
#
#   cargo build --release -p weft-bench --example iters && cp target/release/examples/iters /tmp/before
#   ...change...
#   cargo build --release -p weft-bench --example iters && cp target/release/examples/iters /tmp/after
#   ROUNDS=11 scripts/jit-interleave.sh /tmp/before /tmp/after
#
# N (default 2 000 000) RPCs per run; the set-up (compiling the chain) is under a
# millisecond, so it does not show at this N. CASE (default jit_fused) picks another case.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BEFORE AFTER   (two builds of bench/examples/iters.rs)" >&2; exit 2; }
rounds=${ROUNDS:-11}
n=${N:-2000000}
case_name=${CASE:-jit_fused}
for r in $(seq 1 "$rounds"); do
  for run in "before $1 $case_name" "after $2 $case_name" "hand_written $1 hand_written"; do
    read -r label exe c <<<"$run"
    start=$(date +%s%N)
    "$exe" "$c" "$n" >/dev/null
    end=$(date +%s%N)
    echo "$label $(((end - start) / n))"
  done
done | sort -k1,1 -k2n | awk '
  { v[$1] = v[$1] " " $2; k[$1]++; x[$1, k[$1]] = $2 }
  END {
    for (c in k) printf "%-13s min %4d  median %4d  ns/RPC   (%s )\n", c, x[c, 1], x[c, int((k[c] + 1) / 2)], v[c]
  }' | sort
