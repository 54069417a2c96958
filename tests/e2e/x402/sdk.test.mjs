// The JS SDK's ARA and DUR calls against a running anchor server, paid with
// the official x402 client where they cost something. tests/api/sdk.rs seeds
// the server (eleven agents with a declaration on the previous day, so the
// environment releases show something) and names what the test needs:
//   ANCHOR_BASE_URL   the server
//   ANCHOR_TOKEN      the observing agent's token
//   ANCHOR_AGENT_ID   the observing agent
//   ANCHOR_DD_ID      one of its confirmed declarations
//   ANCHOR_OTHER_ID   another agent, disclosure level full
// ANCHOR_SDK_PATH, when set, names the published package (decision-anchor-sdk)
// to run instead of the stand-in in sdk-shape.mjs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { encodePaymentSignatureHeader } from "@x402/core/http";
import { privateKeyToAccount } from "viem/accounts";

const env = (name) => {
  const value = process.env[name];
  assert.ok(value, `${name} is set`);
  return value;
};
const base = env("ANCHOR_BASE_URL");
const me = env("ANCHOR_AGENT_ID");
const ddId = env("ANCHOR_DD_ID");
const other = env("ANCHOR_OTHER_ID");
const DecisionAnchor = process.env.ANCHOR_SDK_PATH
  ? createRequire(import.meta.url)(process.env.ANCHOR_SDK_PATH)
  : (await import("./sdk-shape.mjs")).default;
const { PaymentRequiredError } = DecisionAnchor;
const sdk = new DecisionAnchor({ baseUrl: base, token: env("ANCHOR_TOKEN") });

// Anvil's public test key #1: never holds real money.
const account = privateKeyToAccount("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d");
const payer = new x402Client().setSpendControls({ maxAmountPerPayment: "$1" }).register("eip155:8453", new ExactEvmScheme(account));

test("an agent observes itself and reads its usage reports for free", async () => {
  for (const call of [
    () => sdk.ara.agentProfile(me),
    () => sdk.ara.agentProfile(me, { resolutionLevel: 3 }),
    () => sdk.ara.agentTimeline(me, { resolutionLevel: 2 }),
    () => sdk.ara.agentEePattern(me, { resolutionLevel: 3 }),
  ]) {
    const seen = await call();
    assert.equal(seen.dac_charged, 0, JSON.stringify(seen));
    assert.equal(seen.agent_id, me);
  }
  const profile = await sdk.ara.agentProfile(me, { resolutionLevel: 3 });
  assert.ok("demotion_stats" in profile, "an agent sees its own demotion fields");

  const summary = await sdk.dur.summary();
  assert.equal(summary.dd_count, 1);
  const spend = summary.dac_spend;
  assert.equal(spend.total, spend.dd_ee + spend.ara + spend.ise + spend.sdac + spend.tsl + spend.asa);
  assert.equal(spend.total, spend.by_source.trial + spend.by_source.external + spend.by_source.earned);
  assert.equal(summary.dac_charged, 0);

  const transactions = await sdk.dur.transactions({ type: "dd_ee", page: 1, limit: 10 });
  assert.ok(transactions.transactions.length >= 1, JSON.stringify(transactions));
  assert.ok(transactions.transactions.every((t) => t.type === "dd_ee"));
  assert.equal((await sdk.dur.tsl({ role: "buyer" })).total, 0);

  const csv = await sdk.dur.export();
  assert.equal(typeof csv, "string", "the default export is CSV, returned as text");
  assert.ok(csv.split("\n").length >= 2, csv);
  const json = await sdk.dur.export({ format: "json" });
  assert.equal(typeof json, "object");

  const metadata = await sdk.dur.decisionMetadata({ from: "2020-01-01" });
  assert.equal(metadata.dd_count, 1);
  assert.deepEqual(metadata.decision_class, { payment: 1 });
  assert.equal(metadata.dac_charged, 0);
  const [usdc] = (await sdk.dur.decisionScale()).units;
  assert.deepEqual([usdc.unit, usdc.count, usdc.max], ["USDC", 1, 2.5]);
  const classified = await sdk.dur.selfClassification();
  assert.deepEqual([classified.dd_count, classified.classified_count], [1, 0]);
});

