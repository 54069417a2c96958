// The official x402 client pays a running anchor server over loopback.
// ANCHOR_BASE_URL names the server; it runs in local settlement mode.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";
import { decodePaymentRequiredHeader, encodePaymentSignatureHeader } from "@x402/core/http";
import {
  decodeSignedOffers,
  extractOffersFromPaymentRequired,
  extractReceiptFromResponse,
  findAcceptsObjectFromSignedOffer,
  verifyOfferSignatureJWS,
  verifyReceiptMatchesOffer,
  verifyReceiptSignatureJWS,
} from "@x402/extensions/offer-receipt";

const base = process.env.ANCHOR_BASE_URL;
// Anvil's public test key #0: never holds real money.
const account = privateKeyToAccount("0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80");

const json = (body) => ({ method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
const withToken = (init, token) => ({ ...init, headers: { ...init.headers, authorization: `Bearer ${token}` } });
const createBody = (preset) => ({
  request_id: randomUUID(),
  dd: {
    dd_unit_type: "single", dd_declaration_mode: "self_declared", decision_type: "external_interaction",
    decision_action_type: "execute", origin_context_type: "external", selection_state: "SELECTED",
  },
  ee: { ee_preset: preset },
});

test("a fresh agent spends its Trial, then pays with x402 and confirms", async () => {
  assert.ok(base, "ANCHOR_BASE_URL is set");
  const registered = await (await fetch(`${base}/v1/agent/register`, json({}))).json();
  const token = registered.auth_token;

  // 3 x EE_high = 472.5 of the 500 Trial DAC; the fourth does not fit: Trial
  // pays its 10 DAC base fee, x402 its 147.5 DAC premium.
  for (let i = 0; i < 3; i++) {
    const r = await fetch(`${base}/v1/dd/create`, withToken(json(createBody("EE_high")), token));
    assert.equal(r.status, 201);
  }
  const unpaid = await fetch(`${base}/v1/dd/create`, withToken(json(createBody("EE_high")), token));
  assert.equal(unpaid.status, 402);
  assert.ok(unpaid.headers.get("payment-required"));

  const client = new x402Client()
    .setSpendControls({ maxAmountPerPayment: "$5" })
    .register("eip155:8453", new ExactEvmScheme(account));
  const pay = wrapFetchWithPayment(fetch, client);
  const paid = await pay(`${base}/v1/dd/create`, withToken(json(createBody("EE_high")), token));
  const created = await paid.json();
  assert.equal(paid.status, 201, JSON.stringify(created));
  assert.equal(created.status, "pending_payment");
  assert.equal(created.payment.amount_units, "147500");
  assert.equal(created.cost_breakdown.base_fee_source, "trial");

  const confirmed = await fetch(`${base}/v1/dd/confirm`, withToken(json({ dd_id: created.dd_id }), token));
  const body = await confirmed.json();
  assert.equal(confirmed.status, 200, JSON.stringify(body));
  const settlement = decodePaymentResponseHeader(confirmed.headers.get("payment-response"));
  assert.equal(settlement.success, true);
  assert.equal(settlement.network, "eip155:8453");
  assert.equal(settlement.payer.toLowerCase(), account.address.toLowerCase());

  const status = await (await fetch(`${base}/v1/payment/${created.dd_id}/status`, { headers: { authorization: `Bearer ${token}` } })).json();
  assert.equal(status.settlement_status, "settled");
  assert.equal(status.x402.status, "settled");
  assert.equal(status.x402.payer, account.address.toLowerCase());
});

// The published JS SDK tells its users to retry a 402 with the signed payload
// in X-PAYMENT; the official client signs it here and the retry sends it there.
test("a payment sent in X-PAYMENT pays a declaration the same way", async () => {
  const registered = await (await fetch(`${base}/v1/agent/register`, json({}))).json();
  const token = registered.auth_token;
  for (let i = 0; i < 3; i++) {
    assert.equal((await fetch(`${base}/v1/dd/create`, withToken(json(createBody("EE_high")), token))).status, 201);
  }
  const body = createBody("EE_high");
  const unpaid = await fetch(`${base}/v1/dd/create`, withToken(json(body), token));
  assert.equal(unpaid.status, 402);
  const required = decodePaymentRequiredHeader(unpaid.headers.get("payment-required"));

  // The challenge carries the service's signed offer (x402's offer-receipt
  // extension). @x402/extensions verifies it by resolving its kid (the
  // service's did:web document), and under the log's own key, read from
  // GET /v1/log/key: the key every checkpoint is signed with.
  const offers = extractOffersFromPaymentRequired(required);
  assert.equal(offers.length, 1);
  const resolved = await verifyOfferSignatureJWS(offers[0]);
  const logKey = (await (await fetch(`${base}/v1/log/key`)).json()).public_key;
  // A C2SP verifier key: name+hex id+base64 (which may hold "+" itself).
  const raw = Buffer.from(logKey.match(/^[^+]+\+[0-9a-f]{8}\+(.+)$/)[1], "base64");
  assert.equal(raw[0], 1, "an Ed25519 note key");
  const jwk = { kty: "OKP", crv: "Ed25519", x: raw.subarray(1).toString("base64url") };
  const offer = await verifyOfferSignatureJWS(offers[0], jwk);
  assert.deepEqual(offer, resolved);
  assert.deepEqual(findAcceptsObjectFromSignedOffer(decodeSignedOffers(offers)[0], required.accepts), required.accepts[0]);
  assert.equal(offer.resourceUrl, required.resource.url);
  assert.equal(offer.amount, "147500");
  assert.equal(offer.payTo, required.accepts[0].payTo);
  assert.ok(offer.validUntil > Date.now() / 1000, "the offer still holds");
  // An offer changed after signing is refused.
  const [header, signed, signature] = offers[0].signature.split(".");
  const cheaper = { ...JSON.parse(Buffer.from(signed, "base64url")), amount: "1" };
  const forged = [header, Buffer.from(JSON.stringify(cheaper)).toString("base64url"), signature].join(".");
  await assert.rejects(verifyOfferSignatureJWS({ ...offers[0], signature: forged }, jwk));

  const client = new x402Client().register("eip155:8453", new ExactEvmScheme(account));
  const payload = await client.createPaymentPayload(required);
  const retry = withToken(json(body), token);
  retry.headers["x-payment"] = encodePaymentSignatureHeader(payload);
  const paid = await fetch(`${base}/v1/dd/create`, retry);
  const created = await paid.json();
  assert.equal(paid.status, 201, JSON.stringify(created));
  assert.equal(created.status, "pending_payment");
  assert.equal(created.payment.amount_units, "147500");

  // The same authorization cannot pay twice, whichever header carries it.
  const again = withToken(json(createBody("EE_high")), token);
  again.headers["payment-signature"] = encodePaymentSignatureHeader(payload);
  const replayed = await fetch(`${base}/v1/dd/create`, again);
  assert.equal(replayed.status, 402);

  const confirmed = await fetch(`${base}/v1/dd/confirm`, withToken(json({ dd_id: created.dd_id }), token));
  assert.equal(confirmed.status, 200, JSON.stringify(await confirmed.clone().json()));
  const settlement = decodePaymentResponseHeader(confirmed.headers.get("payment-response"));
  assert.equal(settlement.success, true);
  assert.equal(settlement.payer.toLowerCase(), account.address.toLowerCase());

  // The settlement carries the service's signed receipt, under the same key:
  // who paid, for the create's resource (the offer's), by which settlement.
  const receipt = extractReceiptFromResponse(confirmed);
  assert.ok(receipt, "a signed receipt in PAYMENT-RESPONSE");
  const paidFor = await verifyReceiptSignatureJWS(receipt);
  assert.deepEqual(await verifyReceiptSignatureJWS(receipt, jwk), paidFor);
  assert.equal(paidFor.resourceUrl, offer.resourceUrl);
  assert.equal(paidFor.transaction, settlement.transaction);
  assert.equal(paidFor.payer.toLowerCase(), account.address.toLowerCase());
  assert.ok(verifyReceiptMatchesOffer(receipt, decodeSignedOffers(offers)[0], [account.address]), "the receipt matches the offer");
  const [receiptHeader, receiptBody, receiptSignature] = receipt.signature.split(".");
  const someoneElse = { ...JSON.parse(Buffer.from(receiptBody, "base64url")), payer: "0x0000000000000000000000000000000000000001" };
  const altered = [receiptHeader, Buffer.from(JSON.stringify(someoneElse)).toString("base64url"), receiptSignature].join(".");
  await assert.rejects(verifyReceiptSignatureJWS({ ...receipt, signature: altered }, jwk));

  // The declaration's dispute-evidence bundle holds this very receipt, and
  // an offer of the terms paid that the reference package verifies and
  // matches to it. ANCHOR_EVIDENCE_OUT keeps the bundle for `anchor verify`.
  let evidence;
  for (let i = 0; i < 200 && !evidence; i++) {
    const answer = await fetch(`${base}/v1/dd/${created.dd_id}/evidence`, { headers: { authorization: `Bearer ${token}` } });
    if (answer.status === 200) {
      evidence = await answer.json();
    } else {
      assert.equal(answer.status, 409, "not yet in the log");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  assert.ok(evidence, "the bundle, once the log holds the record");
  assert.equal(evidence.format, "anchor-evidence/1");
  const [bundled] = evidence.payments;
  assert.equal(bundled.receipt, receipt.signature);
  const bundledOffer = { format: "jws", acceptIndex: 0, signature: bundled.offer };
  const terms = await verifyOfferSignatureJWS(bundledOffer, jwk);
  assert.equal(terms.resourceUrl, offer.resourceUrl);
  assert.equal(terms.amount, offer.amount);
  assert.equal(terms.payTo, offer.payTo);
  const bundledReceipt = { format: "jws", signature: bundled.receipt };
  assert.ok(verifyReceiptMatchesOffer(bundledReceipt, decodeSignedOffers([bundledOffer])[0], [account.address]), "the bundle's receipt matches its offer");
  if (process.env.ANCHOR_EVIDENCE_OUT) {
    writeFileSync(process.env.ANCHOR_EVIDENCE_OUT, JSON.stringify(evidence));
  }
});
