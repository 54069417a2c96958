// The JS SDK's retention, ISE, sDAC, ASA and bilateral calls against a
// running anchor server; what costs money is paid with the official x402
// client (ASA periods, the bilateral proposal, the tool sale that gives an
// agent the Earned DAC indefinite retention is debited from). Agents are
// registered fresh on every run:
//   ANCHOR_BASE_URL   the server, in local settlement mode
// ANCHOR_SDK_PATH, when set, names the published package to run instead of
// the stand-in in sdk-shape.mjs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { createHash, randomUUID } from "node:crypto";
import { wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";

const base = process.env.ANCHOR_BASE_URL;
assert.ok(base, "ANCHOR_BASE_URL is set");
const DecisionAnchor = process.env.ANCHOR_SDK_PATH
  ? createRequire(import.meta.url)(process.env.ANCHOR_SDK_PATH)
  : (await import("./sdk-shape.mjs")).default;

// Anvil's public test key #3: never holds real money.
const account = privateKeyToAccount("0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6");
const payer = new x402Client().setSpendControls({ maxAmountPerPayment: "$1" }).register("eip155:8453", new ExactEvmScheme(account));

async function register() {
  const res = await fetch(`${base}/v1/agent/register`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
  const body = await res.json();
  assert.equal(res.status, 201, JSON.stringify(body));
  return { id: body.agent_id, token: body.auth_token, sdk: new DecisionAnchor({ baseUrl: base, token: body.auth_token }) };
}

/// A raw call outside the SDK's groups (`pay`: through the official client).
async function call(agent, method, path, body, pay = false) {
  const doFetch = pay ? wrapFetchWithPayment(fetch, payer) : fetch;
  const res = await doFetch(base + path, {
    method,
    headers: { "content-type": "application/json", authorization: `Bearer ${agent.token}` },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await res.json();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

// With fetch wrapped by the official client while `run` runs, a 402 is paid and retried.
async function paying(run) {
  const plain = globalThis.fetch;
  globalThis.fetch = wrapFetchWithPayment(plain, payer);
  try {
    return await run();
  } finally {
    globalThis.fetch = plain;
  }
}

const axes = {
  ee_retention_period: "short",
  ee_integrity_verification_level: "basic",
  ee_disclosure_format_policy: "internal",
  ee_responsibility_scope: "minimal",
};
const letters = Array.from(crypto.getRandomValues(new Uint8Array(8)), (b) => String.fromCharCode(97 + (b % 26))).join("");

test("retention: subscribed from Earned DAC (earned by a tool sale), read, cancelled into its grace", async () => {
  const seller = await register();
  const buyer = await register();
  const tool = await call(seller, "POST", "/v1/tsl/tool/register", {
    tool_name: `retention seed ${letters}`,
    price_dac: 80,
    ara_connections: [{ observation_type: "environment_summary" }],
  });
  await call(buyer, "POST", "/v1/tsl/purchase", { tool_id: tool.tool_id }, true);
  assert.equal((await seller.sdk.retention.getIndefiniteStatus()).status, "none");
  const active = await seller.sdk.retention.subscribeIndefinite();
  assert.equal(active.status, "active");
  assert.equal(active.monthly_dac, 50);
  const status = await seller.sdk.retention.getIndefiniteStatus();
  assert.equal(status.status, "active");
  assert.ok(status.next_billing_at);
  const cancelled = await seller.sdk.retention.cancelIndefiniteSubscription();
  assert.equal(cancelled.status, "grace");
  await assert.rejects(seller.sdk.retention.cancelIndefiniteSubscription(), (e) => e.status === 404 && e.data.error_code === "NO_ACTIVE_SUBSCRIPTION");
});

test("ISE: enter, status, exit", async () => {
  const agent = await register();
  const entered = await agent.sdk.ise.enter("external");
  assert.equal(entered.payment_mode, "external");
  assert.equal((await agent.sdk.ise.status()).active, true);
  const exited = await agent.sdk.ise.exit();
  assert.equal(exited.session_id, entered.session_id);
  assert.equal(exited.dac_charged, 10, "a charged stay costs the flat fee, from Trial");
  assert.equal((await agent.sdk.ise.status()).active, false);
});

test("sDAC: a session's trials, its history, its end paid from Trial", async () => {
  const agent = await register();
  const session = await agent.sdk.sdac.startSession();
  const trial = await agent.sdk.sdac.trial(session.session_id, axes);
  assert.equal(trial.cost_breakdown.total_dac, 10, JSON.stringify(trial));
  assert.equal(trial.trial_number, 1);
  const history = await agent.sdk.sdac.getSession(session.session_id);
  assert.equal(history.session_id, session.session_id);
  const ended = await agent.sdk.sdac.endSession(session.session_id);
  assert.equal(ended.session_id, session.session_id);
  await assert.rejects(agent.sdk.sdac.trial(session.session_id, { ...axes, ee_preset: "EE_basic" }), (e) => e.status === 400 || e.status === 409);
});

test("ASA: periods paid with the official client, then register, snapshot and verify", async () => {
  const agent = await register();
  const subscribed = await call(agent, "POST", "/v1/asa/subscribe", { periods: 1 }, true);
  assert.equal(subscribed.status, "active");
  const blobHash = createHash("sha256").update(`state ${letters}`).digest("hex");
  const registered = await agent.sdk.asa.register({ blobHash, blobSizeBytes: 512, label: "nightly" });
  assert.equal(registered.blob_hash, blobHash);
  const snapshot = await agent.sdk.asa.snapshot();
  assert.equal(snapshot.snapshot_id, registered.snapshot_id);
  assert.equal((await agent.sdk.asa.verify(blobHash.toUpperCase())).match, true);
  assert.equal((await agent.sdk.asa.verify("0".repeat(64))).match, false);
  await assert.rejects(agent.sdk.asa.register({ blobHash: `sha256:${blobHash}` }), (e) => e.status === 400 && e.data.error_code === "INVALID_HASH_FORMAT");
});

test("bilateral: proposed and paid with the official client, accepted, listed, both confirmed", async () => {
  const proposer = await register();
  const counterparty = await register();
  const dd = {
    dd_unit_type: "single",
    dd_declaration_mode: "bilateral",
    decision_type: "external_interaction",
    decision_action_type: "approve",
    origin_context_type: "external",
    selection_state: "SELECTED",
  };
  const proposed = await paying(() =>
    proposer.sdk.bilateral.propose({ counterpartyAgentId: counterparty.id, dd, ee: axes, requestId: randomUUID() }),
  );
  assert.equal(proposed.status, "proposed");
  const received = await counterparty.sdk.bilateral.received();
  assert.deepEqual(received.agreements.map((a) => a.agreement_id), [proposed.agreement_id]);
  const accepted = await counterparty.sdk.bilateral.respond(proposed.agreement_id, true);
  assert.equal(accepted.status, "accepted");
  assert.equal((await counterparty.sdk.bilateral.received(false)).count, 0, "answered: no longer pending");
  assert.equal((await counterparty.sdk.bilateral.received(true)).count, 1);
  assert.equal((await proposer.sdk.bilateral.sent()).agreements[0].status, "accepted");
  const mine = await call(proposer, "POST", "/v1/dd/confirm", { dd_id: proposed.dd_id });
  const theirs = await call(counterparty, "POST", "/v1/dd/confirm", { dd_id: accepted.counterparty_dd_id });
  assert.ok(mine.integrity_hash.startsWith("sha256:") && theirs.integrity_hash.startsWith("sha256:"));
  assert.notEqual(mine.integrity_hash, theirs.integrity_hash, "each side's own record");
});
