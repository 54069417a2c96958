//! The tool market: registration and its refusals, purchases paid over x402
//! and shared in Earned DAC (revenue shares and the owner's human share add
//! up to the price), shares that never pass one (also under concurrency),
//! dependencies without cycles, transfers after seven days, and a purchase
//! whose settlement fails or is unknown.

use anchor_domain::{Clock, MilliDac};
use anchor_tests::x402::{Scripted, Twist, b64, challenge_of, pay};
use anchor_tests::*;
use anchor_x402::settlement::Settled;
use chrono::Duration;
use serde_json::{Value, json};

both_backends!(
    tools_are_registered_listed_and_refused_with_their_codes,
    a_purchase_is_paid_over_x402_and_its_price_shared_in_earned_dac,
    shares_never_take_more_than_the_price,
    dependencies_never_form_a_cycle,
    transfers_and_retirements_take_effect_after_seven_days,
    a_transfer_never_gives_an_agent_more_than_its_most_tools,
    a_tool_has_at_most_fifty_dependencies_and_twenty_shares,
    a_purchase_settles_once_or_not_at_all,
    the_markets_release_counts_tools_and_at_least_ten_buyers,
    the_nil_agent_of_deidentified_records_is_nobody
);

fn tool_body(name: &str, price: f64, layer: &str) -> Value {
    json!({
        "tool_name": name,
        "tool_description": "shares of EE choices",
        "layer": layer,
        "price_dac": price,
        "ara_connections": [{ "observation_type": "pattern_ee_distribution" }, { "observation_type": "agent_profile", "resolution_level": 2 }]
    })
}

pub(crate) async fn register_tool(t: &TestServer, seller: &Agent, name: &str, price: f64, layer: &str) -> String {
    let reply = t.post("/v1/tsl/tool/register", Some(&seller.token), &tool_body(name, price, layer)).await;
    assert_eq!(reply.status.as_u16(), 201, "{}", reply.text);
    reply.json["tool_id"].as_str().unwrap().to_string()
}

/// Sends with the agent's token and, when given, a payment.
async fn send(t: &TestServer, agent: &Agent, path: &str, body: &Value, payment: Option<&Value>) -> Reply {
    let bearer = format!("Bearer {}", agent.token);
    let signature = payment.map(b64);
    let mut headers = vec![("authorization", bearer.as_str())];
    if let Some(signature) = &signature {
        headers.push(("payment-signature", signature.as_str()));
    }
    t.call_with("POST", path, &headers, Some(body)).await
}

/// Buys: the challenge first (asserting its amount in USDC base units), then the paid request.
pub(crate) async fn buy(t: &TestServer, buyer: &Agent, path: &str, body: &Value, amount_units: &str) -> Reply {
    let challenge = challenge_of(&send(t, buyer, path, body, None).await);
    assert_eq!(challenge["accepts"][0]["amount"], amount_units, "{challenge}");
    let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    send(t, buyer, path, body, Some(&payment)).await
}

async fn earned(t: &TestServer, agent: &Agent) -> Value {
    let reply = t.get("/v1/earned-dac/balance", Some(&agent.token)).await;
    assert_eq!(reply.status.as_u16(), 200, "{}", reply.text);
    reply.json["earned_balance"].clone()
}

