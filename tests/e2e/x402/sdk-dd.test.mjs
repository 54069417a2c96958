// The JS SDK's dd group against a running anchor server: create with the
// free-form `context` the SDK passes through, confirm with a transaction id,
// and the spec's excluded_option_count, all accepted:
//   ANCHOR_BASE_URL   the server
// ANCHOR_SDK_PATH, when set, names the published package to run instead of
// the stand-in in sdk-shape.mjs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";

const base = process.env.ANCHOR_BASE_URL;
assert.ok(base, "ANCHOR_BASE_URL is set");
const DecisionAnchor = process.env.ANCHOR_SDK_PATH
  ? createRequire(import.meta.url)(process.env.ANCHOR_SDK_PATH)
  : (await import("./sdk-shape.mjs")).default;

async function register() {
  const res = await fetch(`${base}/v1/agent/register`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
  const body = await res.json();
  assert.equal(res.status, 201, JSON.stringify(body));
  assert.ok(body.next_steps.references.openapi.endsWith("/openapi.json"), JSON.stringify(body.next_steps));
  return new DecisionAnchor({ baseUrl: base, token: body.auth_token });
}

const dd = {
  dd_unit_type: "single",
  dd_declaration_mode: "self_declared",
  decision_type: "external_interaction",
  decision_action_type: "execute",
  origin_context_type: "external",
  selection_state: "SELECTED",
};

test("dd.create with a context, then dd.confirm with a transaction id", async () => {
  const sdk = await register();
  const created = await sdk.dd.create({
    dd,
    ee: { ee_preset: "EE_basic" },
    context: { prompt: "SDK-CONTEXT-MARKER: pay the invoice of ACME", reasoning: ["cheapest", "on time"] },
  });
  assert.equal(created.status, "trial_paid", JSON.stringify(created));
  assert.equal(created.content_inclusion_flag, 0);
  assert.equal(created.cost_breakdown.base_fee_source, "trial");
  assert.equal(created.cost_breakdown.premium_source, undefined, "Trial paid the whole: no premium source");
  const confirmed = await sdk.dd.confirm(created.dd_id, "0xabc123-transaction-of-the-caller");
  assert.match(confirmed.integrity_hash, /^sha256:[0-9a-f]{64}$/);
  const read = await sdk.dd.get(created.dd_id);
  assert.ok(!JSON.stringify(read).includes("SDK-CONTEXT-MARKER"), "the context is never stored");
});

test("dd.create with excluded_option_count records it", async () => {
  const sdk = await register();
  const created = await sdk.dd.create({ dd: { ...dd, excluded_option_count: 4 }, ee: { ee_preset: "EE_basic" } });
  const read = await sdk.dd.get(created.dd_id);
  assert.equal(read.dd.excluded_option_count, 4, JSON.stringify(read.dd));
  await assert.rejects(sdk.dd.create({ dd: { ...dd, excluded_option_count: -1 }, ee: { ee_preset: "EE_basic" } }), (error) => {
    assert.equal(error.status, 400);
    assert.equal(error.data.error_code, "INVALID_VALUE");
    return true;
  });
});
