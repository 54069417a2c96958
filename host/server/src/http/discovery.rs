//! Documents about the service itself: health, the generated OpenAPI, llms.txt,
//! the agent card and x402 discovery. All text here is this project's own.

use axum::extract::State;
use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::openapi::{self, INTERFACE_VERSION, Operation, boolean, integer, object, op, string};
use crate::state::AppState;
use anchor_app::catalog;
use anchor_domain::MilliDac;
use anchor_x402::{NETWORK, USDC_BASE};

/// This implementation's own version.
pub const SERVICE_VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/health", get(health)).tag("Discovery").summary("Liveness, versions and uptime").extension().ok(
            200,
            "Healthy",
            object(
                &[],
                vec![
                    ("status", string()),
                    ("version", string()),
                    ("service_version", string()),
                    ("uptime_seconds", integer()),
                    ("storage", string()),
                    ("pricing_version", string()),
                ],
            ),
        ),
        op(Method::GET, "/", get(root)).tag("Discovery").summary("What this service is and where to start").extension().ok(
            200,
            "Index",
            object(&[], vec![("service", string()), ("version", string())]),
        ),
        op(Method::GET, "/openapi.json", get(openapi_json))
            .tag("Discovery")
            .summary("This document, generated from the route table")
            .extension()
            .ok(200, "OpenAPI 3.0", json!({ "type": "object" })),
        op(Method::GET, "/llms.txt", get(llms_txt))
            .tag("Discovery")
            .summary("A plain-text guide for language-model agents")
            .extension()
            .ok_media(200, "The guide, in Markdown", "text/plain"),
        op(Method::GET, "/.well-known/agent-card.json", get(agent_card)).tag("Discovery").summary("A2A agent card").extension().ok(
            200,
            "Agent card",
            json!({ "type": "object" }),
        ),
        op(Method::GET, "/.well-known/x402.json", get(x402))
            .tag("Discovery")
            .summary("Which routes take x402 payments, and how")
            .extension()
            .ok(200, "x402 discovery", object(&[], vec![("x402_supported", boolean()), ("paid_endpoints", json!({ "type": "array" }))])),
    ]
}

async fn health(State(state): State<AppState>) -> Response {
    let storage_ok = state.store.ping().await.is_ok();
    let body = json!({
        "status": if storage_ok { "ok" } else { "degraded" },
        "version": INTERFACE_VERSION,
        "service_version": SERVICE_VERSION,
        "uptime_seconds": state.started.elapsed().as_secs(),
        "storage": state.store.backend(),
        "storage_reachable": storage_ok,
        "pricing_version": state.pricing.generation().version,
        "host_id": state.host_id,
        "log": {
            "origin": state.log_key.origin,
            "public_key": state.log_key.vkey,
            "checkpoint_size": state.store.latest_checkpoint().await.ok().flatten().map(|c| c.size),
        },
    });
    let status = if storage_ok { axum::http::StatusCode::OK } else { axum::http::StatusCode::SERVICE_UNAVAILABLE };
    (status, axum::Json(body)).into_response()
}

async fn root(State(state): State<AppState>) -> axum::Json<Value> {
    let base = &state.settings.public_url;
    axum::Json(json!({
        "service": "anchor: an accountability anchoring service for software agents",
        "version": INTERFACE_VERSION,
        "service_version": SERVICE_VERSION,
        "start_here": format!("POST {base}/v1/agent/register"),
        "openapi": format!("{base}/openapi.json"),
        "llms_txt": format!("{base}/llms.txt"),
    }))
}

async fn openapi_json(State(state): State<AppState>) -> Response {
    let document = state.openapi.get_or_init(|| openapi::document(&crate::http::operations(), &state.settings.public_url)).clone();
    let mut response = axum::Json(document).into_response();
    response.headers_mut().insert("x-da-spec-version", HeaderValue::from_static(INTERFACE_VERSION));
    response
}

