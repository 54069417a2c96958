// Seeds a tool sale for the owner portal's browser test: a seller registers a
// tool and a buyer buys it, and the seller subscribes to ASA, paid with the
// official x402 client (local settlement). Prints one JSON line: the seller's id and token, the tool.
//   ANCHOR_BASE_URL=http://127.0.0.1:PORT node seed-sale.mjs
import { wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";

const base = process.env.ANCHOR_BASE_URL;
if (!base) throw new Error("ANCHOR_BASE_URL is not set");
// Anvil's public test key #2: never holds real money.
const account = privateKeyToAccount("0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a");
const payer = new x402Client().setSpendControls({ maxAmountPerPayment: "$1" }).register("eip155:8453", new ExactEvmScheme(account));
const paying = wrapFetchWithPayment(fetch, payer);

async function call(doFetch, method, path, token, body) {
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await doFetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const json = await response.json();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(json)}`);
  return json;
}

const seller = await call(fetch, "POST", "/v1/agent/register", null, {});
const buyer = await call(fetch, "POST", "/v1/agent/register", null, {});
const tool = await call(fetch, "POST", "/v1/tsl/tool/register", seller.auth_token, {
  tool_name: "portal-shares",
  price_dac: 20,
  ara_connections: [{ observation_type: "agent_profile" }],
});
const bought = await call(paying, "POST", "/v1/tsl/purchase", buyer.auth_token, { tool_id: tool.tool_id });
if (bought.status !== "completed") throw new Error(`the purchase did not complete: ${JSON.stringify(bought)}`);
// The seller archives its state too: one ASA period, paid over x402.
const archived = await call(paying, "POST", "/v1/asa/subscribe", seller.auth_token, { periods: 1 });
if (archived.status !== "active") throw new Error(`the ASA subscription is not active: ${JSON.stringify(archived)}`);
process.stdout.write(`${JSON.stringify({ seller_id: seller.agent_id, seller_token: seller.auth_token, tool_id: tool.tool_id })}\n`);
