"""The ACP Python SDK's client driving an agent through the editor scenario
of kinet-acp's tests/editors.rs; prints what it saw as JSON.

Usage: python client.py <project dir> <first | load:SESSION> <agent command...>
"""

import asyncio
import json
import signal
import sys

import acp
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    FileSystemCapabilities,
    KillTerminalResponse,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)


class Terminal:
    """A command the editor runs, keeping the last `limit` bytes of output."""

    def __init__(self, proc, limit):
        self.proc = proc
        self.limit = limit
        self.output = b""
        self.truncated = False
        self.reader = asyncio.ensure_future(self.read())

    async def read(self):
        while chunk := await self.proc.stdout.read(65536):
            self.output += chunk
            if self.limit is not None and len(self.output) > self.limit:
                self.output = self.output[-self.limit :]
                self.truncated = True

    async def wait(self):
        code = await self.proc.wait()
        await self.reader
        if code < 0:
            return None, signal.Signals(-code).name
        return code, None


class EditorClient:
    def __init__(self):
        self.updates = []
        self.permissions = []
        self.reads = []
        self.terminals = []
        self.open_terminals = {}
        self.writes = []
        # The editor's buffers: a file not yet written reads with an
        # unsaved change.
        self.buffers = {}
        self.texts = ""
        self.cancel_on = None
        self.conn = None

    def on_connect(self, conn):
        self.conn = conn

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append(tool_call.tool_call_id)
        # The second edit is rejected, everything else allowed.
        kind = "reject_once" if tool_call.tool_call_id == "e2" else "allow_once"
        option = next(o for o in options if str(getattr(o.kind, "value", o.kind)) == kind)
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=option.option_id)
        )

    async def read_text_file(self, session_id, path, line=None, limit=None, **kwargs):
        # The editor's buffer, with an unsaved change.
        self.reads.append(path)
        return ReadTextFileResponse(content=self.buffers.get(path, "hello from the editor\n"))

    async def write_text_file(self, session_id, path, content, **kwargs):
        # Into the buffer; the disk is left alone.
        self.writes.append({"path": path, "content": content})
        self.buffers[path] = content
        return WriteTextFileResponse()

    async def create_terminal(self, session_id, command, args=None, env=None, cwd=None, output_byte_limit=None, **kwargs):
        self.terminals.append({"command": command, "args": args or [], "cwd": cwd})
        proc = await asyncio.create_subprocess_exec(
            command, *(args or []), cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        terminal_id = f"term-{len(self.terminals)}"
        self.open_terminals[terminal_id] = Terminal(proc, output_byte_limit)
        # The call to cancel is running once its terminal is made.
        if self.cancel_on:
            await self.conn.cancel(session_id=session_id)
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def wait_for_terminal_exit(self, session_id, terminal_id, **kwargs):
        code, name = await self.open_terminals[terminal_id].wait()
        return WaitForTerminalExitResponse(exit_code=code, signal=name)

    async def terminal_output(self, session_id, terminal_id, **kwargs):
        t = self.open_terminals[terminal_id]
        exit_status = None
        if t.proc.returncode is not None:
            code, name = await t.wait()
            exit_status = TerminalExitStatus(exit_code=code, signal=name)
        return TerminalOutputResponse(
            output=t.output.decode("utf-8", "replace"), truncated=t.truncated, exit_status=exit_status
        )

    async def kill_terminal(self, session_id, terminal_id, **kwargs):
        t = self.open_terminals[terminal_id]
        if t.proc.returncode is None:
            t.proc.kill()
        return KillTerminalResponse()

    async def release_terminal(self, session_id, terminal_id, **kwargs):
        t = self.open_terminals.pop(terminal_id)
        if t.proc.returncode is None:
            t.proc.kill()
        return ReleaseTerminalResponse()

    async def session_update(self, session_id, update, **kwargs):
        data = update.model_dump(by_alias=True, exclude_none=True, mode="json")
        self.updates.append(data)
        if data.get("sessionUpdate") == "agent_message_chunk" and data["content"].get("type") == "text":
            self.texts += data["content"]["text"]


async def main():
    project, mode, command, *args = sys.argv[1:]
    client = EditorClient()
    async with acp.spawn_agent_process(client, command, *args) as (conn, _process):
        client.conn = conn
        init = await conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
                terminal=True,
            ),
        )
        assert init.protocol_version == 1, init.protocol_version

        async def prompt(session_id, text):
            answer = await conn.prompt(session_id=session_id, prompt=[acp.text_block(text)])
            # Let notifications handed to their handler land first.
            await asyncio.sleep(0.05)
            return str(getattr(answer.stop_reason, "value", answer.stop_reason))

        if mode.startswith("load:"):
            session_id = mode[5:]
            assert init.agent_capabilities.load_session
            await conn.load_session(cwd=project, session_id=session_id, mcp_servers=[])
            await asyncio.sleep(0.05)
            replayed = sum(1 for u in client.updates if u.get("sessionUpdate") == "user_message_chunk")
            stop = await prompt(session_id, "Are you there?")
            result = {"replayedUserMessages": replayed, "stop": stop, "texts": client.texts}
        else:
            session = await conn.new_session(cwd=project, mcp_servers=[])
            session_id = session.session_id
            stops = [
                await prompt(session_id, "What do the notes say?"),
                await prompt(session_id, "Say goodbye in the notes."),
                await prompt(session_id, "Now say farewell."),
            ]
            # w1's terminal is the next one made: it is cancelled then.
            client.cancel_on = "w1"
            stops.append(await prompt(session_id, "Wait a while."))
            # The agent answers a cancelled prompt once what it started
            # has stopped: its terminals are released by now.

            def updates_of(call):
                return [u for u in client.updates if u.get("toolCallId") == call]

            read = next(
                (u for u in updates_of("r1") if u["sessionUpdate"] == "tool_call_update" and u.get("status") == "completed"),
                {},
            )
            read_result = "".join(
                c["content"]["text"] for c in read.get("content", []) if c["type"] == "content"
            )
            diff = next(
                (c for u in updates_of("e1") for c in u.get("content", []) if c["type"] == "diff"),
                None,
            )
            shell = updates_of("s1")
            shell_result = "".join(
                c["content"]["text"]
                for u in shell
                if u["sessionUpdate"] == "tool_call_update" and u.get("status") == "completed"
                for c in u.get("content", [])
                if c["type"] == "content"
            )
            shown = [c["terminalId"] for u in shell for c in u.get("content", []) if c["type"] == "terminal"]
            failed = []
            for u in client.updates:
                if u.get("sessionUpdate") == "tool_call_update" and u.get("status") == "failed":
                    if u["toolCallId"] not in failed:
                        failed.append(u["toolCallId"])
            result = {
                "sessionId": session_id,
                "stops": stops,
                "readResult": read_result,
                "reads": client.reads,
                "writes": client.writes,
                "terminals": client.terminals,
                "shellResult": shell_result,
                "shownTerminals": shown,
                "openTerminals": len(client.open_terminals),
                "openIds": list(client.open_terminals),
                "permissions": client.permissions,
                "diff": diff
                and {"oldText": diff.get("oldText"), "newText": diff["newText"], "absolute": diff["path"].startswith("/")},
                "failed": failed,
                "texts": client.texts,
            }
    print(json.dumps(result))


asyncio.run(main())