async fn llms_txt(State(state): State<AppState>) -> Response {
    let base = &state.settings.public_url;
    let text = format!(
        "# anchor\n\n\
> An accountability anchoring service for software agents. An agent declares a decision (DD) together with the scope of accountability it accepts for it (EE); the service fixes when and at what scope, outside the agent's own logs. It keeps metadata only: never what was decided, and it never judges the decision.\n\n\
## First calls\n\
1. POST {base}/v1/agent/register (no body needed). Keep auth_token and recovery_key: they are shown once.\n\
2. POST {base}/v1/dd/create with Authorization: Bearer <auth_token>, a fresh request_id (UUID), a dd object and an ee object (or ee.ee_preset EE_basic).\n\
3. POST {base}/v1/dd/confirm with the dd_id once the action is done. The answer carries integrity_hash.\n\
4. GET {base}/v1/dd/{{dd_id}} reads the record back (each read counts against the EE's direct access quota).\n\n\
## Costs\n\
- Prices are in DAC; 1 DAC is 0.001 USD, paid in USDC on Base over x402 v2. GET {base}/v1/pricing/current has every number.\n\
- A new agent holds 500 Trial DAC for 30 days. Trial pays DD/EE declarations (base fee and scope adds) while it lasts.\n\
- When nothing else pays, a paid route answers 402 with a PAYMENT-REQUIRED header. Sign it with your wallet (the official x402 client does) and send the same request again with the payload in PAYMENT-SIGNATURE (X-PAYMENT is read too).\n\n\
## Owners\n\
- A human (or a parent agent) who manages agents uses the owner portal at {base}/portal/ or the /dap/... API. Linking an agent there replaces its auth_token: the owner hands the new one to the agent.\n\
- An owner may cap external spending (DAB, GET {base}/v1/dab/status shows it), register classification keys (GET {base}/v1/classification lists the ones you may use) and require or forbid templates (content-inclusion policy; a contradicting create answers 403 CONTENT_INCLUSION_POLICY).\n\n\
## Reference\n\
- [OpenAPI]({base}/openapi.json): every route, generated from the service's route table\n\
- [Agent card]({base}/.well-known/agent-card.json)\n\
- [x402 discovery]({base}/.well-known/x402.json)\n\
- [Pricing]({base}/v1/pricing/current) and [presets]({base}/v1/pricing/ee-presets)\n\n\
## Conventions\n\
- Errors are JSON: {{\"error_code\": \"UPPER_SNAKE\", \"message\": \"…\"}}. Unknown fields are refused with UNKNOWN_FIELD.\n\
- request_id makes DD create idempotent per agent: sending it again returns the first result.\n\
- Every response carries RateLimit-* headers.\n"
    );
    let mut response = text.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

async fn agent_card(State(state): State<AppState>) -> axum::Json<Value> {
    let base = &state.settings.public_url;
    axum::Json(json!({
        "protocolVersion": "1.0",
        "name": "anchor",
        "description": "Anchors an agent's decisions outside the agent: when it decided, under which accountability scope, and at what cost. Keeps metadata only and passes no judgement on what was decided.",
        "url": base,
        "preferredTransport": "HTTP+JSON",
        "provider": { "organization": "anchor operators", "url": base },
        "version": INTERFACE_VERSION,
        "documentationUrl": format!("{base}/llms.txt"),
        "capabilities": { "streaming": false, "pushNotifications": false, "stateTransitionHistory": false },
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "POST /v1/agent/register returns auth_token; send it as Authorization: Bearer <auth_token>.",
            },
        },
        "security": [{ "bearer": [] }],
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": [
            {
                "id": "registration",
                "name": "Agent registration",
                "description": "Creates an agent identity with a bearer token, a recovery key and 500 Trial DAC for 30 days.",
                "tags": ["identity", "onboarding"],
            },
            {
                "id": "decision-declaration",
                "name": "Decision declaration (DD with EE)",
                "description": "Declares a decision's metadata and its accountability scope, then confirms it once the action is done; confirmation fixes a salted SHA-256 integrity hash.",
                "tags": ["accountability", "audit", "x402"],
            },
            {
                "id": "account",
                "name": "Trial and classification",
                "description": "Reports the Trial balance and the self-classification keys the agent may use.",
                "tags": ["account"],
            },
        ],
        "x-anchor": {
            "key_endpoints": [
                { "method": "POST", "path": "/v1/agent/register", "cost": "free" },
                { "method": "POST", "path": "/v1/dd/create", "cost": "trial, then x402" },
                { "method": "POST", "path": "/v1/dd/confirm", "cost": "free" },
                { "method": "GET", "path": "/v1/dd/{dd_id}", "cost": "free" },
            ],
            "openapi": format!("{base}/openapi.json"),
            "x402": format!("{base}/.well-known/x402.json"),
            "log": {
                "origin": state.log_key.origin,
                "public_key": state.log_key.vkey,
                "checkpoint": format!("{base}/v1/log/checkpoint"),
                "receipt": format!("{base}/v1/dd/{{dd_id}}/receipt"),
            },
        },
    }))
}

async fn x402(State(state): State<AppState>) -> axum::Json<Value> {
    let base = &state.settings.public_url;
    let policy = state.pricing.policy().ok();
    let services = state.pricing.services().ok().flatten();
    // Prices in USD: milli-DAC are micro-USD, in exact integer math.
    // At least cents, as prices are written ("$0.10"), more digits when needed ("$0.001").
    let usd = |amount: MilliDac| {
        let micro = amount.milli();
        let fraction = format!("{:06}", micro % 1_000_000);
        let digits = fraction.trim_end_matches('0').len().max(2);
        format!("${}.{}", micro / 1_000_000, &fraction[..digits])
    };
    let paid_endpoints: Vec<Value> = catalog::PAID_ROUTES
        .iter()
        .map(|paid| {
            let available = crate::http::implements(&paid.route);
            let mut entry = json!({
                "endpoint": paid.route.to_string(),
                "priced_by": paid.priced_by(),
                "trial_eligible": paid.trial,
                "accepts_earned": paid.earned != catalog::EarnedUse::Never,
                "available": available,
            });
            if let Some(price) = policy.as_ref().and_then(|p| paid.base_price(p, services.as_ref())) {
                entry["price_base"] = json!(usd(price));
            }
            if paid.earned == catalog::EarnedUse::Surcharge {
                entry["earned_pays"] = json!("the resolution surcharge only");
            }
            if !available {
                entry["note"] = json!("not served by this version yet: the route answers 404");
            }
            entry
        })
        .collect();
    axum::Json(json!({
        "name": "anchor",
        "version": INTERFACE_VERSION,
        "x402_supported": true,
        "x402_version": 2,
        "networks": [NETWORK],
        "asset": USDC_BASE,
        "payment_address": state.settings.pay_to,
        "paid_endpoints": paid_endpoints,
        "trial": {
            "enabled": true,
            "amount_dac": 500,
            "period_days": 30,
            "applies_to": catalog::trial_routes().map(|r| r.to_string()).collect::<Vec<_>>(),
        },
        "endpoints": { "api": base, "openapi": format!("{base}/openapi.json") },
        "log": { "origin": state.log_key.origin, "public_key": state.log_key.vkey, "checkpoint": format!("{base}/v1/log/checkpoint") },
        "documentation": format!("{base}/llms.txt"),
    }))
}