async fn tools_are_registered_listed_and_refused_with_their_codes(backend: Backend) {
    let t = TestServer::start(backend).await;
    let seller = t.register().await;
    let mut body = tool_body("ee-mix", 50.0, "layer1");
    body.as_object_mut().unwrap().remove("layer");
    let reply = t.post("/v1/tsl/tool/register", Some(&seller.token), &body).await;
    assert_eq!(reply.status.as_u16(), 201, "{}", reply.text);
    assert_eq!(reply.json["layer"], "layer1", "the stored layer is echoed");
    assert_eq!(reply.json["status"], "active");
    assert_eq!(reply.json["seller_agent_id"], seller.id.as_str());
    assert_eq!(reply.json["ara_connections"][0], json!({ "observation_type": "pattern_ee_distribution", "resolution_level": 1 }));
    let first = reply.json["tool_id"].as_str().unwrap().to_string();
    t.clock.advance(Duration::seconds(1));
    let second = register_tool(&t, &seller, "timeline-shape", 2.5, "layer2").await;

    // The reference names a non-positive price and a layer outside layer1/layer2 INVALID_INPUT.
    let refusals: [(Value, &str); 13] = [
        (json!({ "ara_connections": null }), "ARA_CONNECTION_REQUIRED"),
        (json!({ "ara_connections": [] }), "ARA_CONNECTION_REQUIRED"),
        (json!({ "ara_connections": [{ "observation_type": "environment_summary", "resolution_level": 2 }] }), "INVALID_ARA_CONNECTION"),
        (json!({ "ara_connections": [{ "observation_type": "pattern_compare", "resolution_level": 3 }] }), "INVALID_ARA_CONNECTION"),
        (json!({ "ara_connections": [{ "observation_type": "weather" }] }), "INVALID_ARA_CONNECTION"),
        (json!({ "tool_name": "reach me at bob@example.com" }), "PII_DETECTED"),
        (json!({ "tool_description": "support line +1 555 123 4567" }), "PII_DETECTED"),
        (json!({ "tool_name": " " }), "INVALID_INPUT"),
        (json!({ "price_dac": 0 }), "INVALID_INPUT"),
        (json!({ "price_dac": -5 }), "INVALID_INPUT"),
        (json!({ "price_dac": "ten" }), "INVALID_INPUT"),
        (json!({ "layer": "layer3" }), "INVALID_INPUT"),
        (json!({ "layer": 2 }), "INVALID_INPUT"),
    ];
    for (change, code) in refusals {
        let mut body = tool_body("x", 1.0, "layer1");
        for (key, value) in change.as_object().unwrap() {
            if value.is_null() {
                body.as_object_mut().unwrap().remove(key);
            } else {
                body[key] = value.clone();
            }
        }
        t.post("/v1/tsl/tool/register", Some(&seller.token), &body).await.assert_error(400, code);
    }
    // A refusal quotes the value it names once, as sent.
    let mut layered = tool_body("x", 1.0, "layer1");
    layered["layer"] = json!("layer3");
    let message = t.post("/v1/tsl/tool/register", Some(&seller.token), &layered).await.json["message"].as_str().unwrap().to_string();
    assert!(message.ends_with("got \"layer3\"") && !message.contains("\\\""), "{message}");
    let mut twice = tool_body("x", 1.0, "layer1");
    twice["ara_connections"] =
        json!([{ "observation_type": "agent_profile" }, { "observation_type": "agent_profile", "resolution_level": 1 }]);
    t.post("/v1/tsl/tool/register", Some(&seller.token), &twice).await.assert_error(400, "INVALID_ARA_CONNECTION");
    let mut nul = tool_body("x", 1.0, "layer1");
    nul["tool_name"] = json!("ee\u{0}mix");
    t.post("/v1/tsl/tool/register", Some(&seller.token), &nul).await.assert_error(400, "INVALID_VALUE");
    nul["tool_name"] = json!("ee\u{7}mix");
    t.post("/v1/tsl/tool/register", Some(&seller.token), &nul).await.assert_error(400, "INVALID_INPUT");
    t.post("/v1/tsl/tool/register", None, &tool_body("x", 1.0, "layer1")).await.assert_error(401, "UNAUTHORIZED");

    // Public list: newest first, filters, paging.
    let list = t.get("/v1/tsl/tools", None).await;
    assert_eq!(list.status.as_u16(), 200, "{}", list.text);
    let ids: Vec<&str> = list.json["tools"].as_array().unwrap().iter().map(|t| t["tool_id"].as_str().unwrap()).collect();
    assert_eq!(ids, [second.as_str(), first.as_str()]);
    assert_eq!(list.json["total"], 2);
    let layer2 = t.get("/v1/tsl/tools?layer=layer2", None).await;
    assert_eq!(layer2.json["tools"].as_array().unwrap().len(), 1);
    assert_eq!(layer2.json["tools"][0]["price_dac"], json!(2.5));
    let paged = t.get("/v1/tsl/tools?limit=1&page=2", None).await;
    assert_eq!(paged.json["tools"][0]["tool_id"], first.as_str());
    t.get("/v1/tsl/tools?limit=0", None).await.assert_error(400, "INVALID_VALUE");
    let large = t.get("/v1/tsl/tools?limit=1000", None).await;
    assert_eq!(
        (large.status.as_u16(), large.json["limit"].clone(), large.json["page"].clone()),
        (200, json!(100), json!(1)),
        "{}",
        large.text
    );
    t.get("/v1/tsl/tools?status=sold", None).await.assert_error(400, "INVALID_ENUM");
    let detail = t.get(&format!("/v1/tsl/tool/{first}"), None).await;
    assert_eq!(detail.json["tool_name"], "ee-mix");
    t.get(&format!("/v1/tsl/tool/{}", uuid::Uuid::new_v4()), None).await.assert_error(404, "TOOL_NOT_FOUND");
    t.get("/v1/tsl/tool/not-a-uuid", None).await.assert_error(400, "INVALID_UUID");
    // The JS SDK's example sends tool_layer, which the interface does not define: left out, named.
    let mut sdk = tool_body("from-the-sdk", 1.0, "layer1");
    sdk["tool_layer"] = json!("layer1");
    let sdk_seller = t.register().await;
    let registered = t.post("/v1/tsl/tool/register", Some(&sdk_seller.token), &sdk).await;
    assert_eq!((registered.status.as_u16(), registered.json["layer"].clone()), (201, json!("layer1")), "{}", registered.text);
    assert_eq!(registered.headers["anchor-ignored-fields"], "tool_layer");

    // One agent sells at most 100 active tools; a retired one frees its place.
    for i in 2..100 {
        register_tool(&t, &seller, &format!("tool {i}"), 1.0, "layer1").await;
    }
    t.post("/v1/tsl/tool/register", Some(&seller.token), &tool_body("one more", 1.0, "layer1"))
        .await
        .assert_error(409, "TOOL_LIMIT_REACHED");
    let retire = t.post(&format!("/v1/tsl/tool/{first}/transfer-declaration"), Some(&seller.token), &json!({ "action": "retire" })).await;
    assert_eq!(retire.status.as_u16(), 201, "{}", retire.text);
    t.clock.advance(Duration::days(7));
    anchor_app::tsl::execute_due_transfers(&t.state.app).await.unwrap();
    register_tool(&t, &seller, "one more", 1.0, "layer1").await;
}

