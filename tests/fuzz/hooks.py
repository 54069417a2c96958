"""Schemathesis hooks for tests/fuzz/run.py (loaded through SCHEMATHESIS_HOOKS).

Bodies that are raw bytes are sent the way schemathesis sends any other
binary body: a tool component (`PUT /v1/tsl/tool/{tool_id}/component`,
Content-Type application/wasm) and a SCITT signed statement (`POST /entries`,
Content-Type application/cose).
"""

import schemathesis

schemathesis.serializer.alias("application/wasm", "application/octet-stream")
schemathesis.serializer.alias("application/cose", "application/octet-stream")
