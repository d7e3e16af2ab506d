#!/usr/bin/env bash
# Installs what building and testing Weft needs on a fresh Debian machine, and nothing when
# it is already there. Rust comes from rustup (preinstalled on our machines); the Rust side
# compiles .proto files in-process (protox); protoc is for the generated Go code.
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

# `make aarch64-test` runs the JIT's aarch64 objects: the Rust target, a cross linker with
# the aarch64 C library, and qemu's user-mode emulator.
if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
    echo "install-deps: adding rustup target aarch64-unknown-linux-gnu"
    rustup target add aarch64-unknown-linux-gnu
fi
if ! need_cmd aarch64-linux-gnu-gcc || ! need_cmd qemu-aarch64 \
    || [ ! -e /usr/aarch64-linux-gnu/lib/libc.so ]; then
    if need_cmd apt-get; then
        echo "install-deps: installing qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        $SUDO apt-get update -qq \
            && $SUDO apt-get install -y -qq qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross
    else
        echo "install-deps: aarch64-linux-gnu-gcc or qemu-aarch64 is missing" \
            "(Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)" >&2
        exit 1
    fi
fi

# The Go binding and its example: Go itself (1.26+, preinstalled on our machines), protoc from
# Debian, and the protoc plugins from the Go module proxy at pinned versions. The generated
# *.pb.go files are not committed; `make go-gen` writes them.
if ! need_cmd go; then
    echo "install-deps: go is missing; install Go 1.26 or later (https://go.dev/dl)" >&2
    exit 1
fi
if ! need_cmd protoc; then
    if need_cmd apt-get; then
        echo "install-deps: installing protobuf-compiler"
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        $SUDO apt-get update -qq && $SUDO apt-get install -y -qq protobuf-compiler
    else
        echo "install-deps: protoc is missing (Debian: protobuf-compiler)" >&2
        exit 1
    fi
fi
GOBIN_DIR="$(go env GOBIN)"; [ -n "$GOBIN_DIR" ] || GOBIN_DIR="$(go env GOPATH)/bin"
if [ ! -x "$GOBIN_DIR/protoc-gen-go" ]; then
    echo "install-deps: installing protoc-gen-go"
    go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
fi
if [ ! -x "$GOBIN_DIR/protoc-gen-go-grpc" ]; then
    echo "install-deps: installing protoc-gen-go-grpc"
    go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
fi
