"""Schemathesis hooks for tests/fuzz/run.py (loaded through SCHEMATHESIS_HOOKS).

A tool component is uploaded as raw bytes (`PUT /v1/tsl/tool/{tool_id}/component`,
Content-Type application/wasm): generated bodies are sent the way schemathesis
sends any other binary body.
"""

import schemathesis

schemathesis.serializer.alias("application/wasm", "application/octet-stream")
