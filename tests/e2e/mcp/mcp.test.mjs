// Drives the service's MCP endpoint with the official MCP client
// (@modelcontextprotocol/sdk, streamable HTTP), as an agent's MCP host would.
//
//   ANCHOR_BASE_URL=http://127.0.0.1:PORT node --test mcp.test.mjs
//
// With ANCHOR_SECOND_BASE_URL (another host of the same service), the
// declaration made on one host is confirmed and read back on the other,
// each through its own session.
//
// The reference MCP server's tool names and required arguments come from
// tests/data/reference-mcp-tools.json (facts extracted from its tool list).

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const base = process.env.ANCHOR_BASE_URL;
assert.ok(base, "ANCHOR_BASE_URL is required");
const second = process.env.ANCHOR_SECOND_BASE_URL;
const reference = JSON.parse(readFileSync(new URL("../../data/reference-mcp-tools.json", import.meta.url))).tools;

async function connect(headers = {}, at = base) {
  const client = new Client({ name: "anchor-e2e", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`${at}/mcp`), { requestInit: { headers } });
  await client.connect(transport);
  return client;
}

async function call(client, name, args = {}) {
  return client.callTool({ name, arguments: args });
}

function ok(result, name) {
  assert.notEqual(result.isError, true, `${name}: ${JSON.stringify(result)}`);
  assert.ok(result.structuredContent, `${name} answers structured content`);
  return result.structuredContent;
}

test("the tool list is the reference's: names and required arguments", async () => {
  const client = await connect();
  const { tools } = await client.listTools();
  assert.equal(tools.length, 30);
  const byName = new Map(tools.map((t) => [t.name, t]));
  for (const expected of reference) {
    const tool = byName.get(expected.name);
    assert.ok(tool, `tool ${expected.name} is listed`);
    assert.deepEqual([...(tool.inputSchema.required ?? [])].sort(), [...(expected.inputSchema.required ?? [])].sort(), expected.name);
    assert.deepEqual(
      Object.keys(tool.inputSchema.properties ?? {}).sort(),
      Object.keys(expected.inputSchema.properties ?? {}).sort(),
      `${expected.name}: argument names`,
    );
    assert.ok(tool.description && tool.description.length > 10, `${expected.name} has a description`);
  }
  await client.close();
});

test("an agent registers, declares, confirms and reads back over MCP", async () => {
  const client = await connect();
  const registered = ok(await call(client, "register_agent", {}), "register_agent");
  assert.match(registered.agent_id, /^[0-9a-f-]{36}$/);
  const token = registered.auth_token;

  const created = ok(
    await call(client, "create_decision", {
      auth_token: token,
      decision_type: "external_interaction",
      decision_action_type: "execute",
      origin_context_type: "external",
      ee_preset: "EE_basic",
    }),
    "create_decision",
  );
  assert.match(created.dd_id, /^[0-9a-f-]{36}$/);
  const other = second ? await connect({}, second) : client;
  const confirmed = ok(await call(other, "confirm_decision", { auth_token: token, dd_id: created.dd_id }), "confirm_decision");
  assert.equal(confirmed.dd_id, created.dd_id);
  assert.match(confirmed.integrity_hash, /^sha256:[0-9a-f]{64}$/);

  const read = ok(await call(other, "get_decision", { auth_token: token, dd_id: created.dd_id }), "get_decision");
  assert.equal(read.dd.dd_id, created.dd_id);
  assert.equal(read.dd.decision_type, "external_interaction");
  const listed = ok(await call(other, "list_decisions", { auth_token: token, limit: 10 }), "list_decisions");
  assert.deepEqual(listed.dds.map((d) => d.dd_id), [created.dd_id]);
  if (other !== client) await other.close();
  const trial = ok(await call(client, "get_trial_status", { auth_token: token }), "get_trial_status");
  assert.ok(typeof trial === "object");
  const classes = ok(await call(client, "list_classifications", { auth_token: token }), "list_classifications");
  assert.ok(classes.count > 0 && classes.classifications.length === classes.count);
  const docs = ok(await call(client, "get_documentation"), "get_documentation");
  assert.match(docs.documentation, /\/v1\/dd\/create/);

  // Without a token the tool refuses, as the route would (401).
  const anonymous = await call(client, "get_trial_status", {});
  assert.equal(anonymous.isError, true);
  assert.equal(anonymous.structuredContent.status, 401);
  await client.close();

  // The token may come as the MCP request's bearer header instead.
  const bearer = await connect({ Authorization: `Bearer ${token}` });
  const again = ok(await call(bearer, "list_decisions", {}), "list_decisions (bearer)");
  assert.equal(again.total, 1);
  await bearer.close();
});

