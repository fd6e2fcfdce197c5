// The ACP TypeScript SDK's client driving an agent through the editor
// scenario of kinet-acp's tests/editors.rs; prints what it saw as JSON.
// Usage: node client.mjs <project dir> <first | load:SESSION> <agent command...>
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [project, mode, command, ...args] = process.argv.slice(2);
const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

const seen = { updates: [], permissions: [], reads: [], writes: [], terminals: [], texts: "" };
// The editor's buffers: a file not yet written reads with an unsaved change.
const buffers = new Map();
// The editor's terminals: each runs its command as the editor's child,
// keeping the last outputByteLimit bytes of its output.
const terminals = new Map();
// Ids are never reused: a late request for a released terminal must not
// reach a newer one.
let made = 0;
const terminal = (ctx) => {
  const found = terminals.get(ctx.params.terminalId);
  if (!found) throw new Error(`no terminal ${ctx.params.terminalId}`);
  return found;
};
let agent = null;
let cancelOn = null;

const result = await acp
  .client({ name: "kinet-test-client" })
  .onRequest(acp.methods.client.session.requestPermission, (ctx) => {
    const id = ctx.params.toolCall.toolCallId;
    seen.permissions.push(id);
    // The second edit is rejected, everything else allowed.
    const kind = id === "e2" ? "reject_once" : "allow_once";
    const option = ctx.params.options.find((o) => o.kind === kind);
    return { outcome: { outcome: "selected", optionId: option.optionId } };
  })
  .onRequest(acp.methods.client.fs.readTextFile, (ctx) => {
    // The editor's buffer, with an unsaved change.
    seen.reads.push(ctx.params.path);
    return { content: buffers.get(ctx.params.path) ?? "hello from the editor\n" };
  })
  .onRequest(acp.methods.client.fs.writeTextFile, (ctx) => {
    // Into the buffer; the disk is left alone.
    seen.writes.push({ path: ctx.params.path, content: ctx.params.content });
    buffers.set(ctx.params.path, ctx.params.content);
    return {};
  })
  .onRequest(acp.methods.client.terminal.create, (ctx) => {
    const { command, args = [], cwd, outputByteLimit } = ctx.params;
    seen.terminals.push({ command, args, cwd });
    made += 1;
    const id = `term-${made}`;
    // Through a shell, unquoted, as some editors start terminal commands:
    // the launcher's arguments must survive that.
    const proc = spawn(command, args, { cwd, shell: true, stdio: ["ignore", "pipe", "pipe"] });
    const t = { proc, output: Buffer.alloc(0), truncated: false, exit: null };
    const limit = outputByteLimit ?? Infinity;
    const take = (chunk) => {
      t.output = Buffer.concat([t.output, chunk]);
      if (t.output.length > limit) {
        t.output = t.output.subarray(t.output.length - limit);
        t.truncated = true;
      }
    };
    proc.stdout.on("data", take);
    proc.stderr.on("data", take);
    t.done = new Promise((resolve) =>
      proc.on("close", (exitCode, signal) => resolve((t.exit = { exitCode, signal }))),
    );
    terminals.set(id, t);
    // The call to cancel is running once its terminal is made.
    if (cancelOn) agent.notify(acp.methods.agent.session.cancel, { sessionId: ctx.params.sessionId });
    return { terminalId: id };
  })
  .onRequest(acp.methods.client.terminal.waitForExit, async (ctx) => await terminal(ctx).done)
  .onRequest(acp.methods.client.terminal.output, (ctx) => {
    const t = terminal(ctx);
    return { output: t.output.toString("utf8"), truncated: t.truncated, exitStatus: t.exit };
  })
  .onRequest(acp.methods.client.terminal.kill, (ctx) => {
    terminal(ctx).proc.kill("SIGKILL");
    return {};
  })
  .onRequest(acp.methods.client.terminal.release, (ctx) => {
    const t = terminal(ctx);
    if (t.exit === null) t.proc.kill("SIGKILL");
    terminals.delete(ctx.params.terminalId);
    return {};
  })
  .onNotification(acp.methods.client.session.update, (ctx) => {
    const update = ctx.params.update;
    seen.updates.push(update);
    if (update.sessionUpdate === "agent_message_chunk" && update.content.type === "text") {
      seen.texts += update.content.text;
    }
  })
  .connectWith(stream, async (ctx) => {
    agent = ctx;
    const init = await ctx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
    });
    if (init.protocolVersion !== 1) throw new Error(`protocol ${init.protocolVersion}`);
    // The updates of a turn come before its answer on the wire; the SDK
    // hands notifications to their handler asynchronously, so let them
    // land before reading what was seen.
    const settle = () => new Promise((resolve) => setTimeout(resolve, 50));
    const prompt = async (sessionId, text) => {
      const answer = await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] });
      await settle();
      return answer;
    };

    if (mode.startsWith("load:")) {
      const sessionId = mode.slice(5);
      if (!init.agentCapabilities.loadSession) throw new Error("no loadSession");
      await ctx.request(acp.methods.agent.session.load, { sessionId, cwd: project, mcpServers: [] });
      await settle();
      const replayedUserMessages = seen.updates.filter((u) => u.sessionUpdate === "user_message_chunk").length;
      const answer = await prompt(sessionId, "Are you there?");
      return { replayedUserMessages, stop: answer.stopReason, texts: seen.texts };
    }

    const { sessionId } = await ctx.request(acp.methods.agent.session.new, { cwd: project, mcpServers: [] });
    const stops = [];
    stops.push((await prompt(sessionId, "What do the notes say?")).stopReason);
    stops.push((await prompt(sessionId, "Say goodbye in the notes.")).stopReason);
    stops.push((await prompt(sessionId, "Now say farewell.")).stopReason);
    // w1's terminal is the next one made: it is cancelled then.
    cancelOn = "w1";
    stops.push((await prompt(sessionId, "Wait a while.")).stopReason);
    // The agent answers a cancelled prompt once what it started has
    // stopped: its terminals are released by now.

    const updatesOf = (id) => seen.updates.filter((u) => u.toolCallId === id);
    const read = updatesOf("r1").find((u) => u.sessionUpdate === "tool_call_update" && u.status === "completed");
    const readResult = (read?.content ?? []).filter((c) => c.type === "content").map((c) => c.content.text).join("");
    const diffUpdate = updatesOf("e1").flatMap((u) => u.content ?? []).find((c) => c.type === "diff");
    const diff = diffUpdate
      ? { oldText: diffUpdate.oldText, newText: diffUpdate.newText, absolute: diffUpdate.path.startsWith("/") }
      : null;
    const shell = updatesOf("s1");
    const shellResult = shell
      .filter((u) => u.sessionUpdate === "tool_call_update" && u.status === "completed")
      .flatMap((u) => u.content ?? [])
      .filter((c) => c.type === "content")
      .map((c) => c.content.text)
      .join("");
    const shownTerminals = shell.flatMap((u) => u.content ?? []).filter((c) => c.type === "terminal").map((c) => c.terminalId);
    const failed = [...new Set(seen.updates
      .filter((u) => u.sessionUpdate === "tool_call_update" && u.status === "failed")
      .map((u) => u.toolCallId))];
    return { sessionId, stops, readResult, reads: seen.reads, writes: seen.writes, terminals: seen.terminals, shellResult, shownTerminals, openTerminals: terminals.size, openIds: [...terminals.keys()], permissions: seen.permissions, diff, failed, texts: seen.texts };
  });

console.log(JSON.stringify(result));
child.stdin.end();
child.kill();
process.exit(0);
