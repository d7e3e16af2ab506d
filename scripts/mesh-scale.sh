#!/usr/bin/env bash
# Measures Weft on generated meshes (docs/benchmarks.md, "At the size of a mesh"): `weft
# check --config`, `weft plan`, opening an engine and reloading it, for growing numbers of
# edges and chain lengths. Release builds; each row is run REPEAT times (default 3) so the
# spread shows on a shared machine.
#
#   scripts/mesh-scale.sh [EDGES...]      (default: 10 100 500)
#   CHAINS="1 5 10" REPEAT=3 scripts/mesh-scale.sh 10 100
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p weft-runtime --bin weft --example mesh
weft=$target/release/weft
mesh=$target/release/examples/mesh
edges=${*:-10 100 500}
chains=${CHAINS:-1 5 10}
repeat=${REPEAT:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# seconds and peak resident KiB of one command, stderr and stdout dropped
timed() { /usr/bin/time -f '%e s %M KiB' "$@" 2>&1 >/dev/null | tail -1; }

for e in $edges; do
  for c in $chains; do
    # 50 services of 20 methods (2 000 request and response types in 51 protos); every edge
    # a distinct pair over all of the callee's methods.
    dir=$work/spread-$e-$c
    $mesh write "$dir" 50 20 "$e" "$c" spread >/dev/null
    for _ in $(seq "$repeat"); do
      echo "spread edges=$e chain=$c check: $(timed "$weft" check --config "$dir/weft.yaml")"
      echo "spread edges=$e chain=$c plan:  $(timed "$weft" plan --config "$dir/weft.yaml")"
      echo "spread edges=$e chain=$c open svc0: $($mesh open "$dir" 0)"
    done
    # One service at the end of every edge, each over one method.
    dir=$work/hub-$e-$c
    $mesh write "$dir" 51 20 "$e" "$c" hub >/dev/null
    for _ in $(seq "$repeat"); do
      echo "hub edges=$e chain=$c open svc0: $($mesh open "$dir" 0)"
    done
  done
done
