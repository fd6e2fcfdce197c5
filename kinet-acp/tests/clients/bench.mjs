// Times an ACP agent as an editor sees it, with the TypeScript SDK's
// client: from session/prompt to the first session/update, the time per
// update after it, and the time per text delta the model wrote (prompt to
// the last text, over the deltas: the turn's chunks are "w0 w1 ... ",
// which an agent may send in fewer updates). Usage: node bench.mjs <runs>
// <agent command...>
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [runs, command, ...args] = process.argv.slice(2);
const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

let stamps = [];
let lastText = 0;
let text = "";
const result = await acp
  .client({ name: "kinet-bench-client" })
  .onRequest(acp.methods.client.session.requestPermission, (ctx) => ({
    outcome: { outcome: "selected", optionId: ctx.params.options[0].optionId },
  }))
  .onNotification(acp.methods.client.session.update, (ctx) => {
    const now = performance.now();
    stamps.push(now);
    const update = ctx.params.update;
    if (update.sessionUpdate === "agent_message_chunk" && update.content.type === "text") {
      text += update.content.text;
      lastText = now;
    }
  })
  .connectWith(stream, async (ctx) => {
    await ctx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    });
    const { sessionId } = await ctx.request(acp.methods.agent.session.new, { cwd: process.cwd(), mcpServers: [] });
    const first = [];
    const perUpdate = [];
    const perDelta = [];
    let updates = 0;
    let deltas = 0;
    for (let i = 0; i < Number(runs); i++) {
      stamps = [];
      text = "";
      const start = performance.now();
      await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "go" }] });
      // Notifications reach their handler asynchronously: let the last land
      // (their times are taken as they arrive).
      await new Promise((resolve) => setTimeout(resolve, 20));
      first.push(stamps[0] - start);
      updates = stamps.length;
      deltas = text.split(" ").length - 1;
      if (deltas > 0) perDelta.push((lastText - start) / deltas);
      if (stamps.length > 1) perUpdate.push((stamps[stamps.length - 1] - stamps[0]) / (stamps.length - 1));
    }
    return {
      firstUpdateMs: +median(first).toFixed(3),
      perUpdateUs: perUpdate.length ? +(median(perUpdate) * 1000).toFixed(2) : null,
      perDeltaUs: perDelta.length ? +(median(perDelta) * 1000).toFixed(2) : null,
      updates,
      deltas,
    };
  });
console.log(JSON.stringify(result));
child.stdin.end();
child.kill();
process.exit(0);
