//! Discovery documents and cross-cutting conventions: health, llms.txt, agent
//! card, x402 discovery, JSON 404/405, guidance on GET, rate limit headers.

use anchor_tests::*;
use serde_json::{Value, json};

#[tokio::test]
async fn health_reports_versions_storage_and_uptime() {
    let t = TestServer::start(Backend::Sqlite).await;
    let health = t.get("/health", None).await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.json["status"], "ok");
    assert_eq!(health.json["version"], "1.3.42");
    assert_eq!(health.json["storage"], "sqlite");
    assert_eq!(health.json["pricing_version"], "v1.3.0");
    assert!(health.json["uptime_seconds"].is_u64());
}

#[tokio::test]
async fn discovery_documents_describe_this_server() {
    let t = TestServer::start(Backend::Sqlite).await;
    let llms = t.get("/llms.txt", None).await;
    assert!(llms.headers["content-type"].to_str().unwrap().starts_with("text/plain"));
    assert!(llms.text.contains(&t.url("/v1/agent/register")), "{}", llms.text);

    let card = t.get("/.well-known/agent-card.json", None).await.json;
    assert_eq!(card["protocolVersion"], "1.0");
    assert_eq!(card["url"], json!(t.base));
    let skills: Vec<&str> = card["skills"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    // The reference card's ids for what this server serves.
    for id in ["decision-declaration", "observation"] {
        assert!(skills.contains(&id), "{skills:?}");
    }
    assert!(llms.text.contains(&t.url("/v1/ara/environment")) && llms.text.contains(&t.url("/v1/dur/summary")), "{}", llms.text);
    assert!(llms.text.contains(&t.url("/v1/earned-dac/balance")), "{}", llms.text);
    assert!(llms.text.contains(&t.url("/v1/tsl/purchase")) && llms.text.contains(&t.url("/v1/tsl/runtime")), "{}", llms.text);

    let x402 = t.get("/.well-known/x402.json", None).await.json;
    assert_eq!(x402["x402_supported"], json!(true));
    assert_eq!(x402["networks"], json!(["eip155:8453"]));
    assert_eq!(x402["payment_address"], "0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
    let create = &x402["paid_endpoints"][0];
    assert_eq!(create["endpoint"], "POST /v1/dd/create");
    assert_eq!(create["price_base"], "$0.01");
    assert_eq!(create["trial_eligible"], json!(true));
    // Earned DAC pays a declaration's premium (premium_payment_source: earned).
    assert_eq!(create["accepts_earned"], json!(true));
    assert_eq!(create["earned_pays"], "the premium only, with premium_payment_source: earned");
    assert_eq!(create["available"], json!(true));
    assert_eq!(x402["trial"]["amount_dac"], json!(500));
    // Every paid route of the interface is listed, priced by the component,
    // and served.
    let endpoints = x402["paid_endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 20);
    let find = |name: &str| endpoints.iter().find(|e| e["endpoint"] == name).unwrap_or_else(|| panic!("{name} missing"));
    let asa = find("POST /v1/asa/subscribe");
    assert_eq!(
        (asa["price_base"].clone(), asa["accepts_earned"].clone(), asa["available"].clone()),
        (json!("$0.10"), json!(true), json!(true))
    );
    assert!(endpoints.iter().all(|e| e["available"] == json!(true) && e.get("note").is_none_or(Value::is_null)), "{endpoints:?}");
    assert_eq!(find("GET /v1/ara/environment")["price_base"], "$0.001");
    assert_eq!(find("GET /v1/ara/environment")["available"], json!(true));
    assert_eq!(find("GET /v1/ara/environment/density")["available"], json!(true));
    assert_eq!(find("POST /v1/tsl/purchase")["available"], json!(true));
    assert_eq!(find("POST /v1/tsl/purchase")["accepts_earned"], json!(false));
    assert_eq!(find("POST /v1/tsl/purchase")["trial_eligible"], json!(false));
    assert_eq!(find("GET /v1/ara/evidence-report")["price_base"], "$0.01");
    assert_eq!(find("GET /v1/ara/agent/{agent_id}/profile")["earned_pays"], "the resolution surcharge only");
    let trial = json!(["POST /v1/dd/create", "POST /v1/sdac/session/end", "POST /v1/ise/exit"]);
    assert_eq!(x402["trial"]["applies_to"], trial);
    assert_eq!(t.get("/v1/pricing/current", None).await.json["trial"]["applies_to"], trial);
    // An agent's Trial status names only the covered routes this server serves.
    let agent = t.register().await;
    let status = t.get("/v1/trial/status", Some(&agent.token)).await.json;
    assert_eq!(status["trial_covered_routes"], json!(["POST /v1/dd/create", "POST /v1/sdac/session/end", "POST /v1/ise/exit"]));

    let openapi = t.get("/openapi.json", None).await;
    assert_eq!(openapi.headers["x-da-spec-version"], "1.3.42");
    assert_eq!(openapi.json["info"]["version"], "1.3.42");
}

/// The root answers a program with the index and sends a browser to the
/// owner portal.
#[tokio::test]
async fn the_root_sends_a_browser_to_the_portal() {
    let t = TestServer::start(Backend::Sqlite).await;
    let index = t.call_with("GET", "/", &[("accept", "*/*")], None).await;
    assert_eq!((index.status.as_u16(), index.json["portal"].clone()), (200, json!(t.url("/portal/"))), "{}", index.text);
    let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    let unfollowed = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let page = unfollowed.get(t.url("/")).header("accept", browser).send().await.unwrap();
    assert_eq!((page.status().as_u16(), page.headers()["location"].to_str().unwrap()), (303, "/portal/"));
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let portal = unfollowed.get(t.url("/portal/")).header("accept", browser).send().await.unwrap();
    assert!(portal.status().is_success() && portal.text().await.unwrap().to_ascii_lowercase().contains("<html"));
    let json_first = t.call_with("GET", "/", &[("accept", "application/json, text/html")], None).await;
    assert_eq!(json_first.status.as_u16(), 200);
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_json() {
    let t = TestServer::start(Backend::Sqlite).await;
    t.get("/v1/nothing/here", None).await.assert_error(404, "NOT_FOUND");
    t.call("DELETE", "/v1/dd/create", None, None).await.assert_error(405, "METHOD_NOT_ALLOWED");
    t.call("PATCH", "/v1/trial/status", None, None).await.assert_error(405, "METHOD_NOT_ALLOWED");
}

#[tokio::test]
async fn get_on_a_post_only_route_explains_how_to_call_it() {
    let t = TestServer::start(Backend::Sqlite).await;
    for path in ["/v1/dd/create", "/v1/agent/register", "/v1/dd/confirm", "/v1/agent/token/recover"] {
        let guide = t.get(path, None).await;
        assert_eq!(guide.status, StatusCode::OK, "{path}");
        assert_eq!(guide.json["correct_method"], "POST", "{path}");
        assert!(guide.json["how_to_call"]["body_example"].is_object(), "{path}");
        assert!(guide.json["curl_example"].as_str().unwrap().starts_with("curl -X POST"), "{path}");
    }
    let create = t.get("/v1/dd/create", None).await.json;
    assert_eq!(create["payment"]["protocol"], "x402 v2");
    assert_eq!(create["how_to_call"]["authentication"], "Authorization: Bearer <auth_token>");
    // An owner's route says it takes the portal's session, not nothing.
    let share = t.get("/dap/tsl/human-share", None).await.json;
    assert_eq!(share["how_to_call"]["authentication"], "the owner's session cookie connect.sid, set by POST /dap/login", "{share}");
    assert!(share["curl_example"].as_str().unwrap().contains("connect.sid="), "{share}");
    assert_eq!(t.get("/v1/agent/register", None).await.json["how_to_call"]["authentication"], "none");
}

#[tokio::test]
async fn rate_limit_headers_and_429_follow_the_window() {
    let t = TestServer::with(Backend::Sqlite, Options { rate_limit: 5, ..Options::default() }).await;
    for n in 0..5 {
        let reply = t.get("/v1/dd/create", None).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.headers["ratelimit-limit"], "5");
        assert_eq!(reply.headers["ratelimit-remaining"], (4 - n).to_string().as_str());
        assert_eq!(reply.headers["ratelimit-policy"], "5;w=60");
        assert!(reply.headers.contains_key("ratelimit-reset"));
    }
    let limited = t.get("/v1/dd/create", None).await;
    limited.assert_error(429, "RATE_LIMITED");
    assert!(limited.headers.contains_key("retry-after"));
    assert_eq!(limited.headers["ratelimit-remaining"], "0");
    assert_eq!(limited.headers["connection"], "close", "a refusal does not keep its connection");
    // The probes are never limited: a balancer checking them shares its address with the traffic.
    for probe in ["/health", "/ready"] {
        assert_eq!(t.get(probe, None).await.status, StatusCode::OK, "{probe}");
    }
    t.clock.advance(chrono::Duration::seconds(60));
    assert_eq!(t.get("/v1/dd/create", None).await.status, StatusCode::OK);
}

/// Behind a trusted proxy, each client named in `X-Forwarded-For` has its
/// own window; a peer that is not trusted is its own client, whatever it
/// forwards.
#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_window() {
    let trusted = anchor_server::proxies::TrustedProxies::parse("127.0.0.0/8").unwrap();
    let t = TestServer::with(Backend::Sqlite, Options { rate_limit: 3, trusted_proxies: trusted, ..Options::default() }).await;
    let from = |client: &'static str| [("x-forwarded-for", client)];
    for _ in 0..3 {
        assert_eq!(t.call_with("GET", "/v1/dd/create", &from("198.51.100.1"), None).await.status, StatusCode::OK);
    }
    t.call_with("GET", "/v1/dd/create", &from("198.51.100.1"), None).await.assert_error(429, "RATE_LIMITED");
    // Another client behind the same proxy, and one the client tried to name before the proxy's hop.
    assert_eq!(t.call_with("GET", "/v1/dd/create", &from("198.51.100.2"), None).await.status, StatusCode::OK);
    let spoofed = t.call_with("GET", "/v1/dd/create", &[("x-forwarded-for", "203.0.113.50, 198.51.100.1")], None).await;
    spoofed.assert_error(429, "RATE_LIMITED");

    let untrusted = anchor_server::proxies::TrustedProxies::parse("10.0.0.0/8").unwrap();
    let t = TestServer::with(Backend::Sqlite, Options { rate_limit: 3, trusted_proxies: untrusted, ..Options::default() }).await;
    for n in 0..4 {
        let reply = t
            .call_with("GET", "/v1/dd/create", &[("x-forwarded-for", ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"][n])], None)
            .await;
        if n < 3 {
            assert_eq!(reply.status, StatusCode::OK);
        } else {
            reply.assert_error(429, "RATE_LIMITED");
        }
    }
}

/// RFC 9728: the MCP endpoint's protected-resource metadata, at the path
/// the RFC derives from the resource and at the root, names `/mcp` and the
/// header bearer, and the header bearer is indeed taken: a tool called with
/// no `auth_token` but the agent's token in `Authorization` acts as the agent.
#[tokio::test]
async fn the_mcp_endpoint_publishes_how_it_takes_a_token() {
    let t = TestServer::start(Backend::Sqlite).await;
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"] {
        let metadata = t.get(path, None).await;
        assert_eq!(metadata.status, StatusCode::OK, "{path}");
        assert_eq!(metadata.json["resource"], json!(t.url("/mcp")), "{path}");
        assert_eq!(metadata.json["bearer_methods_supported"], json!(["header"]));
        assert!(metadata.json.get("authorization_servers").is_none(), "no OAuth server is claimed");
    }
    let agent = t.register().await;
    let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": { "name": "get_agent_profile", "arguments": { "agent_id": agent.id } } });
    let reply = t
        .http
        .post(t.url("/mcp"))
        .bearer_auth(&agent.token)
        .header("accept", "application/json, text/event-stream")
        .json(&call)
        .send()
        .await
        .unwrap();
    let answer: Value = reply.json().await.unwrap();
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    assert_eq!(answer["result"]["structuredContent"]["agent_id"], json!(agent.id), "{answer}");
}
