// The TypeScript SDK's example agent (SDK 1.9's dist/examples/agent.js),
// reduced to the benchmark's scripted turn: on each prompt it streams the
// same N text chunks as kinet's scripted model, with no pauses.
// Usage: node stream_agent.mjs <chunks>
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const chunks = Number(process.argv[2] ?? 200);
const stream = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
acp
  .agent({ name: "stream-agent" })
  .onRequest("initialize", () => ({ protocolVersion: acp.PROTOCOL_VERSION, agentCapabilities: { loadSession: false } }))
  .onRequest("session/new", () => ({ sessionId: "s1" }))
  .onRequest("session/prompt", async (ctx) => {
    for (let i = 0; i < chunks; i++) {
      await ctx.client.notify(acp.methods.client.session.update, {
        sessionId: ctx.params.sessionId,
        update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: `w${i} ` } },
      });
    }
    return { stopReason: "end_turn" };
  })
  .onNotification("session/cancel", () => {})
  .connect(stream);
