# Weft — the two commands a newcomer needs are `make demo` and `make test`.
# Every target installs what it needs first (scripts/install-deps.sh is idempotent).

CARGO ?= cargo
GO    ?= go
WEFT  := target/debug/weft
# protoc finds its Go plugins where `go install` put them (scripts/install-deps.sh).
GOBIN_DIR = $(shell $(GO) env GOBIN | grep . || echo "$$($(GO) env GOPATH)/bin")
# Go caches the binaries it links, keyed by its own inputs: the Rust static library cgo's
# LDFLAGS name is a file outside them, so after a Rust-only change `go test` ran the old
# library. A linker flag naming the library's build (mtime and size; -X of a symbol no
# package defines sets nothing) puts it in the key. $(call GO_LIB,debug|release).
GO_LIB = -ldflags=-X=weft.library=$$(stat -c %Y.%s $(CURDIR)/target/$(1)/libweft_runtime.a)

.PHONY: all deps build test demo fuzz bench loom aarch64-test lint clean planner-fuzz sanitize \
	planner-optimality go-gen go-test go-bench go-demo soak

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	$(CARGO) build --workspace

# The full suite CI runs on a fresh clone: formatting, lints, unit, property, scenario and
# CLI tests. Long fuzzing and benchmarks are separate targets.
test: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	# `cargo test` builds the runtime only as an rlib; the C ABI test links the static library.
	# One build of every target with the workspace's features: `cargo test` then compiles
	# nothing (a `-p weft-runtime` build here resolved other features and cost a second full
	# build of the dependencies).
	$(CARGO) build --workspace --all-targets
	$(CARGO) test --workspace
	./scripts/check-elements.sh
	$(MAKE) loom
	$(MAKE) aarch64-test
	$(MAKE) go-test

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Runs a grpc-go echo client and server with the example chain (logging, ratelimit, firewall,
# cache, metrics) compiled into both and prints what each RPC met; then the same chain over a
# trace of RPCs in virtual time in the simulator.
demo: deps
	$(MAKE) --no-print-directory go-demo
	@echo "== weft check: the standard elements and the example chain's elements"
	$(WEFT) check --proto examples/echo/echo.proto elements/*.weft
	@echo "== weft sim: frontend->echo over examples/echo/trace.jsonl"
	$(WEFT) sim --config examples/echo/weft.yaml --edge 'frontend->echo' \
		--trace examples/echo/trace.jsonl --format text \
		--channels target/demo-channels.jsonl --dump-state target/demo-state.json
	@echo "== channel records (target/demo-channels.jsonl):"
	@cat target/demo-channels.jsonl
	@echo "== final state is in target/demo-state.json"

# Fuzzing: the front end and the generator share FUZZ_SECONDS (10 minutes by default), the
# JIT-vs-interpreter comparison gets FUZZ_SECONDS of its own, the direct message JSON
# writer against prost-reflect a quarter of it, and random call sequences against the C ABI
# (docs/c-abi.md, "Fuzzing") half of it. FUZZ_SECONDS=60 for a quick run. Needs the
# nightly toolchain and cargo-fuzz, which the script installs when missing.
# `fuzz` also runs the planner's soundness test at 100 000 cases (planner-fuzz).
FUZZ_SECONDS ?= 600
fuzz: deps planner-fuzz
	FUZZ_TARGETS="frontend generated" ./scripts/fuzz.sh $(FUZZ_SECONDS)
	FUZZ_TARGETS="jit_vs_interp" ./scripts/fuzz.sh $(FUZZ_SECONDS)
	FUZZ_TARGETS="message_json" ./scripts/fuzz.sh $$(( $(FUZZ_SECONDS) / 4 + 1 ))
	FUZZ_TARGETS="c_abi" ./scripts/fuzz.sh $$(( $(FUZZ_SECONDS) / 2 + 1 ))

# The JIT's benchmarks and the planner's planning time (criterion; results and the machine
# are in docs/benchmarks.md).
bench: deps
	$(CARGO) bench -p weft-bench --bench chain
	$(CARGO) bench -p weft-ir --bench plan
	$(MAKE) go-bench

# The loom model of compiled-code lifetime (its own target dir: --cfg loom rebuilds all).
# No debug info: nobody debugs this build, and it kept ~800 MB on disk.
loom: deps
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom CARGO_PROFILE_RELEASE_DEBUG=false \
		$(CARGO) test -p weft-jit --release --test loom

# The Rust tests under ThreadSanitizer and AddressSanitizer/LeakSanitizer, each in its own
# target dir (target/tsan, target/asan); not part of `test`: about 40 minutes on 2 cores
# (docs/sanitizers.md). The script installs the nightly toolchain and rust-src when missing.
sanitize: deps
	./scripts/sanitize.sh

# The aarch64 code `compile_object` makes for the DPU cores, run: tests/cross_isa.rs only
# checks that the object is produced and verified, so jit/aarch64 links it (fused, then
# unfused) into an aarch64 binary and runs it under qemu-aarch64 against the interpreter.
# The cross linker and the runner are set here, not in a cargo config, so that no other
# build sees them.
AARCH64_CARGO = CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
	CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu" \
	$(CARGO)
aarch64-test: deps
	$(AARCH64_CARGO) run -p weft-jit-aarch64 --target aarch64-unknown-linux-gnu --bin fused
	$(AARCH64_CARGO) run -p weft-jit-aarch64 --target aarch64-unknown-linux-gnu --bin unfused

# The planner's differential soundness test at 100 000 random chains, layouts and RPC
# streams (release build; `make test` runs 10 000). Prints the converse rate too.
PLANNER_FUZZ_CASES ?= 100000
planner-fuzz: deps
	WEFT_SOUNDNESS_CASES=$(PLANNER_FUZZ_CASES) $(CARGO) test --release -p weft-ir \
		--test planner_soundness -- --nocapture

# Exact search vs brute force (3-10 elements) and annealing vs exact (11-12), 100 chains
# per size, in release; prints both rates (docs/benchmarks.md).
planner-optimality: deps
	WEFT_OPT_EXACT=100 WEFT_OPT_ANNEAL=100 $(CARGO) test --release -p weft-ir \
		--test plan_optimality -- --nocapture --test-threads 1

# The Go binding (bindings/go) and its examples (examples/go-echo, examples/tenant-quota). The
# generated protobuf code is not committed: go-gen writes it from examples/echo/echo.proto and
# examples/tenant-quota/inventory.proto.
ECHO_PROTO := examples/echo/echo.proto
INVENTORY_PROTO := examples/tenant-quota/inventory.proto
go-gen: deps
	@for pkg in bindings/go/internal/echopb:github.com/weft-mesh/weft/bindings/go/internal/echopb \
	            examples/go-echo/echopb:github.com/weft-mesh/weft/examples/go-echo/echopb; do \
		dir=$${pkg%%:*}; mod=$${pkg#*:}; mkdir -p $$dir; \
		PATH="$(GOBIN_DIR):$$PATH" protoc -I examples/echo \
			--go_out=$$dir --go_opt=paths=source_relative --go_opt=Mecho.proto=$$mod \
			--go-grpc_out=$$dir --go-grpc_opt=paths=source_relative --go-grpc_opt=Mecho.proto=$$mod \
			$(ECHO_PROTO) || exit 1; \
	done
	@dir=examples/tenant-quota/inventorypb; mod=github.com/weft-mesh/weft/$$dir; mkdir -p $$dir; \
	PATH="$(GOBIN_DIR):$$PATH" protoc -I examples/tenant-quota \
		--go_out=$$dir --go_opt=paths=source_relative --go_opt=Minventory.proto=$$mod \
		--go-grpc_out=$$dir --go-grpc_opt=paths=source_relative --go-grpc_opt=Minventory.proto=$$mod \
		$(INVENTORY_PROTO)

# Tests link the debug library (build tag weft_debug), built exactly as `make test` builds
# the workspace so the two share every compiled dependency; the benchmark links the release
# library.
go-test: go-gen
	$(CARGO) build --workspace --all-targets
	cd bindings/go && test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: the files above need formatting"; exit 1; }
	cd examples/go-echo && test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: the files above need formatting"; exit 1; }
	cd bindings/go && $(GO) vet -tags weft_debug ./... && $(GO) test $(call GO_LIB,debug) -tags weft_debug -count=1 ./...
	# Streams are where goroutines meet (a handler may send and receive on two at once), and
	# so are handlers that set metadata from several goroutines.
	cd bindings/go && $(GO) test $(call GO_LIB,debug) -race -tags weft_debug -count=1 -run 'Stream|Concurrent' .
	cd examples/go-echo && $(GO) vet -tags weft_debug ./...
	cd examples/tenant-quota && test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: the files above need formatting"; exit 1; }
	cd examples/tenant-quota && $(GO) vet -tags weft_debug ./... && $(GO) test $(call GO_LIB,debug) -tags weft_debug -count=1 ./...

go-bench: go-gen
	$(CARGO) build --release -p weft-runtime --lib
	@mkdir -p target
	cd bindings/go && $(GO) test $(call GO_LIB,release) -run '^$$' -bench 'BenchmarkEcho|BenchmarkInterceptor|BenchmarkServerInterceptor' \
		-benchtime 2s -count 3 . | tee ../../target/go-bench.txt
	./scripts/go-bench-summary.sh target/go-bench.txt

# The soak test (bindings/go/soak_test.go): a Weft client and server under mixed load
# (unary calls and the three kinds of stream, cancelled, expiring, rejected and failing
# ones among them) for SOAK_SECONDS, both reloading every few hundred milliseconds, with a
# sample of everything that must not grow every 10 s; it fails when something is left
# behind at the end or the heap or RSS climbs. Release library, as deployed. Not part of
# `make test`: `go test` runs a 6-second version of it. docs/benchmarks.md has a run.
SOAK_SECONDS ?= 600
soak: go-gen
	$(CARGO) build --release -p weft-runtime --lib
	cd bindings/go && WEFT_SOAK_SECONDS=$(SOAK_SECONDS) $(GO) test $(call GO_LIB,release) -run '^TestSoak$$' -count=1 -v \
		-timeout $$(( $(SOAK_SECONDS) + 300 ))s .

# The echo server and client as two processes, the chain linked into both.
go-demo: go-gen
	$(CARGO) build -q -p weft-runtime
	@echo "== Go demo: grpc-go client (frontend) -> server (echo), examples/go-echo/weft.yaml in-process"
	@echo "== where each element runs (weft plan):"
	@$(WEFT) plan --config examples/go-echo/weft.yaml | sed '/^  cost/q'
	GOFLAGS="$$GOFLAGS -tags=weft_debug $(call GO_LIB,debug)" ./examples/go-echo/demo.sh

clean:
	$(CARGO) clean
