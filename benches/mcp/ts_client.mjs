// Times tools/call of `echo` through the official TypeScript SDK client,
// against a stdio server. Usage:
//   node ts_client.mjs <node_modules dir> <calls> <command> [args...]
// Prints one JSON line: {"p50_us": .., "p99_us": .., "calls": ..}.
import { pathToFileURL } from "node:url";
import path from "node:path";

const [modules, callsText, command, ...args] = process.argv.slice(2);
const sdk = (p) => pathToFileURL(path.join(modules, "@modelcontextprotocol/sdk/dist/esm", p)).href;
const { Client } = await import(sdk("client/index.js"));
const { StdioClientTransport } = await import(sdk("client/stdio.js"));

const client = new Client({ name: "ts-bench", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command, args, stderr: "ignore" }));
const calls = Number(callsText);
for (let i = 0; i < 50; i++) {
  await client.callTool({ name: "echo", arguments: { message: "warm" } });
}
const samples = [];
for (let i = 0; i < calls; i++) {
  const start = process.hrtime.bigint();
  const result = await client.callTool({ name: "echo", arguments: { message: `m${i}` } });
  samples.push(Number(process.hrtime.bigint() - start) / 1000);
  if (result.content[0].text !== `Echo: m${i}`) throw new Error("wrong echo");
}
samples.sort((a, b) => a - b);
const pick = (q) => samples[Math.min(samples.length - 1, Math.floor(q * samples.length))];
console.log(JSON.stringify({ p50_us: pick(0.5), p99_us: pick(0.99), calls }));
await client.close();
