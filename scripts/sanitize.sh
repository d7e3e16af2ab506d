#!/usr/bin/env bash
# Runs the Rust tests under ThreadSanitizer and AddressSanitizer (LeakSanitizer included)
# and exits non-zero on any report (docs/sanitizers.md). `make sanitize`; not part of
# `make test`, which CI runs in limited time.
#
#   scripts/sanitize.sh            # both
#   scripts/sanitize.sh thread     # one of them: thread | address
#
# Installs what it needs when missing: the nightly toolchain and its rust-src (the standard
# library is rebuilt instrumented, -Zbuild-std, so that its atomics and locks are seen).
# Each sanitizer has its own target dir, target/tsan and target/asan (about 3 GB each).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

which="${1:-all}"
case "$which" in
    all | thread | address) ;;
    *)
        echo "usage: $0 [thread|address]" >&2
        exit 2
        ;;
esac

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "== installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
if ! rustup component list --toolchain nightly --installed | grep -q '^rust-src'; then
    echo "== adding rustup component rust-src to the nightly toolchain"
    rustup component add rust-src --toolchain nightly
fi

supp="$root/scripts/sanitizers"
# Sanitizers need an explicit target (the build scripts and proc macros run uninstrumented).
target=x86_64-unknown-linux-gnu
# Doctests are left out: rustdoc does not build them against the instrumented std.
# tests/c_abi.rs looks for libweft_runtime.a where a plain build puts it and links it
# without the sanitizer's runtime; the C program runs under AddressSanitizer below instead.
# `$skip` names more tests to leave out.
skip=(--skip c_program_drives_the_echo_chain)
run() {
    local san="$1" dir="$2"
    shift 2
    echo "== $san: cargo +nightly test $*"
    RUSTFLAGS="-Zsanitizer=$san" RUSTDOCFLAGS="-Zsanitizer=$san" CARGO_TARGET_DIR="$dir" \
        cargo +nightly test -Zbuild-std --target "$target" "$@" -- "${skip[@]}"
}

if [[ "$which" != address ]]; then
    # The threaded tests and what they run: the engine and the C ABI (reloads, watcher,
    # handles, records, counters; tests/ffi_threads.rs), the JIT's code lifetime and scratch,
    # the state stores. halt_on_error=0 shows every report; the exit code is still 66.
    TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1 suppressions=$supp/tsan.supp" \
        run thread target/tsan -p weft-runtime -p weft-hostcalls --lib --bins --tests
    TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1 suppressions=$supp/tsan.supp" \
        run thread target/tsan -p weft-jit --lib --test lifetime --test scenarios \
        --test host_panics --test scratch --test headers --test blocks --test random_chains
fi

if [[ "$which" != thread ]]; then
    export ASAN_OPTIONS="detect_leaks=1 detect_stack_use_after_return=1"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp print_suppressions=0"
    # held_across_reloads measures the process's resident memory, which the quarantine of
    # freed blocks (256 MB) inflates; it runs on its own below, with none.
    skip+=(--skip an_rpc_held_across_reloads_keeps_no_copies_of_the_state)
    # The planner's soundness test is safe code over the simulator; at its default 10 000
    # cases it took 6½ minutes under ASan.
    packages=(-p weft-runtime -p weft-jit -p weft-hostcalls -p weft-ir --lib --bins --tests)
    WEFT_SOUNDNESS_CASES=1000 run address target/asan "${packages[@]}"
    # The same selection, filtered to the one test: `-p weft-runtime` alone resolves other
    # features and rebuilt the dependencies.
    skip=(--exact an_rpc_held_across_reloads_keeps_no_copies_of_the_state_and_ends_on_a_small_stack)
    ASAN_OPTIONS="$ASAN_OPTIONS quarantine_size_mb=0" run address target/asan "${packages[@]}"

    # The C program of tests/c_abi.rs against the instrumented static library, with the
    # sanitizer's runtime linked in as rustc links it into Rust executables.
    echo "== address: tests/c/drive.c"
    lib="target/asan/$target/debug/deps/libweft_runtime.a"
    asan_rt="$(rustc +nightly --print target-libdir --target "$target")/librustc-nightly_rt.asan.a"
    cc -std=c11 -Wall -Wextra -Werror -I runtime/include runtime/tests/c/drive.c "$lib" \
        -Wl,--whole-archive "$asan_rt" -Wl,--no-whole-archive \
        -lpthread -ldl -lm -lrt -lstdc++ -rdynamic -o target/asan/drive
    WEFT_WATCH_MS=0 target/asan/drive examples/echo/weft.yaml
fi
echo "== sanitizers: no reports"
