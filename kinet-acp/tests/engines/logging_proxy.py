#!/usr/bin/env python3
"""Logging forward HTTP proxy (python3 stdlib only).

Handles plain absolute-URI requests (GET/POST/... http://host/path) by
forwarding them, and CONNECT host:port by tunnelling bytes.  Every request
line is appended as one JSON line to --log, so one can tell whether a client
honoured HTTP_PROXY / HTTPS_PROXY for a given destination.

  python3 logging_proxy.py --port 18128 --log /tmp/proxy.jsonl
"""
import argparse
import json
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

ARGS = None
LOCK = threading.Lock()


def log(entry):
    with LOCK:
        with open(ARGS.log, "a") as f:
            f.write(json.dumps(entry) + "\n")


class P(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        pass

    def do_CONNECT(self):
        log({"t": time.time(), "method": "CONNECT", "target": self.path,
             "ua": self.headers.get("User-Agent")})
        host, _, port = self.path.rpartition(":")
        try:
            up = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        except Exception as e:
            self.send_error(502, str(e))
            return
        self.send_response(200, "Connection Established")
        self.end_headers()
        self.close_connection = True
        a, b = self.connection, up
        try:
            while True:
                r, _, _ = select.select([a, b], [], [], 60)
                if not r:
                    break
                for s in r:
                    d = s.recv(65536)
                    if not d:
                        return
                    (b if s is a else a).sendall(d)
        finally:
            up.close()

    def _forward(self):
        u = urlsplit(self.path)
        log({"t": time.time(), "method": self.command, "target": self.path,
             "ua": self.headers.get("User-Agent")})
        if not u.hostname:
            self.send_error(400, "not a proxy request")
            return
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        try:
            up = socket.create_connection((u.hostname, u.port or 80), timeout=30)
        except Exception as e:
            self.send_error(502, str(e))
            return
        path = (u.path or "/") + ("?" + u.query if u.query else "")
        lines = ["%s %s HTTP/1.1" % (self.command, path)]
        for k, v in self.headers.items():
            if k.lower() in ("proxy-connection", "proxy-authorization", "connection",
                             "keep-alive"):
                continue
            lines.append("%s: %s" % (k, v))
        lines.append("Connection: close")
        up.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        self.close_connection = True
        try:
            while True:
                d = up.recv(65536)
                if not d:
                    break
                self.connection.sendall(d)
        finally:
            up.close()

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _forward


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=18128)
    ap.add_argument("--log", default="/tmp/logging_proxy.jsonl")
    ARGS = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), P)
    srv.daemon_threads = True
    print("proxy listening on 127.0.0.1:%d" % srv.server_port, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
