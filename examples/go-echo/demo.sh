#!/usr/bin/env bash
# Runs the Go demo: the echo server and the frontend client as two processes on loopback,
# each with the Weft chain of weft.yaml linked in. Called by `make demo` after the Rust
# library and the generated Go code are built.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p bin
go build -o bin/server ./server
go build -o bin/client ./client
server_pid=""
portfile=$(mktemp)
trap 'kill "$server_pid" 2>/dev/null || true; rm -f "$portfile"' EXIT
: >"$portfile"
./bin/server --config weft.yaml --port-file "$portfile" &
server_pid=$!
for _ in $(seq 100); do [ -s "$portfile" ] && break; sleep 0.1; done
[ -s "$portfile" ] || { echo "demo: the echo server did not start" >&2; exit 1; }
./bin/client --config weft.yaml --addr "$(cat "$portfile")"
kill "$server_pid"
wait "$server_pid" 2>/dev/null || true
