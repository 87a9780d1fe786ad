// The MCP side of `bench/peer.py --client node`: one client on @modelcontextprotocol/sdk (the
// TypeScript SDK most MCP hosts are built on) per server, each connected over stdio and listing
// its tools first, as a host does (the SDK then checks structured content against a tool's
// output schema). Reads one JSON line per question on stdin, {"query": ..., "warm": bool}, and
// answers one JSON line: milliseconds of ferrex's recall, the peer's find and the minimal
// server's echo, each after `gap_ms` idle, and the answers' sizes.
//
// usage: node node_client.cjs <node_modules dir> <json: {servers: {ferrex, peer, sdk}, gap_ms}>
"use strict";
const path = require("node:path");
const readline = require("node:readline");
const { createRequire } = require("node:module");
const { performance } = require("node:perf_hooks");

const [modulesDir, spec] = process.argv.slice(2);
const load = createRequire(path.join(modulesDir, "package.json"));
const { Client } = load("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = load("@modelcontextprotocol/sdk/client/stdio.js");

const CALLS = {
  ferrex: (query) => ({ name: "recall", arguments: { query, limit: 10 } }),
  peer: (query) => ({ name: "qdrant-find", arguments: { query } }),
  sdk: (query) => ({ name: "echo", arguments: { text: query } }),
};

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  const { servers, gap_ms: gap } = JSON.parse(spec);
  const clients = {};
  for (const [name, server] of Object.entries(servers)) {
    const transport = new StdioClientTransport({ ...server, stderr: "ignore" });
    const client = new Client({ name: `ferrex-bench-${name}`, version: "1.0.0" });
    await client.connect(transport);
    await client.listTools();
    clients[name] = client;
  }
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const { query, warm } = JSON.parse(line);
    const out = { ms: {}, chars: {} };
    for (const [name, client] of Object.entries(clients)) {
      if (!warm && gap > 0) await sleep(gap);
      const start = performance.now();
      const result = await client.callTool(CALLS[name](query));
      out.ms[name] = performance.now() - start;
      if (result.isError) throw new Error(`${name} failed: ${JSON.stringify(result.content)}`);
      out.chars[name] = JSON.stringify(result).length;
    }
    process.stdout.write(`${JSON.stringify(out)}\n`);
  }
  for (const client of Object.values(clients)) await client.close();
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(String(error && error.stack));
    process.exit(1);
  },
);
