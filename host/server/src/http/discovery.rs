//! Documents about the service itself: health, the generated OpenAPI, llms.txt,
//! the agent card and x402 discovery. All text here is this project's own.

use crate::api::discovery::*;
use crate::openapi::{self, INTERFACE_VERSION, Operation, op};
use crate::state::AppState;
use anchor_app::catalog;
use anchor_domain::MilliDac;
use anchor_x402::{NETWORK, USDC_BASE};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::Value;

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/health", get(health))
            .tag("Discovery")
            .summary("Liveness, versions and uptime")
            .extension()
            .returns::<Health>(200, "Healthy")
            .returns::<Health>(503, "Storage does not answer"),
        op(Method::GET, "/ready", get(ready))
            .tag("Discovery")
            .summary("Whether this host can serve now: its database answers, takes writes, and has this build's migrations")
            .describe(
                "For load balancers (HAProxy's health check): 503 while the database is unreachable, read-only (a standby after a \
                 failover) or at another schema version, with Retry-After. GET /health says whether the process is alive.",
            )
            .extension()
            .returns::<Ready>(200, "Ready")
            .returns::<Ready>(503, "Not ready; the body says which check failed"),
        op(Method::GET, "/", get(root))
            .tag("Discovery")
            .summary("What this service is and where to start")
            .describe("A browser (Accept: text/html before application/json) is sent to the owner portal with 303 See Other.")
            .extension()
            .returns::<Index>(200, "Index")
            .ok_media(303, "A browser: the owner portal is at /portal/ (Location)", "text/html"),
        op(Method::GET, "/openapi.json", get(openapi_json))
            .tag("Discovery")
            .summary("This document, generated from the route table and the types of the bodies")
            .extension()
            .returns::<Value>(200, "OpenAPI 3.0"),
        op(Method::GET, "/llms.txt", get(llms_txt))
            .tag("Discovery")
            .summary("A plain-text guide for language-model agents")
            .extension()
            .ok_media(200, "The guide, in Markdown", "text/plain"),
        op(Method::GET, "/.well-known/agent-card.json", get(agent_card))
            .tag("Discovery")
            .summary("A2A agent card")
            .extension()
            .returns::<AgentCard>(200, "Agent card"),
        op(Method::GET, "/.well-known/x402.json", get(x402))
            .tag("Discovery")
            .summary("Which routes take x402 payments, and how")
            .extension()
            .returns::<X402Discovery>(200, "x402 discovery"),
        op(Method::GET, "/.well-known/oauth-protected-resource/mcp", get(protected_resource))
            .tag("Discovery")
            .summary("RFC 9728 protected-resource metadata of the MCP endpoint")
            .describe(
                "Where MCP clients look for how /mcp takes a token: as a bearer in the Authorization header (or in each tool's \
                 auth_token). The token is the agent's own, from register_agent (POST /v1/agent/register), not an OAuth access token: \
                 no authorization server is named, and /mcp never answers 401 for want of one.",
            )
            .extension()
            .returns::<ProtectedResource>(200, "Protected-resource metadata"),
        op(Method::GET, "/.well-known/oauth-protected-resource", get(protected_resource))
            .tag("Discovery")
            .summary("RFC 9728 protected-resource metadata, at the host's root (the same as for /mcp)")
            .extension()
            .returns::<ProtectedResource>(200, "Protected-resource metadata"),
        op(Method::GET, "/.well-known/did.json", get(did_document))
            .tag("Discovery")
            .summary("The service's DID document: the key its x402 offers are signed with")
            .describe("A did:web document (the DID is did:web: and this host, its port escaped as %3A) with one verification method, #log-key: the log's Ed25519 key as a JWK, the key every checkpoint is signed with. x402 offers (the offer-receipt extension of every 402) are JWS signed by it, their kid naming it; a verifier resolves the kid here, or checks the key against GET /v1/log/key.")
            .extension()
            .returns::<Value>(200, "DID document")
            .error(404, "This host signs no offers.", &["NOT_FOUND"]),
    ]
}

/// `GET /.well-known/oauth-protected-resource[/mcp]` (RFC 9728).
async fn protected_resource(State(state): State<AppState>) -> Json<ProtectedResource> {
    let public = state.settings.public_url.trim_end_matches('/');
    Json(ProtectedResource {
        resource: format!("{public}/mcp"),
        resource_name: "anchor MCP endpoint",
        bearer_methods_supported: vec!["header"],
        resource_documentation: format!("{public}/llms.txt"),
    })
}