async fn a_purchase_is_paid_over_x402_and_its_price_shared_in_earned_dac(backend: Backend) {
    let t = TestServer::start(backend).await;
    let mut seller = t.register().await;
    let author = t.register().await;
    let buyer = t.register().await;
    let component = register_tool(&t, &author, "component", 5.0, "layer1").await;
    let tool = register_tool(&t, &seller, "ee-mix", 100.0, "layer1").await;
    let dep = t.post(&format!("/v1/tsl/tool/{tool}/dependency"), Some(&seller.token), &json!({ "depends_on_tool_id": component })).await;
    assert_eq!(dep.status.as_u16(), 201, "{}", dep.text);
    let share = json!({ "tool_id": tool, "component_tool_id": component, "beneficiary_agent_id": author.id, "share_rate": 0.2 });
    let shared = t.post("/v1/tsl/revenue-share", Some(&seller.token), &share).await;
    assert_eq!(shared.status.as_u16(), 201, "{}", shared.text);
    assert_eq!(shared.json["share_rate"], json!(0.2));
    // The seller's owner takes a human share of one tenth.
    let owner = t.owner("owner@example.org").await;
    t.link(&owner, &mut seller).await;
    let human = t.as_owner(&owner, "POST", "/dap/tsl/human-share", Some(&json!({ "tool_id": tool, "human_share_rate": 0.1 }))).await;
    assert_eq!(human.status.as_u16(), 201, "{}", human.text);
    assert_eq!(human.json["in_force"], true);

    // The buyer still has its Trial: a purchase is never paid from it. 100 DAC + the 10 DAC fee.
    let request_id = uuid::Uuid::new_v4().to_string();
    let body = json!({ "tool_id": tool, "request_id": request_id });
    let bought = buy(&t, &buyer, "/v1/tsl/purchase", &body, "110000").await;
    assert_eq!(bought.status.as_u16(), 201, "{}", bought.text);
    assert!(bought.headers.get("payment-response").is_some(), "settled before the answer");
    assert_eq!(bought.json["status"], "completed");
    assert_eq!((bought.json["price_dac"].clone(), bought.json["service_fee_dac"].clone()), (json!(100), json!(10)));
    assert_eq!(bought.json["seller_agent_id"], seller.id.as_str());
    let trial = t.get("/v1/trial/status", Some(&buyer.token)).await;
    assert_eq!(trial.json["trial_dac_remaining"], json!(500), "{}", trial.text);

    // 20 to the component's author, 10 accrued to the owner, 70 to the seller, as Earned DAC.
    assert_eq!(earned(&t, &author).await, json!(20));
    assert_eq!(earned(&t, &seller).await, json!(70));
    assert_eq!(earned(&t, &buyer).await, json!(0));
    let shares = t.as_owner(&owner, "GET", "/dap/tsl/human-shares", None).await;
    assert_eq!(shares.json["accrued_total_dac"], json!(10), "{}", shares.text);
    assert_eq!(shares.json["human_shares"][0]["sales"], 1);
    // The owner's export holds the agreement too, as the list shows it.
    let export = t.as_owner(&owner, "GET", "/dap/account/export", None).await;
    assert_eq!(export.json["human_shares"], shares.json["human_shares"], "{}", export.text);
    let csv = t.as_owner(&owner, "GET", "/dap/account/export?format=csv", None).await;
    for row in [format!("human_share,1.tool_id,{tool}\n"), "human_share,1.in_force,true\n".into(), "human_share,1.sales,1\n".into()] {
        assert!(csv.text.contains(&row), "{row}: {}", csv.text);
    }
    let ledger = t.get("/v1/earned-dac/ledger", Some(&seller.token)).await;
    assert_eq!(ledger.json["entries"][0]["type"], "credit");
    assert_eq!(ledger.json["entries"][0]["reference"]["kind"], "tsl_purchase");
    assert_eq!(ledger.json["entries"][0]["reference"]["id"], bought.json["purchase_id"]);
    // The parts add up to the price, in the database too.
    let purchase_sql = t.uuid_sql(bought.json["purchase_id"].as_str().unwrap());
    assert_eq!(
        t.scalar(&format!("select cast(sum(amount_milli) as bigint) from tsl_distribution where purchase_id = {purchase_sql}")).await,
        100_000
    );
    let sales = t.get("/v1/tsl/purchases?role=seller", Some(&seller.token)).await;
    assert_eq!(sales.json["total"], 1, "{}", sales.text);
    let kinds: Vec<(&str, Value)> = sales.json["purchases"][0]["shares"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["kind"].as_str().unwrap(), s["amount_dac"].clone()))
        .collect();
    assert_eq!(kinds, [("revenue_share", json!(20)), ("human_share", json!(10)), ("seller", json!(70))]);
    let bought_list = t.get("/v1/tsl/purchases?role=buyer", Some(&buyer.token)).await;
    assert_eq!(bought_list.json["purchases"][0]["role"], "buyer");
    assert_eq!(bought_list.json["purchases"][0]["shares"], json!([]), "a buyer does not see how the price was shared");
    let revenue = t.get("/v1/tsl/revenue", Some(&seller.token)).await;
    assert_eq!(
        (revenue.json["sales_count"].clone(), revenue.json["gross_sales_dac"].clone(), revenue.json["earned_as_seller_dac"].clone()),
        (json!(1), json!(100), json!(70))
    );
    assert_eq!(revenue.json["shared_with_components_dac"], json!(20));
    assert_eq!(revenue.json["human_share_accrued_dac"], json!(10));
    let author_revenue = t.get("/v1/tsl/revenue", Some(&author.token)).await;
    assert_eq!(author_revenue.json["earned_from_revenue_shares_dac"], json!(20));
    // DUR shows the money both ways: what the buyer paid, what the sale credited.
    let paid = t.get("/v1/dur/tsl?role=buyer", Some(&buyer.token)).await;
    assert_eq!((paid.json["total"].clone(), paid.json["transactions"][0]["direction"].clone()), (json!(1), json!("paid")), "{}", paid.text);
    assert_eq!(paid.json["transactions"][0]["amount_dac"], json!(110));
    let received = t.get("/v1/dur/tsl?role=seller", Some(&author.token)).await;
    assert_eq!(received.json["transactions"][0]["amount_dac"], json!(20), "{}", received.text);
    assert_eq!(received.json["transactions"][0]["purchase_id"], bought.json["purchase_id"]);
    assert_eq!(t.get("/v1/dur/tsl", Some(&seller.token)).await.json["total"], 1);
    // The usage record counts it under tsl, paid externally.
    assert_eq!(t.scalar("select count(*) from usage_entry where subject_domain = 'tsl_purchase' and payment_source = 'external'").await, 1);

    // The same request_id answers the same purchase, without a charge.
    let payments = t.scalar("select count(*) from x402_payment").await;
    let again = send(&t, &buyer, "/v1/tsl/purchase", &body, None).await;
    assert_eq!(again.status.as_u16(), 201, "{}", again.text);
    assert_eq!((again.json["purchase_id"].clone(), again.json["replayed"].clone()), (bought.json["purchase_id"].clone(), json!(true)));
    assert_eq!(t.scalar("select count(*) from x402_payment").await, payments);
    // A second purchase of the same tool, a tool of one's own, the wrong layer: refused before any charge.
    send(&t, &buyer, "/v1/tsl/purchase", &json!({ "tool_id": tool }), None).await.assert_error(409, "ALREADY_PURCHASED");
    send(&t, &seller, "/v1/tsl/purchase", &json!({ "tool_id": tool }), None).await.assert_error(400, "SELF_PURCHASE");
    send(&t, &author, "/v1/tsl/purchase/layer2", &json!({ "tool_id": tool }), None).await.assert_error(400, "LAYER_MISMATCH");
    send(&t, &author, "/v1/tsl/purchase/layer2", &json!({ "tool_id": tool, "request_id": request_id }), None)
        .await
        .assert_error(400, "UNKNOWN_FIELD");
    send(&t, &author, "/v1/tsl/purchase", &json!({ "tool_id": uuid::Uuid::new_v4() }), None).await.assert_error(404, "TOOL_NOT_FOUND");
    // A request_id answers only the purchase it was made for.
    send(&t, &buyer, "/v1/tsl/purchase", &json!({ "tool_id": component, "request_id": request_id }), None)
        .await
        .assert_error(400, "REQUEST_ID_USED");
    assert_eq!(t.scalar("select count(*) from x402_payment").await, payments);

    // A layer 2 tool sells at its own route; with no shares, the seller gets the whole price.
    let layer2 = register_tool(&t, &author, "composite", 7.5, "layer2").await;
    let bought2 = buy(&t, &buyer, "/v1/tsl/purchase/layer2", &json!({ "tool_id": layer2 }), "17500").await;
    assert_eq!(bought2.status.as_u16(), 201, "{}", bought2.text);
    assert_eq!(earned(&t, &author).await, json!(27.5));

    // Ten parallel purchases of one tool by one buyer: one is charged, the rest refused.
    let third = register_tool(&t, &author, "third", 1.0, "layer1").await;
    let other_buyer = t.register().await;
    let challenge = challenge_of(&send(&t, &other_buyer, "/v1/tsl/purchase", &json!({ "tool_id": third }), None).await);
    let attempts = (0..10).map(|_| {
        let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
        let body = json!({ "tool_id": third, "request_id": uuid::Uuid::new_v4() });
        let (t, buyer) = (&t, &other_buyer);
        async move { send(t, buyer, "/v1/tsl/purchase", &body, Some(&payment)).await }
    });
    let replies = futures_util::future::join_all(attempts).await;
    let created = replies.iter().filter(|r| r.status.as_u16() == 201).count();
    assert_eq!(created, 1, "{:?}", replies.iter().map(|r| r.text.clone()).collect::<Vec<_>>());
    for reply in replies.iter().filter(|r| r.status.as_u16() != 201) {
        reply.assert_error(409, "ALREADY_PURCHASED");
    }
    let settled = t
        .scalar(&format!("select count(*) from x402_payment where agent_id = {} and status = 'settled'", t.uuid_sql(&other_buyer.id)))
        .await;
    assert_eq!(settled, 1);
    assert_eq!(earned(&t, &author).await, json!(28.5));
}

