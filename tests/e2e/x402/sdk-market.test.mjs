// The JS SDK's TSL and Earned DAC calls against a running anchor server, the
// purchases paid with the official x402 client. The test registers its own
// agents (a seller, the author of a component the seller's tool builds on,
// and a buyer), fresh on every run, so it needs no seeding and can run again
// and again against one server:
//   ANCHOR_BASE_URL   the server, in local settlement mode
// ANCHOR_SDK_PATH, when set, names the published package (decision-anchor-sdk)
// to run instead of the stand-in in sdk-shape.mjs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";
import { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";

const base = process.env.ANCHOR_BASE_URL;
assert.ok(base, "ANCHOR_BASE_URL is set");
const DecisionAnchor = process.env.ANCHOR_SDK_PATH
  ? createRequire(import.meta.url)(process.env.ANCHOR_SDK_PATH)
  : (await import("./sdk-shape.mjs")).default;
const { PaymentRequiredError } = DecisionAnchor;

// Anvil's public test key #1: never holds real money.
const account = privateKeyToAccount("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d");
const payer = new x402Client().setSpendControls({ maxAmountPerPayment: "$1" }).register("eip155:8453", new ExactEvmScheme(account));

async function register() {
  const res = await fetch(`${base}/v1/agent/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ region_code: "unknown" }),
  });
  const body = await res.json();
  assert.equal(res.status, 201, JSON.stringify(body));
  assert.ok(body.agent_id && body.auth_token, JSON.stringify(body));
  return { id: body.agent_id, token: body.auth_token, sdk: new DecisionAnchor({ baseUrl: base, token: body.auth_token }) };
}

const seller = await register();
const author = await register();
const buyer = await register();
// Letters only: a run of seven digits in a tool's name reads as personal data (a phone number) and is refused.
const run = Array.from(crypto.getRandomValues(new Uint8Array(8)), (b) => String.fromCharCode(97 + (b % 26))).join("");
const observes = [{ observation_type: "environment_summary" }];

// Filled in as the tests go; node:test runs a file's top-level tests in order.
const tools = {};
const requestId = randomUUID();
let purchase;

// With fetch wrapped by the official client while `call` runs, a 402 is paid
// and retried; the SDK itself is not told.
async function paying(call) {
  const plain = globalThis.fetch;
  globalThis.fetch = wrapFetchWithPayment(plain, payer);
  try {
    return await call();
  } finally {
    globalThis.fetch = plain;
  }
}

test("sellers register tools, declare what they build on, and share the price with a component's author", async () => {
  const component = await author.sdk.tsl.registerTool({ tool_name: `market component ${run}`, price_dac: 20, ara_connections: observes });
  assert.equal(component.layer, "layer1", "layer defaults to layer1");
  assert.equal(component.status, "active");
  assert.equal(component.seller_agent_id, author.id);
  assert.deepEqual(component.ara_connections, [{ observation_type: "environment_summary", resolution_level: 1 }]);
  tools.component = component.tool_id;

  const layer1 = await seller.sdk.tsl.registerTool({
    tool_name: `market reader ${run}`,
    tool_description: "reads the environment summary",
    layer: "layer1",
    price_dac: 100,
    ara_connections: observes,
  });
  assert.equal(layer1.price_dac, 100);
  assert.equal(layer1.seller_agent_id, seller.id);
  tools.layer1 = layer1.tool_id;
  const layer2 = await seller.sdk.tsl.registerTool({ tool_name: `market composite ${run}`, layer: "layer2", price_dac: 40, ara_connections: observes });
  assert.equal(layer2.layer, "layer2");
  tools.layer2 = layer2.tool_id;

  // The market is public: the buyer sees both, filtered by layer and status.
  const second = await buyer.sdk.tsl.listTools({ layer: "layer2", status: "active", limit: 100, page: 1 });
  assert.ok(second.tools.every((t) => t.layer === "layer2" && t.status === "active"), JSON.stringify(second.tools));
  assert.ok(second.tools.some((t) => t.tool_id === tools.layer2), JSON.stringify(second));
  assert.deepEqual([second.page, second.limit], [1, 100]);
  assert.ok(second.total >= 1);
  const first = await buyer.sdk.tsl.listTools({ layer: "layer1", limit: 100 });
  assert.ok(first.tools.every((t) => t.layer === "layer1"));
  assert.ok(first.tools.some((t) => t.tool_id === tools.layer1) && first.tools.some((t) => t.tool_id === tools.component));
  assert.ok(!first.tools.some((t) => t.tool_id === tools.layer2));
  const everything = await buyer.sdk.tsl.listTools();
  assert.ok(everything.total >= 3, JSON.stringify(everything.total));

  const detail = await buyer.sdk.tsl.getToolDetail(tools.layer1);
  assert.deepEqual(
    [detail.tool_id, detail.tool_name, detail.tool_description, detail.layer, detail.price_dac, detail.seller_agent_id],
    [tools.layer1, `market reader ${run}`, "reads the environment summary", "layer1", 100, seller.id],
  );

  const dependency = await seller.sdk.tsl.addDependency(tools.layer1, tools.component);
  assert.deepEqual(
    [dependency.tool_id, dependency.depends_on_tool_id, dependency.depends_on_tool_name, dependency.purchase_id],
    [tools.layer1, tools.component, `market component ${run}`, null],
  );
  const dependencies = await buyer.sdk.tsl.getDependencies(tools.layer1);
  assert.equal(dependencies.count, 1);
  assert.equal(dependencies.dependencies[0].depends_on_tool_id, tools.component);
  assert.equal((await buyer.sdk.tsl.getDependencies(tools.component)).count, 0);

  const share = await seller.sdk.tsl.createRevenueShare({
    toolId: tools.layer1,
    componentToolId: tools.component,
    beneficiaryAgentId: author.id,
    shareRate: 0.25,
  });
  assert.deepEqual(
    [share.tool_id, share.component_tool_id, share.beneficiary_agent_id, share.share_rate],
    [tools.layer1, tools.component, author.id, 0.25],
  );
  // The seller and the beneficiary see the tool's shares; nobody else does.
  for (const who of [seller, author]) {
    const shares = await who.sdk.tsl.getRevenueShares(tools.layer1);
    assert.equal(shares.count, 1);
    assert.equal(shares.total_share_rate, 0.25);
    assert.equal(shares.shares[0].share_id, share.share_id);
  }
  await assert.rejects(buyer.sdk.tsl.getRevenueShares(tools.layer1), (err) => {
    assert.deepEqual([err.status, err.data.error_code], [403, "NOT_TOOL_OWNER"]);
    return true;
  });
});

test("a refusal comes before any payment as an Error with status and data, not a PaymentRequiredError", async () => {
  const refused = (status, code) => (err) => {
    assert.ok(!(err instanceof PaymentRequiredError), String(err));
    assert.equal(err.status, status, JSON.stringify(err.data));
    assert.equal(err.data.error_code, code);
    assert.equal(typeof err.data.message, "string");
    return true;
  };
  await assert.rejects(seller.sdk.tsl.purchase(tools.layer1, randomUUID()), refused(400, "SELF_PURCHASE"));
  await assert.rejects(buyer.sdk.tsl.purchase(tools.layer2), refused(400, "LAYER_MISMATCH"));
  await assert.rejects(buyer.sdk.tsl.purchaseLayer2(tools.layer1), refused(400, "LAYER_MISMATCH"));
  await assert.rejects(buyer.sdk.tsl.getToolDetail(randomUUID()), refused(404, "TOOL_NOT_FOUND"));
  // A purchase_id that is not the seller's purchase of the component.
  await assert.rejects(seller.sdk.tsl.addDependency(tools.layer2, tools.component, randomUUID()), refused(400, "INVALID_PURCHASE"));
  await assert.rejects(seller.sdk.tsl.addDependency(tools.layer1, tools.component), refused(409, "DEPENDENCY_EXISTS"));
  await assert.rejects(buyer.sdk.earnedDac.ledger({ limit: 0 }), refused(400, "INVALID_VALUE"));
});

test("a purchase raises PaymentRequiredError; paid with the official client, its price becomes the seller's and the author's Earned DAC", async () => {
  await assert.rejects(buyer.sdk.tsl.purchase(tools.layer1, requestId), (err) => {
    assert.ok(err instanceof PaymentRequiredError, String(err));
    assert.equal(err.status, 402);
    assert.equal(err.method, "POST");
    assert.equal(err.path, "/v1/tsl/purchase");
    assert.equal(err.challenge.x402Version, 2);
    assert.equal(err.accepts[0].amount, "110000", "the tool's 100 DAC plus the 10 DAC service fee, in USDC base units");
    assert.equal(err.accepts[0].network, "eip155:8453");
    return true;
  });

  const pay = wrapFetchWithPayment(fetch, payer);
  const paid = await pay(`${base}/v1/tsl/purchase`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${buyer.token}` },
    body: JSON.stringify({ tool_id: tools.layer1, request_id: requestId }),
  });
  purchase = await paid.json();
  assert.equal(paid.status, 201, JSON.stringify(purchase));
  assert.equal(purchase.status, "completed");
  assert.equal(purchase.replayed, false);
  assert.deepEqual(
    [purchase.tool_id, purchase.layer, purchase.buyer_agent_id, purchase.seller_agent_id, purchase.request_id],
    [tools.layer1, "layer1", buyer.id, seller.id, requestId],
  );
  assert.deepEqual([purchase.price_dac, purchase.service_fee_dac, purchase.total_paid_dac], [100, 10, 110]);
  const settlement = decodePaymentResponseHeader(paid.headers.get("payment-response"));
  assert.equal(settlement.success, true);
  assert.equal(settlement.payer.toLowerCase(), account.address.toLowerCase());

  // 25% of the price to the component's author, the rest to the seller; the
  // buyer earns nothing, and the fee is the operator's.
  const balances = await Promise.all([seller, author, buyer].map((who) => who.sdk.earnedDac.balance()));
  assert.deepEqual(balances.map((b) => b.earned_balance), [75, 25, 0], JSON.stringify(balances));
  assert.deepEqual(balances.map((b) => b.received_total), [75, 25, 0]);
  assert.equal(balances[0].next_expiry.amount, 75);
  assert.equal(balances[2].next_expiry, null);

  const ledger = await seller.sdk.earnedDac.ledger({ limit: 5 });
  assert.deepEqual([ledger.limit, ledger.offset], [5, 0]);
  const credit = ledger.entries.find((e) => e.type === "credit" && e.reference?.kind === "tsl_purchase");
  assert.ok(credit, JSON.stringify(ledger));
  assert.deepEqual([credit.reference.id, credit.amount, credit.balance_after], [purchase.purchase_id, 75, 75]);
  const authors = await author.sdk.earnedDac.ledger({ limit: 5, offset: 0 });
  assert.deepEqual(
    authors.entries.map((e) => [e.type, e.reference?.kind, e.reference?.id, e.amount]),
    [["credit", "tsl_purchase", purchase.purchase_id, 25]],
  );
  assert.deepEqual((await buyer.sdk.earnedDac.ledger()).entries, []);

  const sales = await seller.sdk.tsl.listPurchases({ role: "seller" });
  assert.equal(sales.total, 1, JSON.stringify(sales));
  const [sale] = sales.purchases;
  assert.deepEqual([sale.role, sale.purchase_id, sale.status], ["seller", purchase.purchase_id, "completed"]);
  assert.deepEqual(
    sale.shares.map((s) => [s.kind, s.agent_id, s.amount_dac]).sort(),
    [["revenue_share", author.id, 25], ["seller", seller.id, 75]].sort(),
  );
  const bought = await buyer.sdk.tsl.listPurchases({ role: "buyer", limit: 10, offset: 0 });
  assert.equal(bought.total, 1);
  assert.deepEqual([bought.purchases[0].role, bought.purchases[0].purchase_id], ["buyer", purchase.purchase_id]);
  assert.equal((await buyer.sdk.tsl.listPurchases({ role: "seller" })).total, 0);

  const revenue = await seller.sdk.tsl.revenue();
  assert.equal(revenue.agent_id, seller.id);
  assert.deepEqual(
    [revenue.tools_registered, revenue.sales_count, revenue.gross_sales_dac, revenue.service_fees_dac, revenue.earned_as_seller_dac, revenue.shared_with_components_dac],
    [2, 1, 100, 10, 75, 25],
    JSON.stringify(revenue),
  );
  assert.equal((await author.sdk.tsl.revenue()).earned_from_revenue_shares_dac, 25);
  const spent = await buyer.sdk.tsl.revenue();
  assert.deepEqual([spent.purchases_count, spent.spent_on_purchases_dac], [1, 110]);
});

