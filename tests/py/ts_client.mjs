// A client built on the official TypeScript MCP SDK (npm
// @modelcontextprotocol/sdk, pinned in scripts/reference-servers): starts
// COMMAND ARGS over stdio, lists the tools (which makes the SDK check each
// result's structuredContent against the tool's outputSchema, as the
// Inspector and TypeScript hosts do), makes each call of CALLS
// ([[tool, arguments], ...]) and prints one JSON document: the tools and,
// for each call, what the SDK handed its caller or the error it threw.
//
//   TS_SDK=target/mcp-servers/node_modules/@modelcontextprotocol/sdk \
//     node tests/py/ts_client.mjs COMMAND ARGS_JSON CALLS_JSON
import { pathToFileURL } from "node:url";

const sdk = process.env.TS_SDK;
const { Client } = await import(pathToFileURL(`${sdk}/dist/esm/client/index.js`).href);
const { StdioClientTransport } = await import(pathToFileURL(`${sdk}/dist/esm/client/stdio.js`).href);

const [command, argsJson, callsJson] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command,
  args: JSON.parse(argsJson),
  env: process.env,
  cwd: process.env.TS_CWD || process.cwd(),
  stderr: "inherit",
});
const client = new Client({ name: "intentplane-ts-test", version: "1.0.0" });
await client.connect(transport);
const tools = (await client.listTools()).tools;
const out = {
  tools: tools.map((t) => ({ name: t.name, outputSchema: t.outputSchema !== undefined })),
  calls: [],
};
for (const [name, args] of JSON.parse(callsJson)) {
  try {
    const r = await client.callTool({ name, arguments: args });
    out.calls.push({
      threw: null,
      isError: r.isError === true,
      text: (r.content || []).map((c) => c.text || "").join("\n"),
      structured: r.structuredContent === undefined ? null : r.structuredContent,
      meta: r._meta === undefined ? null : r._meta,
    });
  } catch (e) {
    out.calls.push({ threw: String(e) });
  }
}
console.log(JSON.stringify(out));
await client.close();