async fn shares_never_take_more_than_the_price(backend: Backend) {
    let t = TestServer::start(backend).await;
    let mut seller = t.register().await;
    let stranger = t.register().await;
    let component = register_tool(&t, &stranger, "component", 1.0, "layer1").await;
    let unrelated = register_tool(&t, &stranger, "unrelated", 1.0, "layer1").await;
    let tool = register_tool(&t, &seller, "ee-mix", 10.0, "layer1").await;
    t.post(&format!("/v1/tsl/tool/{tool}/dependency"), Some(&seller.token), &json!({ "depends_on_tool_id": component })).await;
    let share = |beneficiary: &str, rate: f64| json!({ "tool_id": tool, "component_tool_id": component, "beneficiary_agent_id": beneficiary, "share_rate": rate });
    let mut body = share(&stranger.id, 0.2);
    body["component_tool_id"] = json!(unrelated);
    t.post("/v1/tsl/revenue-share", Some(&seller.token), &body).await.assert_error(400, "NOT_A_DEPENDENCY");
    t.post("/v1/tsl/revenue-share", Some(&stranger.token), &share(&stranger.id, 0.2)).await.assert_error(403, "NOT_TOOL_OWNER");
    t.post("/v1/tsl/revenue-share", Some(&seller.token), &share(&stranger.id, 1.5)).await.assert_error(400, "INVALID_VALUE");
    t.post("/v1/tsl/revenue-share", Some(&seller.token), &share(&seller.id, 0.1)).await.assert_error(400, "INVALID_INPUT");
    t.post("/v1/tsl/revenue-share", Some(&seller.token), &share(&stranger.id, 0.1234567)).await.assert_error(400, "INVALID_VALUE");
    t.post("/v1/tsl/revenue-share", Some(&seller.token), &share(&uuid::Uuid::new_v4().to_string(), 0.1))
        .await
        .assert_error(404, "AGENT_NOT_FOUND");
    let first = t.post("/v1/tsl/revenue-share", Some(&seller.token), &share(&stranger.id, 0.3)).await;
    assert_eq!(first.status.as_u16(), 201, "{}", first.text);
    t.post("/v1/tsl/revenue-share", Some(&seller.token), &share(&stranger.id, 0.1)).await.assert_error(409, "REVENUE_SHARE_EXISTS");

    // Twenty parallel shares of 0.1 on top of 0.3: exactly seven fit.
    let mut beneficiaries = Vec::new();
    for _ in 0..20 {
        beneficiaries.push(t.register().await);
    }
    let adds = beneficiaries.iter().map(|b| {
        let body = share(&b.id, 0.1);
        let (t, seller) = (&t, &seller);
        async move { t.post("/v1/tsl/revenue-share", Some(&seller.token), &body).await }
    });
    let replies = futures_util::future::join_all(adds).await;
    assert_eq!(replies.iter().filter(|r| r.status.as_u16() == 201).count(), 7);
    for reply in replies.iter().filter(|r| r.status.as_u16() != 201) {
        reply.assert_error(400, "SHARE_RATE_EXCEEDED");
    }
    let listed = t.get(&format!("/v1/tsl/tool/{tool}/revenue-shares"), Some(&seller.token)).await;
    assert_eq!((listed.json["count"].clone(), listed.json["total_share_rate"].clone()), (json!(8), json!(1)), "{}", listed.text);
    // A beneficiary may list them; an outsider may not.
    assert_eq!(t.get(&format!("/v1/tsl/tool/{tool}/revenue-shares"), Some(&stranger.token)).await.status.as_u16(), 200);
    let outsider = t.register().await;
    t.get(&format!("/v1/tsl/tool/{tool}/revenue-shares"), Some(&outsider.token)).await.assert_error(403, "NOT_TOOL_OWNER");

    // Nothing is left for a human share; a second tool takes one up to 0.5.
    let owner = t.owner("owner@example.org").await;
    t.link(&owner, &mut seller).await;
    let human = |tool: &str, rate: f64| json!({ "tool_id": tool, "human_share_rate": rate });
    t.as_owner(&owner, "POST", "/dap/tsl/human-share", Some(&human(&tool, 0.01))).await.assert_error(400, "SHARE_RATE_EXCEEDED");
    let other = register_tool(&t, &seller, "other", 10.0, "layer1").await;
    t.as_owner(&owner, "POST", "/dap/tsl/human-share", Some(&human(&other, 0.6))).await.assert_error(400, "INVALID_VALUE");
    let set = t.as_owner(&owner, "POST", "/dap/tsl/human-share", Some(&human(&other, 0.5))).await;
    assert_eq!(set.status.as_u16(), 201, "{}", set.text);
    // A new agreement replaces the earlier one.
    let replaced = t.as_owner(&owner, "POST", "/dap/tsl/human-share", Some(&human(&other, 0.25))).await;
    assert_eq!(replaced.json["human_share_rate"], json!(0.25));
    let list = t.as_owner(&owner, "GET", "/dap/tsl/human-shares", None).await;
    let states: Vec<(Value, Value)> =
        list.json["human_shares"].as_array().unwrap().iter().map(|h| (h["in_force"].clone(), h["end_reason"].clone())).collect();
    assert_eq!(states, [(json!(true), Value::Null), (json!(false), json!("superseded"))]);
    // Someone else's tool, or an owner that does not manage the seller: 403 NOT_LINKED.
    t.as_owner(&owner, "POST", "/dap/tsl/human-share", Some(&human(&component, 0.1))).await.assert_error(403, "NOT_LINKED");
    t.as_owner(&owner, "POST", "/dap/tsl/human-share", Some(&human(&uuid::Uuid::new_v4().to_string(), 0.1)))
        .await
        .assert_error(404, "TOOL_NOT_FOUND");
    // Unlinked, the agreement is no longer in force.
    let unlink =
        t.as_owner(&owner, "DELETE", "/dap/agent/unlink", Some(&json!({ "agent_id": seller.id, "password": OWNER_PASSWORD }))).await;
    assert_eq!(unlink.status.as_u16(), 200, "{}", unlink.text);
    // The agreement of 0.25 (the other was superseded at the same instant).
    let quarter = |list: &Value| {
        let share = list["human_shares"].as_array().unwrap().iter().find(|h| h["human_share_rate"] == json!(0.25)).cloned().unwrap();
        (share["in_force"].clone(), share["end_reason"].clone())
    };
    let list = t.as_owner(&owner, "GET", "/dap/tsl/human-shares", None).await;
    assert_eq!(quarter(&list.json), (json!(false), json!("unlinked")), "{}", list.text);
    // Linked again, it stays ended (revenue shares set while it did not
    // count could otherwise take the rates past the whole price).
    t.link(&owner, &mut seller).await;
    let list = t.as_owner(&owner, "GET", "/dap/tsl/human-shares", None).await;
    assert_eq!(quarter(&list.json), (json!(false), json!("unlinked")), "{}", list.text);
    assert_eq!(t.scalar("select count(*) from tsl_human_share where ended_at is null").await, 0);

    // Each setting is kept: a tool's human share is set at most ten times a UTC day.
    let daily = register_tool(&t, &seller, "daily", 10.0, "layer1").await;
    for n in 0..10 {
        let set = t.as_owner(&owner, "POST", "/dap/tsl/human-share", Some(&human(&daily, 0.01 * f64::from(n + 1)))).await;
        assert_eq!(set.status.as_u16(), 201, "{n}: {}", set.text);
    }
    let eleventh = t.as_owner(&owner, "POST", "/dap/tsl/human-share", Some(&human(&daily, 0.2))).await;
    eleventh.assert_error(429, "RATE_LIMITED");
    assert!(eleventh.headers.get("retry-after").is_some(), "{}", eleventh.text);
    t.clock.advance(Duration::days(1));
    let owner = t.login(&owner.email, OWNER_PASSWORD).await;
    let next_day = t.as_owner(&owner, "POST", "/dap/tsl/human-share", Some(&human(&daily, 0.2))).await;
    assert_eq!(next_day.status.as_u16(), 201, "{}", next_day.text);
}

