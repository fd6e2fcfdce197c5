// The floor of the measurement: an agent with no protocol library that
// answers a prompt by writing the turn's N updates and its answer in one
// write, so the time per update the client sees is the client's own.
// Usage: node burst_agent.mjs <chunks>
import { createInterface } from "node:readline";

const chunks = Number(process.argv[2] ?? 200);
const send = (message) => JSON.stringify({ jsonrpc: "2.0", ...message }) + "\n";
for await (const line of createInterface({ input: process.stdin })) {
  const request = JSON.parse(line);
  if (request.id === undefined) continue;
  if (request.method === "initialize") {
    process.stdout.write(send({ id: request.id, result: { protocolVersion: 1, agentCapabilities: { loadSession: false } } }));
  } else if (request.method === "session/new") {
    process.stdout.write(send({ id: request.id, result: { sessionId: "s1" } }));
  } else if (request.method === "session/prompt") {
    let out = "";
    for (let i = 0; i < chunks; i++) {
      out += send({
        method: "session/update",
        params: { sessionId: "s1", update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: `w${i} ` } } },
      });
    }
    process.stdout.write(out + send({ id: request.id, result: { stopReason: "end_turn" } }));
  }
}
