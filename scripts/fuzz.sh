#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for a share of a total duration and exits non-zero if
# any target finds a crash, a timeout or an out-of-memory input (saved under fuzz/artifacts/).
#
#   scripts/fuzz.sh [TOTAL_SECONDS]     # default 600, split evenly across the targets
#   FUZZ_TARGETS="jit_vs_interp" scripts/fuzz.sh 600   # only the named targets
#
# Installs what fuzzing needs when missing: the nightly toolchain (rustup) and cargo-fuzz.
# Corpora grow in fuzz/corpus/<target> (not committed); `frontend` is seeded from the
# standard elements and fuzz/seeds/frontend, `c_abi` from fuzz/seeds/c_abi. Reproduce a finding with
#   cd fuzz && cargo +nightly fuzz run <target> artifacts/<target>/<file>
# `c_abi` keeps runtimes open between inputs; if a finding does not replay alone, rerun the
# fuzzer with WEFT_FUZZ_FRESH=1 (a runtime per input) to find one that does.
set -euo pipefail

total="${1:-600}"
if ! [[ "$total" =~ ^[0-9]+$ ]] || (( total < 1 )); then
    echo "usage: $0 [TOTAL_SECONDS]" >&2
    exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "== installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version > /dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

cd fuzz
mapfile -t targets < <(cargo +nightly fuzz list)
if [[ -n "${FUZZ_TARGETS:-}" ]]; then
    read -r -a targets <<< "$FUZZ_TARGETS"
fi
if (( ${#targets[@]} == 0 )); then
    echo "no fuzz targets found in fuzz/" >&2
    exit 1
fi
per=$(( total / ${#targets[@]} ))
(( per >= 1 )) || per=1

# Safe Rust gains little from AddressSanitizer, and it slows fuzzing down; debug assertions
# (overflow checks, debug_assert!) find more here. Build and run must use the same flags.
flags=(--sanitizer=none --debug-assertions)

# Build once up front, so the time budget is spent fuzzing, not compiling.
cargo +nightly fuzz build "${flags[@]}"

mkdir -p corpus/frontend corpus/c_abi
cp ../elements/*.weft seeds/frontend/*.weft corpus/frontend/
# Inputs that once found a bug, kept so a change that brings it back is found at once.
cp seeds/c_abi/* corpus/c_abi/

# Input size caps: element files are small; the generator's input is a list of choices.
declare -A max_len=([frontend]=8192 [generated]=4096 [jit_vs_interp]=4096 [c_abi]=2048)
# c_abi's input is decoded by `arbitrary`, 4 bytes for each choice of a variant: inputs as
# short as libFuzzer's length control starts them with leave every call at its first
# variants, and a metadata entry takes some 60 bytes to reach.
declare -A extra=([c_abi]="-len_control=0")

failed=()
for t in "${targets[@]}"; do
    echo "== fuzzing $t for ${per}s"
    mkdir -p "corpus/$t"
    # -timeout: any single input slower than 10 s is a hang; -rss_limit_mb: a blow-up.
    # shellcheck disable=SC2086 # the extra options are words
    if ! cargo +nightly fuzz run "${flags[@]}" "$t" "corpus/$t" -- \
        -max_total_time="$per" -timeout=10 -rss_limit_mb=4096 \
        -max_len="${max_len[$t]:-4096}" -print_final_stats=1 ${extra[$t]:-}; then
        failed+=("$t")
    fi
done

if (( ${#failed[@]} > 0 )); then
    echo "fuzzing found problems in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzzing: no crash in ${#targets[@]} targets (${per}s each)"
