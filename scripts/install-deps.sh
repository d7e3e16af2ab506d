#!/usr/bin/env bash
# Installs what building and testing Weft needs on a fresh Debian machine, and nothing when
# it is already there. Rust comes from rustup (preinstalled on our machines); the .proto
# files are compiled in-process (protox), so no protoc is needed yet.
set -euo pipefail

need_cmd() { command -v "$1" >/dev/null 2>&1; }

if ! need_cmd cargo; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "install-deps: cargo is missing; install Rust with rustup (https://rustup.rs)" >&2
        exit 1
    fi
fi

# rustfmt and clippy are rustup components of the stable toolchain.
for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
        echo "install-deps: adding rustup component $component"
        rustup component add "$component"
    fi
done

# C toolchain for crates with build scripts (ring-free today, but cc-based crates appear
# with the JIT and runtime issues).
if ! need_cmd cc; then
    if need_cmd apt-get; then
        echo "install-deps: installing build-essential"
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        $SUDO apt-get update -qq && $SUDO apt-get install -y -qq build-essential
    else
        echo "install-deps: a C compiler (cc) is missing" >&2
        exit 1
    fi
fi
