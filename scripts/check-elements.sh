#!/usr/bin/env bash
# The standard library and the example chain must check cleanly with the shipped binary
# (the CLI path users take), not only through the library API the unit tests use.
set -euo pipefail
cd "$(dirname "$0")/.."
# The same build as `make test`'s, so this is a no-op there: `--bin weft` alone resolves other
# dependency features and compiled a second copy of Cranelift and wasmtime.
cargo build -q --workspace --all-targets
./target/debug/weft check --proto examples/echo/echo.proto elements/*.weft bench/loops/elements/*.weft
./target/debug/weft sim --config examples/echo/weft.yaml --edge 'frontend->echo' \
    --trace examples/echo/trace.jsonl >/dev/null
./target/debug/weft check --proto examples/tenant-quota/inventory.proto examples/tenant-quota/elements/*.weft
./target/debug/weft sim --config examples/tenant-quota/weft.yaml --edge 'checkout->inventory.reserve' \
    --trace examples/tenant-quota/trace.jsonl >/dev/null
echo "check-elements: ok"
