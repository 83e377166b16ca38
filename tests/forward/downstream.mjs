// A downstream service over https for the consumer's `http` handler: verifies every forward with the official
// Standard Webhooks library for JavaScript (`standardwebhooks` on npm) and answers 204 when one of its secrets
// verifies it, 401 otherwise. Offers HTTP/2 through ALPN (HTTP/1.1 too), so the test sees which one was spoken.
//
//   node downstream.mjs --cert server.pem --key server.key --secrets secrets.json [--client-ca ca.pem]
//
// With --client-ca it requires a client certificate that CA signed (mutual TLS) and reports its common name.
// Prints {"port": N} once listening, then one JSON line per request: whether it verified and with which secret,
// the HTTP version, a connection number (the same for requests on one connection), and the headers a test
// asserts on. Stops when its standard input closes (the test that started it ended).
import { readFileSync } from "node:fs";
import { createSecureServer } from "node:http2";
import { Webhook } from "standardwebhooks";

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const secrets = JSON.parse(readFileSync(args.secrets, "utf8"));
const verifiers = secrets.map((secret) => new Webhook(secret));

const connections = new WeakMap();
let nConnections = 0;
const connectionOf = (key) => {
  if (!connections.has(key)) connections.set(key, ++nConnections);
  return connections.get(key);
};

const KEPT_HEADERS = ["idempotency-key", "authorization", "x-github-event", "x-hub-signature-256", "x-hookline-event-id"];

const server = createSecureServer(
  {
    cert: readFileSync(args.cert),
    key: readFileSync(args.key),
    allowHTTP1: true,
    ...(args["client-ca"] ? { requestCert: true, rejectUnauthorized: true, ca: readFileSync(args["client-ca"]) } : {}),
  },
  (request, response) => {
    const chunks = [];
    request.on("data", (chunk) => chunks.push(chunk));
    request.on("end", () => {
      const body = Buffer.concat(chunks);
      const headers = {};
      for (const [name, value] of Object.entries(request.headers)) {
        if (!name.startsWith(":")) headers[name] = Array.isArray(value) ? value.join(", ") : value;
      }
      let verifiedWith = null;
      let error = null;
      for (const [index, verifier] of verifiers.entries()) {
        try {
          verifier.verify(body, headers);
          verifiedWith = index;
          break;
        } catch (caught) {
          error = String(caught.message ?? caught);
        }
      }
      const kept = {};
      for (const name of KEPT_HEADERS) if (name in headers) kept[name] = headers[name];
      const line = {
        verified: verifiedWith !== null,
        verified_with: verifiedWith,
        error: verifiedWith === null ? error : null,
        webhook_id: headers["webhook-id"] ?? null,
        n_signatures: (headers["webhook-signature"] ?? "").split(" ").filter(Boolean).length,
        http_version: request.httpVersion,
        client_cn: (request.stream ? request.stream.session.socket : request.socket).getPeerCertificate?.()?.subject?.CN ?? null,
        connection: connectionOf(request.stream ? request.stream.session : request.socket),
        headers: kept,
        body_bytes: body.length,
        // The body itself when small (a transformed forward's is compared): a large one only counted.
        body: body.length <= 4096 ? body.toString("utf8") : null,
      };
      process.stdout.write(`${JSON.stringify(line)}\n`);
      if (verifiedWith !== null) {
        response.writeHead(204);
        response.end();
      } else {
        response.writeHead(401, { "content-type": "text/plain" });
        response.end("signature refused");
      }
    });
  },
);
server.listen(0, "127.0.0.1", () => process.stdout.write(`${JSON.stringify({ port: server.address().port })}\n`));
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