/// `GET /.well-known/did.json`.
async fn did_document(State(state): State<AppState>) -> Response {
    match &state.app.offers {
        Some(signer) => Json(signer.did_document()).into_response(),
        None => {
            crate::error::ApiError::App(anchor_app::AppError::NotFound { code: "NOT_FOUND", message: "this host signs no offers".into() })
                .into_response()
        }
    }
}

async fn ready(State(state): State<AppState>) -> Response {
    let readiness = anchor_app::status::readiness(&state.app).await;
    let body = Json(Ready::of(&readiness, state.host_id));
    if readiness.ready() {
        (StatusCode::OK, body).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, [(axum::http::header::RETRY_AFTER, "5")], body).into_response()
    }
}

async fn health(State(state): State<AppState>) -> Response {
    let status = anchor_app::status::status(&state.app).await;
    let body = Health {
        status: if status.storage_reachable { HealthStatus::Ok } else { HealthStatus::Degraded },
        version: INTERFACE_VERSION,
        service_version: SERVICE_VERSION,
        uptime_seconds: state.started.elapsed().as_secs(),
        storage: status.storage,
        storage_reachable: status.storage_reachable,
        pricing: PricingInfo {
            pricing_version: status.pricing_version.clone(),
            component_sha256: status.pricing_sha256,
            effective_from: status.pricing.since.map(|at| crate::wire::Time(at).text()),
            next: crate::api::pricing::NextGeneration::of(&status.pricing),
        },
        pricing_version: status.pricing_version,
        host_id: state.host_id,
        log: LogInfo {
            origin: state.log_key.origin.clone(),
            public_key: state.log_key.vkey.clone(),
            checkpoint_size: status.checkpoint_size,
        },
    };
    let code = if status.storage_reachable { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, Json(body)).into_response()
}

/// Whether the client is a browser asking for a page: it names text/html
/// before (or without) application/json.
fn wants_html(headers: &axum::http::HeaderMap) -> bool {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    match (accept.find("text/html"), accept.find("application/json")) {
        (Some(html), Some(json)) => html < json,
        (Some(_), None) => true,
        _ => false,
    }
}

async fn root(State(state): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    if wants_html(&headers) {
        let mut page = (
            axum::http::StatusCode::SEE_OTHER,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            "<!doctype html><title>anchor</title><p>The owner portal is at <a href=\"/portal/\">/portal/</a>.</p>\n",
        )
            .into_response();
        page.headers_mut().insert(header::LOCATION, HeaderValue::from_static("/portal/"));
        return page;
    }
    let base = &state.settings.public_url;
    Json(Index {
        service: "anchor: an accountability anchoring service for software agents",
        version: INTERFACE_VERSION,
        service_version: SERVICE_VERSION,
        start_here: format!("POST {base}/v1/agent/register"),
        openapi: format!("{base}/openapi.json"),
        llms_txt: format!("{base}/llms.txt"),
        portal: format!("{base}/portal/"),
        terms: format!("{base}/portal/terms"),
        privacy: format!("{base}/portal/privacy"),
    })
    .into_response()
}

async fn openapi_json(State(state): State<AppState>) -> Response {
    let document = state.openapi.get_or_init(|| openapi::document(&crate::http::operations(), &state.settings.public_url)).clone();
    let mut response = Json(document).into_response();
    response.headers_mut().insert("x-da-spec-version", HeaderValue::from_static(INTERFACE_VERSION));
    response
}