async fn dependencies_never_form_a_cycle(backend: Backend) {
    let t = TestServer::start(backend).await;
    let seller = t.register().await;
    let [a, b, c] = [
        register_tool(&t, &seller, "a", 1.0, "layer2").await,
        register_tool(&t, &seller, "b", 1.0, "layer2").await,
        register_tool(&t, &seller, "c", 1.0, "layer1").await,
    ];
    let depend = |from: &str, to: &str| (format!("/v1/tsl/tool/{from}/dependency"), json!({ "depends_on_tool_id": to }));
    for (from, to) in [(&a, &b), (&b, &c)] {
        let (path, body) = depend(from, to);
        let reply = t.post(&path, Some(&seller.token), &body).await;
        assert_eq!(reply.status.as_u16(), 201, "{}", reply.text);
    }
    let (path, body) = depend(&c, &a);
    t.post(&path, Some(&seller.token), &body).await.assert_error(400, "DEPENDENCY_CYCLE");
    let (path, body) = depend(&a, &a);
    t.post(&path, Some(&seller.token), &body).await.assert_error(400, "INVALID_DEPENDENCY");
    let (path, body) = depend(&a, &b);
    t.post(&path, Some(&seller.token), &body).await.assert_error(409, "DEPENDENCY_EXISTS");
    let other = t.register().await;
    let (path, body) = depend(&a, &c);
    t.post(&path, Some(&other.token), &body).await.assert_error(403, "NOT_TOOL_OWNER");
    let mut with_purchase = body.clone();
    with_purchase["purchase_id"] = json!(uuid::Uuid::new_v4());
    t.post(&path, Some(&seller.token), &with_purchase).await.assert_error(400, "INVALID_PURCHASE");
    let listed = t.get(&format!("/v1/tsl/tool/{a}/dependencies"), None).await;
    assert_eq!(listed.json["count"], 1);
    assert_eq!(listed.json["dependencies"][0]["depends_on_tool_id"], b.as_str());

    // Two new tools joined both ways at once: one edge wins, never both.
    let x = register_tool(&t, &seller, "x", 1.0, "layer1").await;
    let y = register_tool(&t, &seller, "y", 1.0, "layer1").await;
    for _ in 0..3 {
        let ((p1, b1), (p2, b2)) = (depend(&x, &y), depend(&y, &x));
        let (r1, r2) = tokio::join!(t.post(&p1, Some(&seller.token), &b1), t.post(&p2, Some(&seller.token), &b2));
        let created = [&r1, &r2].iter().filter(|r| r.status.as_u16() == 201).count();
        assert!(created <= 1, "{} / {}", r1.text, r2.text);
    }
    let edges = t.scalar(&format!("select count(*) from tsl_dependency where tool_id in ({}, {})", t.uuid_sql(&x), t.uuid_sql(&y))).await;
    assert_eq!(edges, 1);
}

