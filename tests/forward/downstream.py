"""A downstream service over https for the consumer's `http` handler: verifies every forward with the official
Standard Webhooks library for Python (`standardwebhooks`, pinned in tests/tools/sdk-requirements.txt) and answers
204 when one of its secrets verifies it, 401 otherwise. HTTP/1.1 only (the standard library's server offers no
HTTP/2), with keep-alive.

    python downstream.py --cert server.pem --key server.key --secrets secrets.json

Prints {"port": N} once listening, then one JSON line per request (the same fields as downstream.mjs). Stops
when its standard input closes (the test that started it ended).
"""

import argparse
import http.server
import json
import ssl
import sys
import threading

from standardwebhooks.webhooks import Webhook

KEPT_HEADERS = ["idempotency-key", "authorization", "x-github-event", "x-hub-signature-256", "x-hookline-event-id"]
print_lock = threading.Lock()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--secrets", required=True)
    args = parser.parse_args()
    with open(args.secrets, encoding="utf-8") as file:
        verifiers = [Webhook(secret) for secret in json.load(file)]
    connections = {}

    class Downstream(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            headers = {name.lower(): value for name, value in self.headers.items()}
            verified_with, error = None, None
            for index, verifier in enumerate(verifiers):
                try:
                    verifier.verify(body, headers, json_parse=False)
                    verified_with = index
                    break
                except Exception as caught:  # the library's WebhookVerificationError, or a malformed header
                    error = str(caught)
            with print_lock:
                connection = connections.setdefault(self.client_address, len(connections) + 1)
                line = {
                    "verified": verified_with is not None,
                    "verified_with": verified_with,
                    "error": error if verified_with is None else None,
                    "webhook_id": headers.get("webhook-id"),
                    "n_signatures": len(headers.get("webhook-signature", "").split()),
                    "http_version": self.request_version.removeprefix("HTTP/"),
                    "connection": connection,
                    "headers": {name: headers[name] for name in KEPT_HEADERS if name in headers},
                    "body_bytes": len(body),
                    # The body itself when small (a transformed forward's is compared): a large one only counted.
                    "body": body.decode("utf-8", "replace") if len(body) <= 4096 else None,
                }
                sys.stdout.write(json.dumps(line) + "\n")
                sys.stdout.flush()
            if verified_with is not None:
                self.send_response(204)
                self.send_header("content-length", "0")
                self.end_headers()
            else:
                refused = b"signature refused"
                self.send_response(401)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", str(len(refused)))
                self.end_headers()
                self.wfile.write(refused)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Downstream)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdout.write(json.dumps({"port": server.server_address[1]}) + "\n")
    sys.stdout.flush()
    sys.stdin.read()


if __name__ == "__main__":
    main()
