#!/usr/bin/env python3
"""Drive an Agent Client Protocol agent (JSON-RPC 2.0, newline-delimited stdio)
through initialize -> session/new -> session/prompt, printing every message.

python3 stdlib only.  Usage:

  probe_acp.py [--cwd DIR] [--prompt TEXT] [--timeout S] [--env K=V ...] [--unset K ...]
               [--auth-method ID] [--clear-env] [--stderr FILE] -- CMD ARGS...

Requests from the agent are answered:
  fs/read_text_file          -> the file's text (line/limit honoured)
  fs/write_text_file         -> JSON-RPC error (client declared writeTextFile:false)
  session/request_permission -> a reject_* option if offered, else {outcome:"cancelled"}
  anything else              -> -32601 method not found
Exit status 0 when a stopReason came back, 1 otherwise.
"""
import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

T0 = time.monotonic()


def ts():
    return "%7.3fs" % (time.monotonic() - T0)


def short(obj, n):
    s = json.dumps(obj, ensure_ascii=False)
    return s if n <= 0 or len(s) <= n else s[:n] + "...(%d chars)" % len(s)


class Agent:
    def __init__(self, cmd, env, cwd, stderr_path, maxlen):
        self.maxlen = maxlen
        self.stderr_f = open(stderr_path, "wb") if stderr_path else None
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env, cwd=cwd,
                                  start_new_session=True)
        self.q = queue.Queue()
        self.next_id = 0
        self.wlock = threading.Lock()
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self):
        for line in self.p.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                self.q.put(json.loads(line))
            except ValueError:
                print("%s !! non-JSON stdout: %r" % (ts(), line[:300]), flush=True)
        self.q.put(None)

    def _read_err(self):
        for line in self.p.stderr:
            if self.stderr_f:
                self.stderr_f.write(line)
                self.stderr_f.flush()
            else:
                sys.stdout.write("%s [stderr] %s" % (ts(), line.decode("utf-8", "replace")))
                sys.stdout.flush()

    def send(self, msg):
        print("%s >> %s" % (ts(), short(msg, self.maxlen)), flush=True)
        data = (json.dumps(msg) + "\n").encode()
        with self.wlock:
            self.p.stdin.write(data)
            self.p.stdin.flush()

    def request(self, method, params, timeout, on_message):
        self.next_id += 1
        rid = self.next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("%s: no response within %ss" % (method, timeout))
            try:
                msg = self.q.get(timeout=left)
            except queue.Empty:
                continue
            if msg is None:
                raise EOFError("%s: agent closed stdout (exit %s)" % (method, self.p.poll()))
            if "id" in msg and "method" not in msg and msg["id"] == rid:
                print("%s << %s" % (ts(), short(msg, self.maxlen)), flush=True)
                if "error" in msg:
                    raise RuntimeError("%s failed: %s" % (method, json.dumps(msg["error"])))
                return msg.get("result")
            on_message(msg)

    def _killpg(self, sig):
        try:
            os.killpg(self.p.pid, sig)
        except ProcessLookupError:
            pass

    def close(self, exit_wait):
        t = time.monotonic()
        try:
            self.p.stdin.close()
        except Exception:
            pass
        try:
            self.p.wait(timeout=exit_wait)
            print("%s == agent exited by itself %.2fs after stdin EOF, code %s"
                  % (ts(), time.monotonic() - t, self.p.returncode), flush=True)
            self._killpg(signal.SIGKILL)  # any stragglers in its group
            return
        except subprocess.TimeoutExpired:
            pass
        # Signal the whole process group: the npm launchers (codex-acp's node
        # wrapper, claude-code-acp's CLI child) otherwise leave orphans behind.
        self._killpg(signal.SIGTERM)
        try:
            self.p.wait(timeout=5)
            how = "SIGTERM to process group"
        except subprocess.TimeoutExpired:
            self._killpg(signal.SIGKILL)
            self.p.wait()
            how = "SIGKILL to process group"
        print("%s == agent still running %.1fs after stdin EOF; ended by %s (code %s)"
              % (ts(), exit_wait, how, self.p.returncode), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cwd", help="session cwd (default: a new temp dir)")
    ap.add_argument("--prompt", default="Say hello")
    ap.add_argument("--timeout", type=float, default=120, help="per-request timeout")
    ap.add_argument("--init-timeout", type=float, default=60)
    ap.add_argument("--env", action="append", default=[], help="K=V added to environment")
    ap.add_argument("--clear-env", action="store_true",
                    help="start from PATH/HOME/LANG only instead of the full environment")
    ap.add_argument("--unset", action="append", default=[], help="remove K from environment")
    ap.add_argument("--auth-method", help="call authenticate with this methodId first")
    ap.add_argument("--model", help="call session/set_model with this modelId")
    ap.add_argument("--stderr", help="write agent stderr here instead of echoing it")
    ap.add_argument("--exit-wait", type=float, default=5,
                    help="seconds to wait for exit after closing stdin before SIGTERM")
    ap.add_argument("--maxlen", type=int, default=600, help="truncate printed messages")
    ap.add_argument("cmd", nargs="+")
    a = ap.parse_args()

    if a.clear_env:
        env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TERM") if k in os.environ}
    else:
        env = dict(os.environ)
    for k in a.unset:
        env.pop(k, None)
    for kv in a.env:
        k, _, v = kv.partition("=")
        env[k] = v
    cwd = a.cwd or tempfile.mkdtemp(prefix="acp-probe-")
    with open(os.path.join(cwd, "README.txt"), "a") as f:
        f.write("")

    agent = Agent(a.cmd, env, cwd, a.stderr, a.maxlen)
    stop = {"reason": None}
    updates = {}

    def on_message(msg):
        print("%s << %s" % (ts(), short(msg, a.maxlen)), flush=True)
        m = msg.get("method")
        if m == "session/update":
            u = (msg.get("params") or {}).get("update") or {}
            k = u.get("sessionUpdate")
            updates[k] = updates.get(k, 0) + 1
            return
        if m is None or "id" not in msg:
            return
        rid = msg["id"]
        p = msg.get("params") or {}
        if m == "fs/read_text_file":
            try:
                with open(p["path"], encoding="utf-8", errors="replace") as f:
                    lines = f.read().splitlines(True)
                start = max((p.get("line") or 1) - 1, 0)
                end = start + p["limit"] if p.get("limit") else None
                agent.send({"jsonrpc": "2.0", "id": rid,
                            "result": {"content": "".join(lines[start:end])}})
            except Exception as e:
                agent.send({"jsonrpc": "2.0", "id": rid,
                            "error": {"code": -32002, "message": "read failed: %s" % e}})
        elif m == "session/request_permission":
            opts = p.get("options") or []
            rej = [o for o in opts if str(o.get("kind", "")).startswith("reject")]
            if rej:
                out = {"outcome": "selected", "optionId": rej[0]["optionId"]}
            else:
                out = {"outcome": "cancelled"}
            agent.send({"jsonrpc": "2.0", "id": rid, "result": {"outcome": out}})
        else:
            agent.send({"jsonrpc": "2.0", "id": rid,
                        "error": {"code": -32601, "message": "method not supported: %s" % m}})

    rc = 1
    try:
        t = time.monotonic()
        init = agent.request("initialize", {
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": False},
                                   "terminal": False},
            "clientInfo": {"name": "kinet-probe", "version": "0.0.0"},
        }, a.init_timeout, on_message)
        print("%s == initialize took %.3fs (launch->response); protocolVersion=%s authMethods=%s"
              % (ts(), time.monotonic() - t, (init or {}).get("protocolVersion"),
                 [m.get("id") for m in (init or {}).get("authMethods") or []]), flush=True)
        if a.auth_method:
            agent.request("authenticate", {"methodId": a.auth_method}, a.timeout, on_message)
        sess = agent.request("session/new", {"cwd": cwd, "mcpServers": []}, a.timeout,
                             on_message)
        sid = sess["sessionId"]
        if a.model:
            agent.request("session/set_model", {"sessionId": sid, "modelId": a.model},
                          a.timeout, on_message)
        res = agent.request("session/prompt", {
            "sessionId": sid, "prompt": [{"type": "text", "text": a.prompt}]},
            a.timeout, on_message)
        stop["reason"] = (res or {}).get("stopReason")
        # drain trailing notifications briefly
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            try:
                msg = agent.q.get(timeout=0.2)
            except queue.Empty:
                continue
            if msg is None:
                break
            on_message(msg)
        print("%s == stopReason=%s updates=%s" % (ts(), stop["reason"], updates), flush=True)
        rc = 0 if stop["reason"] else 1
    except Exception as e:
        print("%s !! %s: %s" % (ts(), type(e).__name__, e), flush=True)
    finally:
        agent.close(a.exit_wait)
    return rc


if __name__ == "__main__":
    sys.exit(main())
