"""A facilitator's `GET /supported` over HTTPS, and nothing else: for the
test that a host in facilitator mode reaches an https:// facilitator and
checks its certificate. Usage: https_supported.py CERT KEY PORT"""

import http.server
import json
import ssl
import sys

SUPPORTED = {"kinds": [{"x402Version": 2, "scheme": "exact", "network": "eip155:8453"}]}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(SUPPORTED).encode() if self.path == "/supported" else b"{}"
        self.send_response(200 if self.path == "/supported" else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


cert, key, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
server = http.server.HTTPServer(("127.0.0.1", port), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
server.serve_forever()
