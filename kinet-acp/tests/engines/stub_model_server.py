#!/usr/bin/env python3
"""Tiny fixed-answer model server (python3 stdlib only) for probing ACP agents.

Speaks, always answering with the text in --text (default "ENGINE-OK"):
  * OpenAI chat completions  POST {/v1,}/chat/completions   (stream and not)
  * OpenAI responses         POST {/v1,}/responses          (stream and not; codex)
  * OpenAI models            GET  {/v1,}/models
  * Anthropic messages       POST /v1/messages              (stream and not)
                             POST /v1/messages/count_tokens
  * Gemini                   POST /v1beta/models/M:generateContent
                             POST /v1beta/models/M:streamGenerateContent(?alt=sse)
                             POST /v1beta/models/M:countTokens
Every request (method, path, selected headers, JSON body) is appended as one
JSON line to --log.

  python3 stub_model_server.py --port 18080 --log /tmp/stub.jsonl
"""
import argparse
import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOCK = threading.Lock()


def log(entry):
    with LOCK:
        with open(ARGS.log, "a") as f:
            f.write(json.dumps(entry) + "\n")


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):  # quiet
        pass

    # ---- helpers -------------------------------------------------------
    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not n and self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            raw = b"".join(chunks)
        try:
            return json.loads(raw) if raw else None
        except Exception:
            return {"_raw": raw[:2000].decode("utf-8", "replace")}

    def _json(self, obj, code=200):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse_start(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _sse(self, data, event=None):
        s = ""
        if event:
            s += "event: %s\n" % event
        s += "data: %s\n\n" % (data if isinstance(data, str) else json.dumps(data))
        self.wfile.write(s.encode())
        self.wfile.flush()

    def _record(self, body):
        hdr = {k: v for k, v in self.headers.items()
               if k.lower() in ("host", "user-agent", "authorization", "x-api-key",
                                "anthropic-version", "x-goog-api-key", "content-type",
                                "proxy-authorization", "anthropic-beta")}
        log({"t": time.time(), "method": self.command, "path": self.path,
             "headers": hdr, "body": body})

    # ---- routes --------------------------------------------------------
    def do_GET(self):
        self._record(None)
        p = self.path.split("?")[0]
        if p.endswith("/models"):
            return self._json({"object": "list", "data": [
                {"id": ARGS.model, "object": "model", "created": 0, "owned_by": "stub"}]})
        if p in ("/health", "/"):
            return self._json({"status": "ok"})
        return self._json({"error": {"message": "not found: " + p}}, 404)

    def do_POST(self):
        body = self._body()
        self._record(body)
        p = self.path.split("?")[0]
        b = body if isinstance(body, dict) else {}
        if p.endswith("/chat/completions"):
            return self.openai_chat(b)
        if p.endswith("/responses"):
            return self.openai_responses(b)
        if p.endswith("/messages/count_tokens"):
            return self._json({"input_tokens": 10})
        if p.endswith("/messages"):
            return self.anthropic(b)
        if ":countTokens" in p:
            return self._json({"totalTokens": 10})
        if ":streamGenerateContent" in p:
            return self.gemini(stream=True)
        if ":generateContent" in p:
            return self.gemini(stream=False)
        return self._json({"error": {"message": "not found: " + p}}, 404)

    def openai_chat(self, b):
        model = b.get("model", ARGS.model)
        cid = "chatcmpl-" + uuid.uuid4().hex[:12]
        now = int(time.time())
        usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
        if not b.get("stream"):
            return self._json({"id": cid, "object": "chat.completion", "created": now,
                               "model": model, "choices": [{
                                   "index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": ARGS.text}}],
                               "usage": usage})
        self._sse_start()
        base = {"id": cid, "object": "chat.completion.chunk", "created": now, "model": model}
        self._sse(dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                       "finish_reason": None}]))
        self._sse(dict(base, choices=[{"index": 0, "delta": {"content": ARGS.text},
                                       "finish_reason": None}]))
        self._sse(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]))
        if (b.get("stream_options") or {}).get("include_usage"):
            self._sse(dict(base, choices=[], usage=usage))
        self._sse("[DONE]")

    def openai_responses(self, b):
        model = b.get("model", ARGS.model)
        rid = "resp_" + uuid.uuid4().hex[:12]
        mid = "msg_" + uuid.uuid4().hex[:12]
        item = {"type": "message", "id": mid, "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": ARGS.text, "annotations": []}]}
        usage = {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12,
                 "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens_details": {"reasoning_tokens": 0}}
        resp = {"id": rid, "object": "response", "created_at": int(time.time()),
                "status": "completed", "model": model, "output": [item], "usage": usage}
        if not b.get("stream"):
            return self._json(resp)
        self._sse_start()
        inprog = dict(resp, status="in_progress", output=[])
        self._sse({"type": "response.created", "response": inprog}, "response.created")
        self._sse({"type": "response.output_item.added", "output_index": 0,
                   "item": dict(item, status="in_progress", content=[])},
                  "response.output_item.added")
        self._sse({"type": "response.output_text.delta", "item_id": mid, "output_index": 0,
                   "content_index": 0, "delta": ARGS.text}, "response.output_text.delta")
        self._sse({"type": "response.output_item.done", "output_index": 0, "item": item},
                  "response.output_item.done")
        self._sse({"type": "response.completed", "response": resp}, "response.completed")

    def anthropic(self, b):
        model = b.get("model", ARGS.model)
        mid = "msg_" + uuid.uuid4().hex[:12]
        usage = {"input_tokens": 10, "output_tokens": 2}
        if not b.get("stream"):
            return self._json({"id": mid, "type": "message", "role": "assistant",
                               "model": model, "content": [{"type": "text", "text": ARGS.text}],
                               "stop_reason": "end_turn", "stop_sequence": None,
                               "usage": usage})
        self._sse_start()
        self._sse({"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1}}}, "message_start")
        self._sse({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "text", "text": ""}}, "content_block_start")
        self._sse({"type": "ping"}, "ping")
        self._sse({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": ARGS.text}}, "content_block_delta")
        self._sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
        self._sse({"type": "message_delta",
                   "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                   "usage": {"output_tokens": 2}}, "message_delta")
        self._sse({"type": "message_stop"}, "message_stop")

    def gemini(self, stream):
        resp = {"candidates": [{"content": {"role": "model", "parts": [{"text": ARGS.text}]},
                                "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 2,
                                  "totalTokenCount": 12},
                "modelVersion": ARGS.model}
        if not stream:
            return self._json(resp)
        self._sse_start()
        self._sse(resp)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--log", default="/tmp/stub_model_server.jsonl")
    ap.add_argument("--text", default="ENGINE-OK")
    ap.add_argument("--model", default="stub-model")
    ARGS = ap.parse_args()
    srv = ThreadingHTTPServer((ARGS.host, ARGS.port), H)
    srv.daemon_threads = True
    print("stub listening on %s:%d" % (ARGS.host, srv.server_port), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
