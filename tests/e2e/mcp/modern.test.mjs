// The official MCP client of the 2026-07-28 revision (@modelcontextprotocol/client
// 2.x, pinned to that revision: server/discover, no initialize, no session,
// the client's context in each request's _meta) drives the reference
// scenario, each request going to one of the hosts in turn:
//
//   ANCHOR_BASE_URL=http://127.0.0.1:P1 [ANCHOR_SECOND_BASE_URL=http://127.0.0.1:P2] node --test modern.test.mjs
//
// With two hosts (on one database) every call of one client alternates
// between them: stateless, any host answers any request.

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const bases = [process.env.ANCHOR_BASE_URL, process.env.ANCHOR_SECOND_BASE_URL].filter(Boolean);
assert.ok(bases.length > 0, "ANCHOR_BASE_URL is required");

// A fetch that sends each request to the next host.
let turn = 0;
const seen = new Set();
const alternating = (url, init) => {
  const base = bases[turn++ % bases.length];
  seen.add(base);
  const target = new URL(url);
  const to = new URL(base);
  target.protocol = to.protocol;
  target.host = to.host;
  return fetch(target, init);
};

async function connect() {
  const client = new Client({ name: "anchor-e2e-modern", version: "1.0.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${bases[0]}/mcp`), { fetch: alternating }));
  return client;
}

function ok(result, name) {
  assert.notEqual(result.isError, true, `${name}: ${JSON.stringify(result)}`);
  assert.ok(result.structuredContent, `${name} answers structured content`);
  return result.structuredContent;
}

test("at 2026-07-28 the client discovers the server and runs the reference scenario on any host", async () => {
  const client = await connect();
  assert.equal(client.getNegotiatedProtocolVersion(), "2026-07-28");
  assert.ok(client.getServerVersion()?.name, "the server says who it is");

  const { tools } = await client.listTools();
  assert.equal(tools.length, 30);
  for (const tool of tools) {
    assert.equal(tool.inputSchema.type, "object", tool.name);
  }
  // The list is the same, in the same order, every time (and from every host).
  const again = await client.listTools();
  assert.deepEqual(again.tools.map((t) => t.name), tools.map((t) => t.name));

  const registered = ok(await client.callTool({ name: "register_agent", arguments: {} }), "register_agent");
  assert.match(registered.auth_token, /^da_tk_/);
  const token = registered.auth_token;
  const created = ok(
    await client.callTool({
      name: "create_decision",
      arguments: {
        auth_token: token,
        request_id: randomUUID(),
        decision_type: "internal_service",
        decision_action_type: "execute",
        origin_context_type: "internal",
        ee_preset: "EE_basic",
      },
    }),
    "create_decision",
  );
  assert.equal(created.status, "trial_paid");
  const confirmed = ok(await client.callTool({ name: "confirm_decision", arguments: { auth_token: token, dd_id: created.dd_id } }), "confirm_decision");
  assert.equal(confirmed.settlement_status, "settled");
  const record = ok(await client.callTool({ name: "get_decision", arguments: { auth_token: token, dd_id: created.dd_id } }), "get_decision");
  assert.equal(record.dd.dd_id, created.dd_id);

  // A refusal is a tool error carrying the route's error code.
  const refused = await client.callTool({ name: "get_decision", arguments: { auth_token: token, dd_id: randomUUID() } });
  assert.equal(refused.isError, true);
  assert.match(JSON.stringify(refused.content), /DD_NOT_FOUND/);
  await client.close();
  assert.equal(seen.size, bases.length, "every host answered");
});
