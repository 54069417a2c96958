#!/usr/bin/env bash
# Builds the Python example tool into a component of anchor:tool@1.0.0 world
# `tool`, offline:
#
#   plugins/tools/example-py/build.sh OUT.wasm
#
# componentize-py (pinned in requirements.txt) comes from COMPONENTIZE_PY,
# else from the PATH. --stub-wasi replaces every WASI import of the Python
# runtime with a stub, so that the component asks for no capability: the
# service would refuse one that did.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: build.sh OUT.wasm}"
componentize="${COMPONENTIZE_PY:-componentize-py}"
"$componentize" -d "$here/../../../wit/tool@1.0.0" -w tool componentize --stub-wasi -p "$here" tool -o "$out"