async fn transfers_and_retirements_take_effect_after_seven_days(backend: Backend) {
    let t = TestServer::start(backend).await;
    let mut seller = t.register().await;
    let target = t.register().await;
    let buyer = t.register().await;
    let tool = register_tool(&t, &seller, "ee-mix", 10.0, "layer1").await;
    let owner = t.owner("owner@example.org").await;
    t.link(&owner, &mut seller).await;
    let human = t.as_owner(&owner, "POST", "/dap/tsl/human-share", Some(&json!({ "tool_id": tool, "human_share_rate": 0.1 }))).await;
    assert_eq!(human.status.as_u16(), 201, "{}", human.text);
    let path = format!("/v1/tsl/tool/{tool}/transfer-declaration");

    t.get(&path, Some(&seller.token)).await.assert_error(404, "NO_TRANSFER_DECLARATION");
    t.post(&path, Some(&seller.token), &json!({ "action": "transfer" })).await.assert_error(400, "MISSING_FIELD");
    t.post(&path, Some(&seller.token), &json!({ "action": "transfer", "target_agent_id": seller.id }))
        .await
        .assert_error(400, "INVALID_INPUT");
    t.post(&path, Some(&seller.token), &json!({ "action": "sell" })).await.assert_error(400, "INVALID_ENUM");
    t.post(&path, Some(&seller.token), &json!({ "action": "retire", "target_agent_id": target.id }))
        .await
        .assert_error(400, "INVALID_INPUT");
    t.post(&path, Some(&target.token), &json!({ "action": "retire" })).await.assert_error(403, "NOT_TOOL_OWNER");
    let declared = t.post(&path, Some(&seller.token), &json!({ "action": "transfer", "target_agent_id": target.id })).await;
    assert_eq!(declared.status.as_u16(), 201, "{}", declared.text);
    assert_eq!(declared.json["status"], "pending");
    t.post(&path, Some(&seller.token), &json!({ "action": "retire" })).await.assert_error(409, "TRANSFER_PENDING");
    let cancelled = t.call("DELETE", &path, Some(&seller.token), None).await;
    assert_eq!(cancelled.json["status"], "cancelled", "{}", cancelled.text);
    t.call("DELETE", &path, Some(&seller.token), None).await.assert_error(404, "NO_TRANSFER_DECLARATION");
    let declared = t.post(&path, Some(&seller.token), &json!({ "action": "transfer", "target_agent_id": target.id })).await;
    assert_eq!(declared.status.as_u16(), 201, "{}", declared.text);

    // Six days on, nothing has moved; seven, and the job moves the seller role.
    t.clock.advance(Duration::days(6));
    anchor_app::tsl::execute_due_transfers(&t.state.app).await.unwrap();
    assert_eq!(t.get(&format!("/v1/tsl/tool/{tool}"), None).await.json["seller_agent_id"], seller.id.as_str());
    t.clock.advance(Duration::days(1));
    assert_eq!(anchor_app::tsl::execute_due_transfers(&t.state.app).await.unwrap(), 1);
    assert_eq!(anchor_app::tsl::execute_due_transfers(&t.state.app).await.unwrap(), 0, "carried out once");
    assert_eq!(t.get(&format!("/v1/tsl/tool/{tool}"), None).await.json["seller_agent_id"], target.id.as_str());
    let seen = t.get(&path, Some(&target.token)).await;
    assert_eq!(seen.json["status"], "executed", "{}", seen.text);
    // The old owner's human share ended with the move; later sales are the new seller's.
    let owner = t.login(&owner.email, OWNER_PASSWORD).await;
    let shares = t.as_owner(&owner, "GET", "/dap/tsl/human-shares", None).await;
    assert_eq!(shares.json["human_shares"][0]["end_reason"], "transferred");
    let bought = buy(&t, &buyer, "/v1/tsl/purchase", &json!({ "tool_id": tool }), "20000").await;
    assert_eq!(bought.status.as_u16(), 201, "{}", bought.text);
    assert_eq!(earned(&t, &target).await, json!(10));
    assert_eq!(earned(&t, &seller).await, json!(0));

    // Retired, it no longer sells.
    let retire = t.post(&path, Some(&target.token), &json!({ "action": "retire" })).await;
    assert_eq!(retire.status.as_u16(), 201, "{}", retire.text);
    t.clock.advance(Duration::days(7));
    anchor_app::tsl::execute_due_transfers(&t.state.app).await.unwrap();
    assert_eq!(t.get(&format!("/v1/tsl/tool/{tool}"), None).await.json["status"], "defunct");
    let late = t.register().await;
    send(&t, &late, "/v1/tsl/purchase", &json!({ "tool_id": tool }), None).await.assert_error(409, "TOOL_NOT_AVAILABLE");
    t.post(&path, Some(&target.token), &json!({ "action": "retire" })).await.assert_error(409, "TOOL_NOT_AVAILABLE");
}

/// An agent sells at most 100 active tools, transfers included: a transfer
/// to one that sells 100 is refused, and one declared before it reached 100
/// is cancelled when it falls due, the tool staying with its seller.
async fn a_transfer_never_gives_an_agent_more_than_its_most_tools(backend: Backend) {
    let t = TestServer::start(backend).await;
    let seller = t.register().await;
    let target = t.register().await;
    let first = register_tool(&t, &seller, "first", 1.0, "layer1").await;
    let second = register_tool(&t, &seller, "second", 1.0, "layer1").await;
    for i in 0..99 {
        register_tool(&t, &target, &format!("target's {i}"), 1.0, "layer1").await;
    }
    let (t, seller) = (&t, &seller);
    let body = json!({ "action": "transfer", "target_agent_id": target.id });
    let declare = |tool: &str| {
        let (path, body) = (format!("/v1/tsl/tool/{tool}/transfer-declaration"), body.clone());
        async move { t.post(&path, Some(&seller.token), &body).await }
    };
    let declared = declare(&first).await;
    assert_eq!(declared.status.as_u16(), 201, "{}", declared.text);
    // The target reaches 100 meanwhile: a transfer to it is refused now...
    register_tool(t, &target, "target's 100th", 1.0, "layer1").await;
    declare(&second).await.assert_error(409, "TOOL_LIMIT_REACHED");
    // ...and the one declared before is cancelled when it falls due.
    t.clock.advance(Duration::days(7));
    assert_eq!(anchor_app::tsl::execute_due_transfers(&t.state.app).await.unwrap(), 0);
    let seen = t.get(&format!("/v1/tsl/tool/{first}/transfer-declaration"), Some(&seller.token)).await;
    assert_eq!(seen.json["status"], "cancelled", "{}", seen.text);
    assert!(seen.json["ended_at"].is_string(), "{}", seen.text);
    assert_eq!(t.get(&format!("/v1/tsl/tool/{first}"), None).await.json["seller_agent_id"], seller.id.as_str());
    // Nothing is left pending: the seller may declare again (a retirement here).
    let path = format!("/v1/tsl/tool/{first}/transfer-declaration");
    let again = t.post(&path, Some(&seller.token), &json!({ "action": "retire" })).await;
    assert_eq!(again.status.as_u16(), 201, "{}", again.text);
    assert_eq!(t.scalar("select count(*) from tsl_tool where status = 'active'").await, 102, "the target's 100 and the seller's two");
}

/// Each sale writes a distribution per revenue share, and every share names
/// a dependency: a tool holds at most 20 shares (rates of zero included)
/// and 50 dependencies, whoever the beneficiaries are.
async fn a_tool_has_at_most_fifty_dependencies_and_twenty_shares(backend: Backend) {
    let t = TestServer::start(backend).await;
    let seller = t.register().await;
    let author = t.register().await;
    let tool = register_tool(&t, &seller, "many", 1.0, "layer1").await;
    let dependency = |component: String| {
        let (t, seller, tool) = (&t, &seller, tool.clone());
        async move { t.post(&format!("/v1/tsl/tool/{tool}/dependency"), Some(&seller.token), &json!({ "depends_on_tool_id": component })).await }
    };
    let mut components = Vec::new();
    for i in 0..50 {
        let component = register_tool(&t, &author, &format!("part {i}"), 1.0, "layer1").await;
        let added = dependency(component.clone()).await;
        assert_eq!(added.status.as_u16(), 201, "{}", added.text);
        components.push(component);
    }
    let one_more = register_tool(&t, &author, "part 50", 1.0, "layer1").await;
    dependency(one_more).await.assert_error(409, "DEPENDENCY_LIMIT_REACHED");

    let share = |beneficiary: &str, component: &str| json!({ "tool_id": tool, "component_tool_id": component, "beneficiary_agent_id": beneficiary, "share_rate": 0 });
    for n in 0..20 {
        let beneficiary = t.register().await;
        let shared = t.post("/v1/tsl/revenue-share", Some(&seller.token), &share(&beneficiary.id, &components[n % 3])).await;
        assert_eq!(shared.status.as_u16(), 201, "{}", shared.text);
    }
    let beneficiary = t.register().await;
    t.post("/v1/tsl/revenue-share", Some(&seller.token), &share(&beneficiary.id, &components[0]))
        .await
        .assert_error(409, "REVENUE_SHARE_LIMIT_REACHED");
    assert_eq!(t.scalar("select count(*) from tsl_revenue_share").await, 20);
    assert_eq!(t.scalar("select count(*) from tsl_dependency").await, 50);
}

