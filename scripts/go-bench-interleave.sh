#!/usr/bin/env bash
# Compares two builds of the Go binding's echo benchmark on a shared machine: runs
# BenchmarkEcho/{none,handwritten,handwritten-noencode,weft} for 1 s each, each variant on
# the two test binaries back to back, for ROUNDS rounds, and reports per build the median over
# rounds of each variant's cost added over `none` measured in the same round (so a change of
# load between rounds cancels out), and the ratios to the hand-written interceptors.
#
#   lib() { echo "-ldflags=-X=weft.library=$(stat -c %Y.%s ../../target/release/libweft_runtime.a)"; }
#   (cd bindings/go && go test -c "$(lib)" -o /tmp/before.test .)   # at the old commit
#   (cd bindings/go && go test -c "$(lib)" -o /tmp/after.test .)    # at the new one
#
# The -ldflags naming the library's build matter: Go caches linked test binaries by its own
# inputs, which leave out the Rust library, so without them a change to the library alone
# gives /tmp/after.test the library of /tmp/before.test.
#   ROUNDS=10 scripts/go-bench-interleave.sh /tmp/before.test /tmp/after.test
#
# VARIANTS (default "none handwritten handwritten-noencode weft") picks the sub-benchmarks;
# `none` must be among them. The same binary twice compares variants of one build.
# BENCH (default BenchmarkEcho) runs another benchmark with a `none` variant instead, e.g.
# BenchmarkServerInterceptorCold, whose cost over `none` tracks the echo's (docs/benchmarks.md);
# where a benchmark reports call-ns/op (the cold ones: the calls without the evictions), that
# is compared instead of ns/op.
# BENCHTIME (default 1s) is passed to -test.benchtime.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BEFORE.test AFTER.test" >&2; exit 2; }
rounds=${ROUNDS:-10}
variants=${VARIANTS:-none handwritten handwritten-noencode weft}
bench=${BENCH:-BenchmarkEcho}
benchtime=${BENCHTIME:-1s}
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
cd "$(dirname "$0")/../bindings/go"
for r in $(seq 1 "$rounds"); do
  # Each variant runs on both builds back to back, which build first alternating by round,
  # so a change of load hits both sides of a comparison alike.
  order="before after"; [ $((r % 2)) -eq 0 ] && order="after before"
  for v in $variants; do
    for bin in $order; do
      exe=$1; [ "$bin" = after ] && exe=$2
      "$exe" -test.run '^$' -test.bench "^$bench\$/^$v\$" -test.benchtime "$benchtime" |
        awk -v r="$r" -v b="$bin" -v v="$v" '/^Benchmark/ {
          for (i = 2; i <= NF; i++) { if ($(i+1) == "ns/op" && !call) ns = $i; if ($(i+1) == "call-ns/op") { ns = $i; call = 1 }; if ($(i+1) == "cpu-ns/op") cpu = $i }
          print r, b, v, ns, cpu }' >> "$raw"
    done
  done
done
awk -v variants="$variants" '
{ ns[$1, $2, $3] = $4; cpu[$1, $2, $3] = $5; if ($1 > rounds) rounds = $1 }
function median(a, n,   i, j, t) {
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
  return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
# Quartiles by nearest rank, of an array median() has sorted: the spread of the rounds.
function q1(a, n) { return a[int((n + 3) / 4)] }
function q3(a, n) { return a[int((3 * n + 3) / 4)] }
END {
  split("before after", bins, " ")
  nv = 0; n = split(variants, all, " "); for (i = 1; i <= n; i++) if (all[i] != "none") vs[++nv] = all[i]
  for (b = 1; b <= 2; b++) {
    printf "== %s (%d rounds; added = median over rounds of variant - none in the same round)\n", bins[b], rounds
    for (r = 1; r <= rounds; r++) base[r] = ns[r, bins[b], "none"]
    printf "%-22s ns/op %8.0f\n", "none", median(base, rounds)
    for (k = 1; k <= nv; k++) {
      for (r = 1; r <= rounds; r++) { d[r] = ns[r, bins[b], vs[k]] - ns[r, bins[b], "none"]; c[r] = cpu[r, bins[b], vs[k]] - cpu[r, bins[b], "none"] }
      add[vs[k]] = median(d, rounds); lo = q1(d, rounds); hi = q3(d, rounds); addc[vs[k]] = median(c, rounds)
      printf "%-22s added %6.2f us latency (quartiles %.2f-%.2f), %6.2f us CPU\n", vs[k], add[vs[k]] / 1000, lo / 1000, hi / 1000, addc[vs[k]] / 1000
    }
    # The ratio within each round, which cancels a change of load between rounds.
    if (("weft" in add) && ("handwritten" in add)) {
      m = 0
      for (r = 1; r <= rounds; r++) {
        h = ns[r, bins[b], "handwritten"] - ns[r, bins[b], "none"]
        if (h > 0) rr[++m] = (ns[r, bins[b], "weft"] - ns[r, bins[b], "none"]) / h
      }
      if (m > 0) printf "per-round ratio weft / handwritten: median %.2f, quartiles %.2f-%.2f\n", median(rr, m), q1(rr, m), q3(rr, m)
    }
    if (("weft" in add) && ("handwritten" in add) && add["handwritten"] != 0 && addc["handwritten"] != 0)
      printf "ratio weft / handwritten: latency %.2f, CPU %.2f\n", add["weft"] / add["handwritten"], addc["weft"] / addc["handwritten"]
    if (("weft" in add) && ("handwritten-noencode" in add) && add["handwritten-noencode"] != 0 && addc["handwritten-noencode"] != 0)
      printf "ratio weft / handwritten-noencode: latency %.2f, CPU %.2f\n", add["weft"] / add["handwritten-noencode"], addc["weft"] / addc["handwritten-noencode"]
    if (("weft-records" in add) && ("handwritten" in add) && add["handwritten"] != 0 && addc["handwritten"] != 0)
      printf "ratio weft-records / handwritten: latency %.2f, CPU %.2f\n", add["weft-records"] / add["handwritten"], addc["weft-records"] / addc["handwritten"]
    printf "\n"
  }
}' "$raw"