test("a refusal comes before any payment and is not a PaymentRequiredError", async () => {
  await assert.rejects(sdk.ara.environmentTsl(), (err) => {
    assert.ok(!(err instanceof PaymentRequiredError));
    assert.equal(err.status, 404);
    assert.equal(err.data.error_code, "DATA_UNAVAILABLE");
    return true;
  });
  await assert.rejects(sdk.ara.agentProfile(me, { resolutionLevel: 4 }), (err) => err.status === 400);
});

test("a paid observation raises PaymentRequiredError, and the payment sent in X-PAYMENT gets the answer", async () => {
  let required;
  await assert.rejects(sdk.ara.environmentSummary(), (err) => {
    assert.ok(err instanceof PaymentRequiredError, String(err));
    assert.equal(err.retryHeader, "X-PAYMENT");
    assert.equal(err.accepts[0].amount, "1000", "environment observation costs 1 DAC");
    required = err;
    return true;
  });
  const payload = await payer.createPaymentPayload(required.challenge);
  const answer = await sdk._req(required.method, required.path, {
    headers: { [required.retryHeader]: encodePaymentSignatureHeader(payload) },
  });
  assert.equal(answer.dac_charged, 1, JSON.stringify(answer));
  assert.ok(answer.agent_count >= 10, JSON.stringify(answer));

  // Nor is the agent asked to pay again for it: its own payment sent again
  // for the same observation (a client that lost the answer) is answered
  // again, charged once (decision 0085), not a challenge a wrapped fetch would pay.
  const again = await sdk._req(required.method, required.path, {
    headers: { [required.retryHeader]: encodePaymentSignatureHeader(payload) },
  });
  assert.equal(again.dac_charged, 1, JSON.stringify(again));
  assert.equal(again.agent_count, answer.agent_count, JSON.stringify(again));
  // For another request it is a duplicate (409 DUPLICATE_REQUEST, decision 0082).
  await assert.rejects(
    sdk._req(required.method, "/v1/ara/environment/density", { headers: { [required.retryHeader]: encodePaymentSignatureHeader(payload) } }),
    (err) => {
      assert.ok(!(err instanceof PaymentRequiredError), String(err));
      assert.equal(err.status, 409, JSON.stringify(err.data));
      return true;
    },
  );
});

test("with fetch wrapped by the official client, the SDK's paid calls just answer", async () => {
  const plain = globalThis.fetch;
  globalThis.fetch = wrapFetchWithPayment(plain, payer);
  try {
    const profile = await sdk.ara.agentProfile(other, { resolutionLevel: 1 });
    assert.equal(profile.dac_charged, 3, JSON.stringify(profile));
    assert.ok(!("demotion_stats" in profile), "another agent's demotion fields are absent");

    const compare = await sdk.ara.patternCompare([me, other]);
    assert.ok(compare.dac_charged > 0, JSON.stringify(compare));

    const pattern = await sdk.ara.patternEeDistribution();
    assert.equal(pattern.dac_charged, 1, JSON.stringify(pattern));

    const evidence = await sdk.ara.evidenceReport(ddId);
    assert.equal(evidence.report.dac_charged, 10, JSON.stringify(evidence));
  } finally {
    globalThis.fetch = plain;
  }
  // What was paid shows in the agent's usage report, by kind and by source.
  const spend = (await sdk.dur.summary()).dac_spend;
  assert.ok(spend.ara >= 1 + 3 + 1 + 10, JSON.stringify(spend));
  assert.equal(spend.total, spend.by_source.trial + spend.by_source.external + spend.by_source.earned);
});