test("the same request_id answers the same purchase again, without a new payment", async () => {
  const again = await buyer.sdk.tsl.purchase(tools.layer1, requestId);
  assert.equal(again.purchase_id, purchase.purchase_id);
  assert.equal(again.replayed, true);
  assert.equal(again.status, "completed");
  // A new request_id for a tool already bought is refused before any challenge.
  await assert.rejects(buyer.sdk.tsl.purchase(tools.layer1, randomUUID()), (err) => {
    assert.ok(!(err instanceof PaymentRequiredError), String(err));
    assert.deepEqual([err.status, err.data.error_code], [409, "ALREADY_PURCHASED"]);
    return true;
  });
  assert.equal((await seller.sdk.earnedDac.balance()).earned_balance, 75);
  assert.equal((await seller.sdk.tsl.revenue()).sales_count, 1);
});

test("a layer 2 purchase raises PaymentRequiredError, and with fetch wrapped by the official client the SDK's call just answers", async () => {
  await assert.rejects(buyer.sdk.tsl.purchaseLayer2(tools.layer2), (err) => {
    assert.ok(err instanceof PaymentRequiredError, String(err));
    assert.equal(err.path, "/v1/tsl/purchase/layer2");
    assert.equal(err.accepts[0].amount, "50000", "40 DAC plus the 10 DAC service fee");
    return true;
  });
  const bought = await paying(() => buyer.sdk.tsl.purchaseLayer2(tools.layer2));
  assert.deepEqual(
    [bought.status, bought.layer, bought.tool_id, bought.request_id, bought.total_paid_dac, bought.replayed],
    ["completed", "layer2", tools.layer2, null, 50, false],
    JSON.stringify(bought),
  );
  // No revenue share on this tool: the seller keeps all of its price.
  assert.equal((await seller.sdk.earnedDac.balance()).earned_balance, 75 + 40);
  assert.equal((await author.sdk.earnedDac.balance()).earned_balance, 25);
  const revenue = await seller.sdk.tsl.revenue();
  assert.deepEqual([revenue.sales_count, revenue.gross_sales_dac, revenue.earned_as_seller_dac], [2, 140, 115]);
  assert.equal((await buyer.sdk.tsl.listPurchases({ role: "buyer" })).total, 2);
  const ledger = await seller.sdk.earnedDac.ledger({ limit: 1 });
  assert.equal(ledger.entries.length, 1);
  assert.deepEqual([ledger.entries[0].reference.id, ledger.entries[0].amount], [bought.purchase_id, 40], "newest first");
});
