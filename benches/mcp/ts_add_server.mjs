// The official TypeScript SDK's MCP server with one tool, `add` (a + b as
// text), over streamable HTTP at http://127.0.0.1:<port>/mcp, as the SDK's
// own example serves it: a session per client (`initialize`), a server and
// transport per session. Usage:
//   node ts_add_server.mjs <node_modules dir> <port>
// Prints "ready" once it listens.
import { pathToFileURL } from "node:url";
import { randomUUID } from "node:crypto";
import http from "node:http";
import path from "node:path";

const [modules, portText] = process.argv.slice(2);
const sdk = (p) => pathToFileURL(path.join(modules, "@modelcontextprotocol/sdk/dist/esm", p)).href;
const { McpServer } = await import(sdk("server/mcp.js"));
const { StreamableHTTPServerTransport } = await import(sdk("server/streamableHttp.js"));
const { isInitializeRequest } = await import(sdk("types.js"));
const z = (await import(pathToFileURL(path.join(modules, "zod/index.js")).href)).z;

function server() {
  const mcp = new McpServer({ name: "ts-add", version: "1.0.0" });
  mcp.registerTool(
    "add",
    { description: "Adds two integers.", inputSchema: { a: z.number().int(), b: z.number().int() } },
    async ({ a, b }) => ({ content: [{ type: "text", text: String(a + b) }] }),
  );
  return mcp;
}

const transports = new Map();
const body = (req) =>
  new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined));
    req.on("error", reject);
  });

http
  .createServer(async (req, res) => {
    const id = req.headers["mcp-session-id"];
    const parsed = req.method === "POST" ? await body(req) : undefined;
    let transport = id && transports.get(id);
    if (!transport && req.method === "POST" && isInitializeRequest(parsed)) {
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (sid) => transports.set(sid, transport),
      });
      transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
      await server().connect(transport);
    }
    if (!transport) {
      res.writeHead(400).end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message: "no session" }, id: null }));
      return;
    }
    await transport.handleRequest(req, res, parsed);
  })
  .listen(Number(portText), "127.0.0.1", () => console.log("ready"));