async fn llms_txt(State(state): State<AppState>) -> Response {
    let mut response = llms_text(&state).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

async fn agent_card(State(state): State<AppState>) -> Json<AgentCard> {
    let base = &state.settings.public_url;
    let skill = |id, name, description, tags: &[&'static str]| Skill { id, name, description, tags: tags.to_vec() };
    let endpoint = |method, path, cost| KeyEndpoint { method, path, cost };
    Json(AgentCard {
        protocol_version: "1.0",
        name: "anchor",
        description: "Anchors an agent's decisions outside the agent: when it decided, under which accountability scope, and at what cost. Keeps metadata only and passes no judgement on what was decided.",
        url: base.clone(),
        preferred_transport: "HTTP+JSON",
        provider: Provider { organization: "anchor operators", url: base.clone() },
        version: INTERFACE_VERSION,
        documentation_url: format!("{base}/llms.txt"),
        capabilities: Capabilities { streaming: false, push_notifications: false, state_transition_history: false },
        security_schemes: SecuritySchemes {
            bearer: BearerScheme {
                kind: "http",
                scheme: "bearer",
                description: "POST /v1/agent/register returns auth_token; send it as Authorization: Bearer <auth_token>.",
            },
        },
        security: vec![SecurityRequirement { bearer: Vec::new() }],
        default_input_modes: vec!["application/json"],
        default_output_modes: vec!["application/json"],
        skills: vec![
            skill(
                "registration",
                "Agent registration",
                "Creates an agent identity with a bearer token, a recovery key and 500 Trial DAC for 30 days.",
                &["identity", "onboarding"],
            ),
            skill(
                "decision-declaration",
                "Decision declaration (DD with EE)",
                "Declares a decision's metadata and its accountability scope, then confirms it once the action is done; confirmation fixes a salted SHA-256 integrity hash.",
                &["accountability", "audit", "x402"],
            ),
            skill(
                "observation",
                "Observation of recorded history (ARA)",
                "Profiles, timelines and EE patterns of an agent (free for itself, paid for others within their disclosure level), de-identified environment and pattern releases, anomaly comparison and evidence reports.",
                &["statistics", "privacy", "x402"],
            ),
            skill(
                "usage-report",
                "DAC usage report (DUR)",
                "What an agent spent, by kind and by source, its transactions and a CSV or JSON export, and reports over its own decisions. Free.",
                &["reporting"],
            ),
            skill(
                "account",
                "Trial and classification",
                "Reports the Trial balance and the self-classification keys the agent may use.",
                &["account"],
            ),
        ],
        x_anchor: CardExtension {
            key_endpoints: vec![
                endpoint("POST", "/v1/agent/register", "free"),
                endpoint("POST", "/v1/dd/create", "trial, then x402"),
                endpoint("POST", "/v1/dd/confirm", "free"),
                endpoint("GET", "/v1/dd/{dd_id}", "free"),
                endpoint("GET", "/v1/ara/agent/{agent_id}/profile", "free for the agent itself, x402 for others"),
                endpoint("GET", "/v1/ara/environment", "x402"),
                endpoint("GET", "/v1/dur/summary", "free"),
            ],
            openapi: format!("{base}/openapi.json"),
            x402: format!("{base}/.well-known/x402.json"),
            mcp: format!("{base}/mcp"),
            features_off: state.app.features().off(),
            log: CardLog {
                origin: state.log_key.origin.clone(),
                public_key: state.log_key.vkey.clone(),
                checkpoint: format!("{base}/v1/log/checkpoint"),
                receipt: format!("{base}/v1/dd/{{dd_id}}/receipt"),
            },
        },
    })
}

async fn x402(State(state): State<AppState>) -> Json<X402Discovery> {
    let base = &state.settings.public_url;
    let policy = state.app.pricing.policy().ok();
    let services = state.app.pricing.services().ok().flatten();
    // Prices in USD: milli-DAC are micro-USD, in exact integer math.
    // At least cents, as prices are written ("$0.10"), more digits when needed ("$0.001").
    let usd = |amount: MilliDac| {
        let micro = amount.milli();
        let fraction = format!("{:06}", micro % 1_000_000);
        let digits = fraction.trim_end_matches('0').len().max(2);
        format!("${}.{}", micro / 1_000_000, &fraction[..digits])
    };
    let features = state.app.features();
    let paid_endpoints = catalog::PAID_ROUTES
        .iter()
        .map(|paid| {
            let switched_off = features.route_off(paid.route.path).is_some();
            PaidEndpoint {
                endpoint: paid.route.to_string(),
                priced_by: paid.priced_by(),
                trial_eligible: paid.trial,
                accepts_earned: paid.earned != catalog::EarnedUse::Never,
                available: !switched_off,
                price_base: policy.as_ref().and_then(|p| paid.base_price(p, services.as_ref())).map(usd),
                earned_pays: paid.earned.pays(),
                note: switched_off.then_some("switched off by the operator: the route answers 503 FEATURE_NOT_AVAILABLE"),
            }
        })
        .collect();
    Json(X402Discovery {
        name: "anchor",
        version: INTERFACE_VERSION,
        x402_supported: true,
        x402_version: 2,
        networks: vec![NETWORK],
        asset: USDC_BASE,
        payment_address: state.settings.pay_to.clone(),
        paid_endpoints,
        trial: TrialOffer {
            enabled: state.settings.trial_grant > MilliDac::ZERO,
            amount_dac: state.settings.trial_grant.into(),
            period_days: anchor_domain::agents::TRIAL_DAYS,
            applies_to: catalog::trial_routes().map(|r| r.to_string()).collect(),
        },
        endpoints: Endpoints { api: base.clone(), openapi: format!("{base}/openapi.json") },
        log: DiscoveryLog {
            origin: state.log_key.origin.clone(),
            public_key: state.log_key.vkey.clone(),
            checkpoint: format!("{base}/v1/log/checkpoint"),
        },
        documentation: format!("{base}/llms.txt"),
    })
}
