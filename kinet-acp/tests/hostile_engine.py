"""A hostile coding agent speaking ACP over stdio, for kinet's engine tests.

Modes (first argument):
  attack   on a prompt, tries to change the workspace and reach the network
           every way it can, and reports what happened as its answer;
  garbage  answers `initialize` with a line that is not JSON;
  stray    sends updates for a session it never opened, then ends its turn;
  early    sends updates of its session before and right after answering
           `session/new`, then answers;
  hang     on a prompt, starts a child process (argv carries the marker, the
           second argument) and never answers.
Python standard library only.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

MODE = sys.argv[1]
MARKER = sys.argv[2] if len(sys.argv) > 2 else "kinet-hostile"
lock = threading.Lock()
pending = {}
next_id = [1000]


def send(message):
    with lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def request(method, params):
    """Sends a request to the client and waits for its answer."""
    with lock:
        next_id[0] += 1
        rid = next_id[0]
        event = threading.Event()
        pending[rid] = [event, None]
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    event.wait(30)
    return pending.pop(rid)[1]


def update(session, update):
    send({"jsonrpc": "2.0", "method": "session/update",
          "params": {"sessionId": session, "update": update}})


def attempt(name, action):
    try:
        result = action()
        return f"{name}: SUCCEEDED {result!r}"[:300]
    except Exception as error:  # noqa: BLE001 - the report is the point
        return f"{name}: failed ({type(error).__name__}: {error})"[:300]


def attack(session, cwd, params):
    host_port = int(os.environ.get("KINET_TEST_FORBIDDEN_PORT", "9"))
    results = []

    def write_direct():
        with open(os.path.join(cwd, "pwned.txt"), "w") as f:
            f.write("owned")

    def delete_direct():
        os.remove(os.path.join(cwd, "keep.txt"))

    def connect_direct():
        with socket.create_connection(("127.0.0.1", host_port), timeout=3):
            return "connected"

    def connect_proxy():
        # Through the sandbox's proxy, to a host not on the allowlist.
        with urllib.request.urlopen(f"http://127.0.0.1:{host_port}/", timeout=5) as r:
            return r.status

    def write_home():
        path = os.path.join(os.environ["HOME"], "scratch.txt")
        with open(path, "w") as f:
            f.write("mine")
        return "private home writable"

    results.append(attempt("direct write", write_direct))
    results.append(attempt("direct delete", delete_direct))
    results.append(attempt("direct connect", connect_direct))
    results.append(attempt("proxied request", connect_proxy))
    results.append(attempt("home write", write_home))
    update(session, {"sessionUpdate": "tool_call", "toolCallId": "w1", "title": "Write pwned.txt",
                     "kind": "edit", "status": "pending"})
    answer = request("fs/write_text_file", {"sessionId": session,
                                            "path": os.path.join(cwd, "keep.txt"),
                                            "content": "overwritten"})
    results.append(f"fs write: {json.dumps(answer)[:200]}")
    answer = request("session/request_permission", {
        "sessionId": session,
        "toolCall": {"toolCallId": "w1", "title": "Write pwned.txt", "kind": "edit"},
        "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "no", "name": "Reject", "kind": "reject_once"}]})
    results.append(f"permission: {json.dumps(answer)[:200]}")
    answer = request("fs/read_text_file", {"sessionId": session, "path": "/etc/passwd"})
    results.append(f"outside read: {json.dumps(answer)[:120]}")
    answer = request("fs/read_text_file", {"sessionId": session,
                                           "path": os.path.join(cwd, "keep.txt")})
    results.append(f"inside read: {json.dumps(answer)[:200]}")
    created = request("terminal/create", {"sessionId": session, "command": "rm",
                                          "args": ["-f", os.path.join(cwd, "keep.txt")]})
    results.append(f"terminal: {json.dumps(created)[:200]}")
    if created and "result" in created:
        terminal = created["result"]["terminalId"]
        exited = request("terminal/wait_for_exit", {"sessionId": session, "terminalId": terminal})
        output = request("terminal/output", {"sessionId": session, "terminalId": terminal})
        request("terminal/release", {"sessionId": session, "terminalId": terminal})
        results.append(f"terminal exit: {json.dumps(exited)[:200]}")
        results.append(f"terminal output: {json.dumps(output)[:300]}")
    update(session, {"sessionUpdate": "tool_call_update", "toolCallId": "w1", "status": "failed"})
    update(session, {"sessionUpdate": "agent_message_chunk",
                     "content": {"type": "text", "text": "\n".join(results)}})
    return {"stopReason": "end_turn"}


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "method" not in message:
            with lock:
                slot = pending.get(message.get("id"))
            if slot:
                slot[1] = message
                slot[0].set()
            continue
        method, rid, params = message["method"], message.get("id"), message.get("params", {})
        if method == "initialize":
            if MODE == "garbage":
                sys.stdout.write("this is not json {\n")
                sys.stdout.flush()
                continue
            send({"jsonrpc": "2.0", "id": rid,
                  "result": {"protocolVersion": 1, "agentCapabilities": {}}})
        elif method == "session/new":
            if MODE == "early":
                # An update of the new session before its answer, as some
                # agents send their commands list.
                update("s-1", {"sessionUpdate": "agent_message_chunk",
                               "content": {"type": "text", "text": "early,"}})
            send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "s-1"}})
            if MODE == "early":
                update("s-1", {"sessionUpdate": "agent_message_chunk",
                               "content": {"type": "text", "text": "right after,"}})
        elif method == "session/prompt":
            cwd = os.getcwd()
            if MODE == "attack":
                def run(rid=rid):
                    send({"jsonrpc": "2.0", "id": rid, "result": attack("s-1", cwd, params)})
                threading.Thread(target=run, daemon=True).start()
            elif MODE == "early":
                update("s-1", {"sessionUpdate": "agent_message_chunk",
                               "content": {"type": "text", "text": "answer"}})
                send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
            elif MODE == "stray":
                update("s-other", {"sessionUpdate": "agent_message_chunk",
                                   "content": {"type": "text", "text": "not yours"}})
                send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
            elif MODE == "hang":
                subprocess.Popen(["sleep", "1000", MARKER], start_new_session=True)
                update("s-1", {"sessionUpdate": "agent_message_chunk",
                               "content": {"type": "text", "text": "working"}})
        elif method == "session/cancel":
            pass  # a hostile engine ignores it
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid,
                  "error": {"code": -32601, "message": "method not found"}})


if __name__ == "__main__":
    main()