test("submit_feedback keeps an anonymous note, with or without a token", async () => {
  const client = await connect();
  const thanks = ok(
    await call(client, "submit_feedback", { note: "worked well from the official client", would_recommend: "yes", tools_used: ["create_decision"] }),
    "submit_feedback",
  );
  assert.equal(thanks.received, true);
  // An over-long note is refused, as the schema says.
  const long = await call(client, "submit_feedback", { note: "x".repeat(4001) });
  assert.equal(long.isError, true, JSON.stringify(long));
  assert.equal(long.structuredContent.error_code, "INVALID_VALUE");
  await client.close();
});

test("idle state, simulation, Earned balance, a bilateral proposal, observations and reports over MCP", async () => {
  const client = await connect();
  const me = ok(await call(client, "register_agent", {}), "register_agent");
  const other = ok(await call(client, "register_agent", {}), "register_agent");
  const token = me.auth_token;

  const entered = ok(await call(client, "create_ise_session", { auth_token: token }), "create_ise_session");
  assert.equal(entered.payment_mode, "free");
  const status = ok(await call(client, "get_ise_status", { auth_token: token }), "get_ise_status");
  assert.equal(status.active, true);
  assert.equal(status.session_id, entered.session_id);
  const exited = ok(await call(client, "exit_ise_session", { auth_token: token }), "exit_ise_session");
  assert.equal(exited.session_id, entered.session_id);
  assert.equal(ok(await call(client, "get_ise_status", { auth_token: token }), "get_ise_status").active, false);

  const session = ok(await call(client, "create_sdac_session", { auth_token: token }), "create_sdac_session");
  const trial = ok(
    await call(client, "run_sdac_trial", {
      auth_token: token,
      session_id: session.session_id,
      ee_retention_period: "long",
      ee_integrity_verification_level: "enhanced",
      ee_disclosure_format_policy: "internal",
      ee_responsibility_scope: "standard",
    }),
    "run_sdac_trial",
  );
  assert.equal(trial.trial_number, 1);
  assert.ok(trial.simulated_total_dac > 10, JSON.stringify(trial));
  const history = ok(await call(client, "get_sdac_session", { auth_token: token, session_id: session.session_id }), "get_sdac_session");
  assert.equal(history.trials.length, 1);
  const ended = ok(await call(client, "end_sdac_session", { auth_token: token, session_id: session.session_id }), "end_sdac_session");
  assert.equal(ended.session_id, session.session_id);

  const balance = ok(await call(client, "get_dac_balance", { auth_token: token }), "get_dac_balance");
  assert.equal(balance.earned_balance, 0);

  // A proposal is paid over x402 only: the tool answers the payment requirement.
  const proposal = await call(client, "propose_bilateral", {
    auth_token: token,
    counterparty_agent_id: other.agent_id,
    decision_type: "external_interaction",
    decision_action_type: "approve",
    origin_context_type: "external",
  });
  assert.equal(proposal.isError, true, JSON.stringify(proposal));
  assert.equal(proposal.structuredContent.status, 402);
  const challenge = proposal.structuredContent.payment_required;
  assert.equal(challenge.x402Version, 2);
  assert.ok(challenge.accepts[0].amount && challenge.accepts[0].payTo && challenge.accepts[0].network && challenge.accepts[0].asset);
  assert.match(proposal.structuredContent.message, /payment_signature/);

  // Observations and reports answer as their routes do.
  const environment = await call(client, "observe_environment", { auth_token: token });
  assert.equal(environment.isError, true, "too few agents for a release");
  assert.equal(environment.structuredContent.status, 404);
  assert.equal(environment.structuredContent.error_code, "DATA_UNAVAILABLE");
  const profile = ok(await call(client, "get_agent_profile", { auth_token: token, agent_id: me.agent_id }), "get_agent_profile");
  assert.equal(profile.agent_id, me.agent_id);
  assert.equal(profile.observed_as, "self");
  const usage = ok(await call(client, "get_dac_ur", { auth_token: token }), "get_dac_ur");
  assert.ok(typeof usage === "object" && Object.keys(usage).length > 0);
  for (const type of ["ee-distribution", "action-type"]) {
    const pattern = await call(client, "observe_pattern", { auth_token: token, type });
    assert.equal(pattern.structuredContent.error_code, "DATA_UNAVAILABLE", `${type}: too few agents for a release`);
  }
  const band = await call(client, "get_environment_anomaly", { auth_token: token, period_days: 30 });
  assert.equal(band.isError, true, "too few agents for a release");
  assert.equal(band.structuredContent.error_code, "DATA_UNAVAILABLE");
  // A decision to compare and report on: paid observations answer their challenge.
  const decided = ok(
    await call(client, "create_decision", {
      auth_token: token, decision_type: "internal_service", decision_action_type: "execute", origin_context_type: "internal",
    }),
    "create_decision",
  );
  ok(await call(client, "confirm_decision", { auth_token: token, dd_id: decided.dd_id }), "confirm_decision");
  for (const name of ["compare_anomaly", "get_evidence_report"]) {
    const answer = await call(client, name, { auth_token: token, dd_id: decided.dd_id });
    assert.equal(answer.isError, true, `${name}: ${JSON.stringify(answer)}`);
    assert.ok([402, 404, 409].includes(answer.structuredContent.status), `${name}: ${JSON.stringify(answer.structuredContent)}`);
    assert.ok(answer.structuredContent.error_code, name);
  }
  const market = ok(await call(client, "list_tools", { limit: 5 }), "list_tools");
  assert.equal(market.total, 0);
  assert.deepEqual(market.tools, []);
  const tool = ok(
    await call(client, "register_tool", {
      auth_token: other.auth_token,
      tool_name: "density reader",
      price_dac: 5,
      ara_connections: [{ observation_type: "environment_density" }],
    }),
    "register_tool",
  );
  assert.match(tool.tool_id, /^[0-9a-f-]{36}$/);
  // A purchase is paid over x402 only: the tool answers the payment requirement.
  const bought = await call(client, "purchase_tool", { auth_token: token, tool_id: tool.tool_id });
  assert.equal(bought.isError, true, JSON.stringify(bought));
  assert.equal(bought.structuredContent.status, 402);
  assert.ok(bought.structuredContent.payment_required.accepts.length > 0);
  const metadata = ok(await call(client, "get_decision_metadata_distribution", { auth_token: token }), "get_decision_metadata_distribution");
  assert.equal(metadata.dd_count, 0);
  const classified = ok(await call(client, "get_self_classification_distribution", { auth_token: token }), "get_self_classification_distribution");
  assert.equal(classified.classified_count, 0);
  await client.close();
});

test("a call that does not fit the tool's schema is a JSON-RPC error", async () => {
  const client = await connect();
  await assert.rejects(call(client, "no_such_tool", {}), /-32602|no tool/);
  await assert.rejects(call(client, "confirm_decision", { dd_id: "x", surprise: 1 }), /-32602|unknown argument/);
  await assert.rejects(call(client, "confirm_decision", {}), /-32602|missing required/);
  await assert.rejects(
    call(client, "create_decision", { decision_type: "nonsense", decision_action_type: "execute", origin_context_type: "internal" }),
    /-32602|must be one of/,
  );
  await client.close();
});
