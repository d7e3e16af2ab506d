# Weft — the two commands a newcomer needs are `make demo` and `make test`.
# Every target installs what it needs first (scripts/install-deps.sh is idempotent).

CARGO ?= cargo
WEFT  := target/debug/weft

.PHONY: all deps build test demo fuzz bench loom lint clean planner-fuzz planner-optimality

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
	$(CARGO) test --workspace
	./scripts/check-elements.sh
	$(MAKE) loom

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Runs the example chain (logging, ratelimit, firewall, cache, metrics) over a trace of
# RPCs in virtual time and prints what each RPC met.
demo: deps
	$(CARGO) build -q --bin weft
	@echo "== weft check: the standard elements and the example chain's elements"
	$(WEFT) check --proto examples/echo/echo.proto elements/*.weft
	@echo "== weft sim: frontend->echo over examples/echo/trace.jsonl"
	$(WEFT) sim --config examples/echo/weft.yaml --edge 'frontend->echo' \
		--trace examples/echo/trace.jsonl --format text \
		--channels target/demo-channels.jsonl --dump-state target/demo-state.json
	@echo "== channel records (target/demo-channels.jsonl):"
	@cat target/demo-channels.jsonl
	@echo "== final state is in target/demo-state.json"

# Fuzzing: the front end and the generator share FUZZ_SECONDS (10 minutes by default), and
# the JIT-vs-interpreter comparison gets FUZZ_SECONDS of its own. FUZZ_SECONDS=60 for a quick
# run. Needs the nightly toolchain and cargo-fuzz, which the script installs when missing.
# `fuzz` also runs the planner's soundness test at 100 000 cases (planner-fuzz).
FUZZ_SECONDS ?= 600
fuzz: deps planner-fuzz
	FUZZ_TARGETS="frontend generated" ./scripts/fuzz.sh $(FUZZ_SECONDS)
	FUZZ_TARGETS="jit_vs_interp" ./scripts/fuzz.sh $(FUZZ_SECONDS)

# The JIT's benchmarks and the planner's planning time (criterion; results and the machine
# are in docs/benchmarks.md).
bench: deps
	$(CARGO) bench -p weft-bench --bench chain
	$(CARGO) bench -p weft-ir --bench plan

# The loom model of compiled-code lifetime (its own target dir: --cfg loom rebuilds all).
loom: deps
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test -p weft-jit --release --test loom

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

clean:
	$(CARGO) clean
