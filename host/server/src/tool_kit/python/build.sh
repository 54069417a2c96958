#!/usr/bin/env bash
# Builds the component, offline once componentize-py is installed:
#
#   pip install componentize-py==0.25.1 && ./build.sh tool.wasm
#
# --stub-wasi: the Python runtime's WASI imports become stubs, so that the
# component asks for no capability (the service refuses one that does).
set -euo pipefail
cd "$(dirname "$0")"
componentize-py -d wit -w tool componentize --stub-wasi -p . tool -o "${1:-tool.wasm}"