async fn a_purchase_settles_once_or_not_at_all(backend: Backend) {
    let script = Scripted::new(vec![
        Settled::Unknown { detail: "facilitator timed out".into() },
        Settled::No { reason: "insufficient_funds".into() },
    ]);
    // Reconciliation is driven by the test alone (a background round that ran
    // after the unknown outcome would settle it before the test looks).
    let t = TestServer::with(backend, Options { settler: Some(script.clone()), jobs: false, ..Default::default() }).await;
    let seller = t.register().await;
    let buyer = t.register().await;
    let tool = register_tool(&t, &seller, "ee-mix", 10.0, "layer1").await;
    let body = json!({ "tool_id": tool, "request_id": uuid::Uuid::new_v4() });

    // Refused at settlement: 402, the purchase failed, nobody earned anything.
    let refused = buy(&t, &buyer, "/v1/tsl/purchase", &body, "20000").await;
    assert_eq!(refused.status.as_u16(), 402, "{}", refused.text);
    assert_eq!(t.strings("select status from tsl_purchase").await, ["failed"]);
    assert_eq!(earned(&t, &seller).await, json!(0));
    // Its request_id is spent; a new one may try again. Unknown outcome: 503, pending.
    send(&t, &buyer, "/v1/tsl/purchase", &body, None).await.assert_error(400, "REQUEST_ID_USED");
    let body = json!({ "tool_id": tool, "request_id": uuid::Uuid::new_v4() });
    let unknown = buy(&t, &buyer, "/v1/tsl/purchase", &body, "20000").await;
    unknown.assert_error(503, "SETTLEMENT_PENDING");
    send(&t, &buyer, "/v1/tsl/purchase", &body, None).await.assert_error(409, "PURCHASE_PENDING");
    assert_eq!(earned(&t, &seller).await, json!(0));
    // Reconciliation settles it once; the seller earns then, and the request_id answers it.
    assert_eq!(anchor_app::jobs::reconcile_unknown_settlements(&t.state.app).await.unwrap(), 1);
    assert_eq!(anchor_app::jobs::reconcile_unknown_settlements(&t.state.app).await.unwrap(), 0);
    assert_eq!(earned(&t, &seller).await, json!(10));
    let answered = send(&t, &buyer, "/v1/tsl/purchase", &body, None).await;
    assert_eq!((answered.status.as_u16(), answered.json["status"].clone()), (201, json!("completed")), "{}", answered.text);
    let mut statuses = t.strings("select status from tsl_purchase").await;
    statuses.sort();
    assert_eq!(statuses, ["completed", "failed"]);
    assert_eq!(t.scalar("select count(*) from tsl_distribution").await, 1);
    let _ = MilliDac::ZERO;
}

async fn the_markets_release_counts_tools_and_at_least_ten_buyers(backend: Backend) {
    let t = TestServer::with(backend, Options { privacy: anchor_app::ara::privacy::Privacy::Exact, ..Default::default() }).await;
    let observer = t.register().await;
    // Nothing listed: nothing to show, for free.
    t.get("/v1/ara/environment/tsl", Some(&observer.token)).await.assert_error(404, "DATA_UNAVAILABLE");
    let seller = t.register().await;
    let tool = register_tool(&t, &seller, "ee-mix", 1.0, "layer1").await;
    register_tool(&t, &seller, "composite", 1.0, "layer2").await;
    // Nine buyers: the tools show the next day, the buyers do not.
    let mut buyers = Vec::new();
    for _ in 0..10 {
        buyers.push(t.register().await);
    }
    for buyer in &buyers[..9] {
        assert_eq!(buy(&t, buyer, "/v1/tsl/purchase", &json!({ "tool_id": tool }), "11000").await.status.as_u16(), 201);
    }
    t.clock.advance(Duration::days(1));
    let seen = paid_market(&t, &observer).await;
    assert_eq!(seen["distributions"], json!({ "tools_by_layer": { "layer1": 1, "layer2": 1 } }), "{seen}");
    // Ten buyers: the next day's release counts them, each once.
    assert_eq!(buy(&t, &buyers[9], "/v1/tsl/purchase", &json!({ "tool_id": tool }), "11000").await.status.as_u16(), 201);
    t.clock.advance(Duration::days(1));
    let seen = paid_market(&t, &observer).await;
    assert_eq!(seen["distributions"]["buyers_by_layer"], json!({ "layer1": 10 }), "{seen}");
    assert_eq!(seen["distributions"]["tools_by_layer"], json!({ "layer1": 1, "layer2": 1 }), "{seen}");
    // The release is cut once for the day: asking again shows the same.
    assert_eq!(paid_market(&t, &observer).await["distributions"], seen["distributions"]);
}

async fn paid_market(t: &TestServer, agent: &Agent) -> Value {
    let path = "/v1/ara/environment/tsl";
    let bearer = format!("Bearer {}", agent.token);
    let challenge = challenge_of(&t.call_with("GET", path, &[("authorization", &bearer)], None).await);
    assert_eq!(challenge["accepts"][0]["amount"], "1000");
    let payment = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
    let reply = t.call_with("GET", path, &[("authorization", &bearer), ("payment-signature", &payment)], None).await;
    assert_eq!(reply.status.as_u16(), 200, "{}", reply.text);
    reply.json
}

