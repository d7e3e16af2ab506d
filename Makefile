# Weft — the two commands a newcomer needs are `make demo` and `make test`.
# Every target installs what it needs first (scripts/install-deps.sh is idempotent).

CARGO ?= cargo
WEFT  := target/debug/weft

.PHONY: all deps build test demo fuzz bench lint clean planner-fuzz planner-optimality

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

# Fuzzing (10 minutes by default; FUZZ_SECONDS=60 for a quick run). Needs the nightly
# toolchain and cargo-fuzz, which the script installs when missing.
FUZZ_SECONDS ?= 600
fuzz: deps planner-fuzz
	./scripts/fuzz.sh $(FUZZ_SECONDS)

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

# Planning time for 5, 8, 12, 50 and 100 elements (criterion; docs/benchmarks.md).
bench: deps
	$(CARGO) bench -p weft-ir --bench plan

clean:
	$(CARGO) clean
