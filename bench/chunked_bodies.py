#!/usr/bin/env python3
"""N concurrent HTTP/1.1 requests whose bodies arrive in one-byte chunks, against a gateway source.

Issue 11, item 2: a body sent as `Transfer-Encoding: chunked` with one byte per chunk (`1\\r\\nX\\r\\n`) made the
gateway hold far more memory than the body. This client opens N connections to 127.0.0.1 (loopback only), sends
each one request head and then its whole chunked body in large writes (so the client is not the bottleneck), and
reads the answers. It measures nothing about the gateway itself: the caller reads the gateway's VmHWM.

By default the signature is forged (`sha256=00..`), which is what an attacker can send: the gateway must read the
whole body before it can refuse it (401). `--secret-file` signs validly instead (GitHub scheme).

Bounded: N <= 256, every socket operation times out after --timeout-s, and the run stops after --deadline-s.
Prints one JSON object: statuses, seconds, bytes sent.
"""

import argparse
import hashlib
import hmac
import json
import socket
import sys
import threading
import time
import uuid


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="gateway public port on 127.0.0.1")
    parser.add_argument("--source", default="bench-github", help="served at POST /webhooks/<source>")
    parser.add_argument("--concurrency", type=int, default=1, help="requests at once (one connection each)")
    parser.add_argument("--body-bytes", type=int, default=1_000_000)
    parser.add_argument("--write-bytes", type=int, default=1 << 20, help="bytes per socket write")
    parser.add_argument("--secret-file", help="sign validly with this GitHub secret (default: forged signature)")
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--deadline-s", type=float, default=300.0)
    args = parser.parse_args()
    if not 1 <= args.concurrency <= 256:
        parser.error("--concurrency must be 1..256")
    if not 1 <= args.body_bytes <= 64 << 20:
        parser.error("--body-bytes must be 1..64 MiB")

    body = b"X" * args.body_bytes
    if args.secret_file:
        with open(args.secret_file, "rb") as f:
            secret = f.read().rstrip(b"\r\n")
        signature = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    else:
        signature = "sha256=" + "00" * 32
    # The whole chunked body on the wire: one `1\r\nX\r\n` per byte, then the last chunk.
    wire_body = b"1\r\nX\r\n" * args.body_bytes + b"0\r\n\r\n"

    results: list[dict] = [{} for _ in range(args.concurrency)]
    start_barrier = threading.Barrier(args.concurrency + 1)
    deadline = time.monotonic() + args.deadline_s

    def one(index: int) -> None:
        result = results[index]
        try:
            sock = socket.create_connection(("127.0.0.1", args.port), timeout=args.timeout_s)
        except OSError as error:
            result["error"] = f"connect: {error}"
            start_barrier.wait()
            return
        head = (
            f"POST /webhooks/{args.source} HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{args.port}\r\n"
            "Content-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n"
            "X-GitHub-Event: push\r\n"
            f"X-GitHub-Delivery: {uuid.uuid4()}\r\n"
            f"X-Hub-Signature-256: {signature}\r\n"
            "Connection: close\r\n"
            "\r\n"
        ).encode()
        start_barrier.wait()
        began = time.monotonic()
        try:
            sock.sendall(head)
            view = memoryview(wire_body)
            for offset in range(0, len(view), args.write_bytes):
                if time.monotonic() > deadline:
                    raise TimeoutError("run deadline")
                sock.sendall(view[offset : offset + args.write_bytes])
            result["sent_s"] = round(time.monotonic() - began, 3)
            answer = b""
            while b"\r\n" not in answer and len(answer) < 65536:
                piece = sock.recv(4096)
                if not piece:
                    break
                answer += piece
            status_line = answer.split(b"\r\n", 1)[0].decode(errors="replace")
            result["status"] = status_line.split(" ")[1] if status_line.count(" ") >= 1 else f"?{status_line!r}"
            result["answered_s"] = round(time.monotonic() - began, 3)
        except OSError as error:  # includes timeouts and resets (the gateway may close early)
            result["error"] = f"{type(error).__name__}: {error}"
            result["after_s"] = round(time.monotonic() - began, 3)
        finally:
            sock.close()

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(args.concurrency)]
    for thread in threads:
        thread.start()
    start_barrier.wait()
    began = time.monotonic()
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
    statuses: dict[str, int] = {}
    for result in results:
        key = result.get("status") or ("error: " + result.get("error", "unfinished"))
        statuses[key] = statuses.get(key, 0) + 1
    report = {
        "concurrency": args.concurrency,
        "body_bytes": args.body_bytes,
        "wire_bytes_per_request": len(wire_body),
        "signature": "valid" if args.secret_file else "forged",
        "statuses": statuses,
        "seconds": round(time.monotonic() - began, 3),
        "max_answered_s": max((r.get("answered_s", 0.0) for r in results), default=0.0),
    }
    print(json.dumps(report))
    return 0 if all("status" in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