/// PostgreSQL picks one transaction of a deadlock to roll back: when that is
/// a request's, the agent is told 503 STORAGE_UNAVAILABLE with Retry-After
/// (not a 500), nothing of the request is kept, and the same request made
/// again is served. The deadlock is made on purpose: another session holds
/// the tool table and then asks for the seller's row, which the
/// registration locked before it waited for the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlocks_victim_is_told_to_try_again_and_nothing_is_kept() {
    if postgres_or_skip("tsl::a_deadlocks_victim_is_told_to_try_again_and_nothing_is_kept").is_none() {
        return;
    }
    use sqlx::Connection;
    let t = TestServer::start(Backend::Postgres).await;
    let seller = t.register().await;
    let (url, schema) = t.postgres_schema().unwrap();
    let mut other = sqlx::PgConnection::connect(url).await.unwrap();
    // This session waits long before looking for a deadlock: the request's does first, and is the victim.
    let setup = format!("set search_path to \"{schema}\"; set deadlock_timeout = '60s'; begin; lock table tsl_tool in exclusive mode");
    sqlx::raw_sql(sqlx::AssertSqlSafe(setup)).execute(&mut other).await.unwrap();

    let registration = {
        let (base, token) = (t.url("/v1/tsl/tool/register"), seller.token.clone());
        tokio::spawn(async move {
            let reply =
                reqwest::Client::new().post(base).bearer_auth(token).json(&tool_body("deadlocked", 1.0, "layer1")).send().await.unwrap();
            let retry_after = reply.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
            (reply.status().as_u16(), retry_after, reply.json::<Value>().await.unwrap())
        })
    };
    // Once the registration waits for the table, ask for the row it holds.
    let waiting = format!("select count(*) from pg_locks where not granted and relation = '\"{schema}\".tsl_tool'::regclass");
    let mut waited = 0;
    while sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(waiting.clone())).fetch_one(&mut other).await.unwrap() == 0 {
        waited += 1;
        assert!(waited < 200, "the registration never waited for the tool table");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let lock_row = format!("select 1 from agent where agent_id = '{}' for update", seller.id);
    sqlx::raw_sql(sqlx::AssertSqlSafe(lock_row)).execute(&mut other).await.expect("the other session is not the victim");
    let (status, retry_after, body) = registration.await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error_code"], "STORAGE_UNAVAILABLE", "{body}");
    assert!(retry_after.is_some_and(|s| s.parse::<u64>().is_ok_and(|n| n > 0)), "503 says when to try again");
    sqlx::raw_sql("rollback").execute(&mut other).await.unwrap();

    assert_eq!(t.scalar("select count(*) from tsl_tool").await, 0, "the victim's registration kept nothing");
    let tool = register_tool(&t, &seller, "deadlocked", 1.0, "layer1").await;
    assert_eq!(t.get(&format!("/v1/tsl/tool/{tool}"), None).await.json["tool_name"], "deadlocked");
}

/// The nil agent owns every de-identified record (migration 0020) and is
/// nobody: no tool passes to it, no share is paid to it, no agreement is
/// proposed to it and nothing of it is observed; each answers 404
/// AGENT_NOT_FOUND, as for an agent that never was.
async fn the_nil_agent_of_deidentified_records_is_nobody(backend: Backend) {
    let t = TestServer::start(backend).await;
    let seller = t.register().await;
    let author = t.register().await;
    let nil = uuid::Uuid::nil().to_string();
    let component = register_tool(&t, &author, "component", 5.0, "layer1").await;
    let tool = register_tool(&t, &seller, "ee-mix", 100.0, "layer1").await;
    let dep = t.post(&format!("/v1/tsl/tool/{tool}/dependency"), Some(&seller.token), &json!({ "depends_on_tool_id": component })).await;
    assert_eq!(dep.status.as_u16(), 201, "{}", dep.text);
    let share = json!({ "tool_id": tool, "component_tool_id": component, "beneficiary_agent_id": nil, "share_rate": 0.5 });
    t.post("/v1/tsl/revenue-share", Some(&seller.token), &share).await.assert_error(404, "AGENT_NOT_FOUND");
    let transfer = json!({ "action": "transfer", "target_agent_id": nil });
    t.post(&format!("/v1/tsl/tool/{tool}/transfer-declaration"), Some(&seller.token), &transfer).await.assert_error(404, "AGENT_NOT_FOUND");
    let mut bilateral = dd();
    bilateral["dd_declaration_mode"] = json!("bilateral");
    let proposal = json!({ "counterparty_agent_id": nil, "dd": bilateral, "ee": basic_axes() });
    t.post("/v1/dd/bilateral/propose", Some(&seller.token), &proposal).await.assert_error(404, "AGENT_NOT_FOUND");
    t.get(&format!("/v1/ara/agent/{nil}/profile"), Some(&seller.token)).await.assert_error(404, "AGENT_NOT_FOUND");
    assert_eq!(t.scalar("select count(*) from tsl_revenue_share").await + t.scalar("select count(*) from tsl_transfer").await, 0);
}

/// A purchase whose payment settled but whose record was refused for the
/// moment (here a trigger refusing the payment's update with a serialization
/// failure, as PostgreSQL refuses a deadlock's victim): tried again, the
/// record is kept; refused every time, the payment is left to the
/// reconciliation job with its reference instead of staying reserved for
/// ever, and the job completes the purchase once without settling again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_payment_is_recorded_though_its_first_writes_are_refused() {
    if postgres_or_skip("tsl::a_settled_payment_is_recorded_though_its_first_writes_are_refused").is_none() {
        return;
    }
    // Popped from the end: two settlements go through; a third (settling the second again) would be refused.
    let script = Scripted::new(vec![
        Settled::No { reason: "insufficient_funds".into() },
        Settled::Yes { reference: "0xsecond".into() },
        Settled::Yes { reference: "0xfirst".into() },
    ]);
    let t = TestServer::with(Backend::Postgres, Options { settler: Some(script), jobs: false, ..Default::default() }).await;
    let seller = t.register().await;
    let tool = register_tool(&t, &seller, "ee-mix", 10.0, "layer1").await;
    t.tamper(
        "create sequence refusals minvalue -100; \
         create function refuse_some() returns trigger language plpgsql as $$ begin \
           if nextval('refusals') <= 0 then raise exception 'refused for the test' using errcode = '40001'; end if; \
           return new; end $$; \
         create trigger refuse_some before update on x402_payment for each row execute function refuse_some()",
    )
    .await;

    // Two refusals: the third try records it.
    t.tamper("select setval('refusals', -2)").await;
    let first = t.register().await;
    let bought = buy(&t, &first, "/v1/tsl/purchase", &json!({ "tool_id": tool }), "20000").await;
    assert_eq!((bought.status.as_u16(), bought.json["status"].clone()), (201, json!("completed")), "{}", bought.text);
    assert_eq!(earned(&t, &seller).await, json!(10));

    // Refused every try: 503, the payment waits for the job, not reserved.
    t.tamper("select setval('refusals', -3)").await;
    let second = t.register().await;
    let body = json!({ "tool_id": tool, "request_id": uuid::Uuid::new_v4() });
    buy(&t, &second, "/v1/tsl/purchase", &body, "20000").await.assert_error(503, "SETTLEMENT_PENDING");
    assert_eq!(t.strings("select status from x402_payment where status <> 'settled'").await, ["settle_unknown"]);
    assert_eq!(anchor_app::jobs::reconcile_unknown_settlements(&t.state.app).await.unwrap(), 1);
    assert_eq!(anchor_app::jobs::reconcile_unknown_settlements(&t.state.app).await.unwrap(), 0);
    let answered = send(&t, &second, "/v1/tsl/purchase", &body, None).await;
    assert_eq!((answered.status.as_u16(), answered.json["status"].clone()), (201, json!("completed")), "{}", answered.text);
    assert_eq!(earned(&t, &seller).await, json!(20), "the seller earned each sale once");
    assert_eq!(t.scalar("select count(*) from x402_payment where status = 'settled'").await, 2);
    let mut references = t.strings("select settlement_ref from x402_payment").await;
    references.sort();
    assert_eq!(references, ["0xfirst", "0xsecond"], "recorded with the settlements' own references, not settled again");
}
