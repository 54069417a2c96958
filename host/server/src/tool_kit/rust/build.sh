#!/usr/bin/env bash
# Builds the component: target/wasm32-wasip2/release/{{crate}}.wasm
set -euo pipefail
cd "$(dirname "$0")"
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
cargo build --release --target wasm32-wasip2
echo "target/wasm32-wasip2/release/{{crate}}.wasm"
