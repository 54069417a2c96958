"""An OTLP/HTTP trace receiver for the suite.

Reads each POST /v1/traces body (OTLP's JSON encoding) with OpenTelemetry's
own protobuf definitions, strictly (an unknown field or a wrong type is
refused), and appends one JSON line per span to the output file; a body it
cannot read is answered 400 and recorded as {"error": ...}.

Usage: receiver.py OUTPUT   (prints the port it listens on, then serves)
"""

import base64
import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

OUTPUT = sys.argv[1]
HEX = {"traceId": 32, "spanId": 16, "parentSpanId": 16}


def ids_to_base64(spans):
    """OTLP/JSON writes span and trace ids in hex, where protobuf's JSON
    mapping expects base64: check the hex, then convert it."""
    for span in spans:
        for key, length in HEX.items():
            if key not in span:
                continue
            value = span[key]
            if not isinstance(value, str) or not re.fullmatch(f"[0-9a-f]{{{length}}}", value):
                raise ValueError(f"{key} {value!r} is not {length} lower-case hex digits")
            span[key] = base64.b64encode(bytes.fromhex(value)).decode()


def value_of(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def record(line):
    with open(OUTPUT, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        try:
            if self.path != "/v1/traces":
                raise ValueError(f"posted to {self.path}, not /v1/traces")
            if not self.headers.get("content-type", "").startswith("application/json"):
                raise ValueError(f"content-type {self.headers.get('content-type')!r}")
            document = json.loads(body)
            for resource_spans in document.get("resourceSpans", []):
                for scope_spans in resource_spans.get("scopeSpans", []):
                    ids_to_base64(scope_spans.get("spans", []))
            request = json_format.Parse(json.dumps(document), ExportTraceServiceRequest(), ignore_unknown_fields=False)
        except Exception as error:  # noqa: BLE001 - every failure is the exporter's to see
            record({"error": str(error)})
            self.send_response(400)
            self.end_headers()
            return
        for resource_spans in request.resource_spans:
            resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    record({
                        "resource": resource,
                        "scope": scope_spans.scope.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "attributes": {a.key: value_of(a.value) for a in span.attributes},
                        "status_code": span.status.code,
                    })
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
