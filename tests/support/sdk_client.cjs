// A TypeScript-SDK MCP client (the SDK most MCP clients are built on): connects to a server
// over stdio, makes the calls it is given and prints one JSON line per call with what an
// application built on the SDK sees (isError, the text content, the structured content, or
// the exception the SDK raised, e.g. an output-schema mismatch).
//
// usage: node sdk_client.cjs <node_modules dir> <json: {command, args, env, calls: [{name, arguments}]}>
"use strict";
const path = require("node:path");
const { createRequire } = require("node:module");

const [modulesDir, spec] = process.argv.slice(2);
const load = createRequire(path.join(modulesDir, "package.json"));
const { Client } = load("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = load("@modelcontextprotocol/sdk/client/stdio.js");

async function main() {
  const { command, args, env, calls } = JSON.parse(spec);
  const transport = new StdioClientTransport({ command, args, env, stderr: "ignore" });
  const client = new Client({ name: "ferrex-compat", version: "1.0.0" });
  await client.connect(transport);
  const tools = await client.listTools();
  console.log(JSON.stringify({ listed: tools.tools.map((t) => t.name) }));
  for (const call of calls) {
    try {
      const result = await client.callTool({ name: call.name, arguments: call.arguments });
      const text = (result.content || []).filter((c) => c.type === "text").map((c) => c.text);
      console.log(
        JSON.stringify({
          call: call.name,
          isError: result.isError === true,
          text: text.join("\n"),
          structured: result.structuredContent === undefined ? null : result.structuredContent,
        }),
      );
    } catch (error) {
      console.log(JSON.stringify({ call: call.name, exception: String(error && error.message) }));
    }
  }
  await client.close();
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(String(error && error.stack));
    process.exit(1);
  },
);
