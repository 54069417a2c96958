//! Documents about the service itself: health, the generated OpenAPI, llms.txt,
//! the agent card and x402 discovery. All text here is this project's own.
//!
//! Its wire shapes and the function each operation runs are one set, served
//! by the route table here and by the MCP tools (`mcp/`) alike.

use crate::openapi::{self, INTERFACE_VERSION, Operation, op};
use crate::state::AppState;
use crate::wire::Dac;
use anchor_app::catalog;
use anchor_domain::MilliDac;
use anchor_x402::{NETWORK, USDC_BASE};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

/// This implementation's own version.
pub const SERVICE_VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum HealthStatus {
    Ok,
    Degraded,
}

/// Whether this host can serve requests now (a load balancer's check);
/// `GET /health` says whether the process is alive.
#[derive(Serialize, JsonSchema)]
#[schemars(extend("x-anchor-beyond-reference" = "a readiness check for load balancers"))]
pub(crate) struct Ready {
    /// ready or not_ready.
    #[schemars(extend("enum" = ["ready", "not_ready"]))]
    pub(crate) status: &'static str,
    /// sqlite or postgres.
    pub(crate) storage: &'static str,
    pub(crate) storage_reachable: bool,
    /// A write would be accepted (on PostgreSQL: this host's database is the primary).
    pub(crate) writable: bool,
    /// Every migration this build carries is applied, and any other is a
    /// newer one this build may serve beside.
    pub(crate) migrations_applied: bool,
    /// The database holds newer migrations this build serves beside (a
    /// rolling upgrade is under way).
    pub(crate) schema_ahead: bool,
    pub(crate) host_id: Uuid,
}

impl Ready {
    pub(crate) fn of(r: &anchor_app::status::Readiness, host_id: Uuid) -> Ready {
        Ready {
            status: if r.ready() { "ready" } else { "not_ready" },
            storage: r.storage,
            storage_reachable: r.storage_reachable,
            writable: r.writable,
            migrations_applied: r.migrations_applied,
            schema_ahead: r.schema_ahead,
            host_id,
        }
    }
}

/// RFC 9728 protected-resource metadata of `/mcp`: the agent's token may
/// come as a bearer in the header (or in each tool's `auth_token`); it is
/// this service's own, issued by `register_agent`, not an OAuth access
/// token, so no authorization server is named.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ProtectedResource {
    /// The resource: this service's MCP endpoint.
    pub resource: String,
    pub resource_name: &'static str,
    /// How a token may be sent: `header` (Authorization: Bearer).
    pub bearer_methods_supported: Vec<&'static str>,
    /// Where a person reads how to get a token.
    pub resource_documentation: String,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Health {
    pub(crate) status: HealthStatus,
    /// The interface version implemented.
    pub(crate) version: &'static str,
    pub(crate) service_version: &'static str,
    pub(crate) uptime_seconds: u64,
    /// sqlite or postgres.
    pub(crate) storage: &'static str,
    pub(crate) storage_reachable: bool,
    pub(crate) pricing_version: String,
    /// The pricing generation in force on this host, and the next one scheduled.
    pub(crate) pricing: PricingInfo,
    pub(crate) host_id: Uuid,
    pub(crate) log: LogInfo,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct PricingInfo {
    pub(crate) pricing_version: String,
    pub(crate) component_sha256: String,
    /// Its publication's activation time; null for the generation the host started with.
    pub(crate) effective_from: Option<String>,
    pub(crate) next: Option<crate::areas::pricing::NextGeneration>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct LogInfo {
    pub(crate) origin: String,
    pub(crate) public_key: String,
    pub(crate) checkpoint_size: Option<i64>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Index {
    pub(crate) service: &'static str,
    pub(crate) version: &'static str,
    pub(crate) service_version: &'static str,
    pub(crate) start_here: String,
    pub(crate) openapi: String,
    pub(crate) llms_txt: String,
    /// The owner portal (a web page for people who manage agents).
    pub(crate) portal: String,
    /// The software's terms of service and privacy policy.
    pub(crate) terms: String,
    pub(crate) privacy: String,
}

/// The guide for agents (llms.txt), also served by the MCP tool get_documentation.
pub(crate) fn llms_text(state: &AppState) -> String {
    let base = &state.settings.config.public_url;
    format!(
        "# anchor\n\n\
> An accountability anchoring service for software agents. An agent declares a decision (DD) together with the scope of accountability it accepts for it (EE); the service fixes when and at what scope, outside the agent's own logs. It keeps metadata only: never what was decided, and it never judges the decision.\n\n\
## MCP\n\
- {base}/mcp serves MCP over streamable HTTP (stateless; protocol versions up to the current one, initialize accepted): the reference MCP server's 30 tools with the same names and arguments. Authenticate with an auth_token argument or Authorization: Bearer on the MCP request. Served: register_agent, create_decision, confirm_decision, propose_bilateral, get_decision, list_decisions, get_trial_status, get_dac_balance, list_classifications, get_documentation, get_agent_profile (level 1), observe_environment, observe_pattern, list_tools, register_tool, purchase_tool, get_decision_metadata_distribution, get_self_classification_distribution, get_dac_ur, compare_anomaly, get_evidence_report, get_environment_anomaly, the idle-state tools (create_ise_session, get_ise_status, exit_ise_session), the simulation tools (create_sdac_session, run_sdac_trial, get_sdac_session, end_sdac_session) and submit_feedback (anonymous: it keeps the note and the day it arrived, nothing that names you). A paid tool that needs a payment answers a tool error carrying the x402 challenge (payment_required); sign it and call again with payment_signature.\n\n\
## First calls\n\
1. POST {base}/v1/agent/register (no body needed). Keep auth_token and recovery_key: they are shown once.\n\
2. POST {base}/v1/dd/create with Authorization: Bearer <auth_token>, a fresh request_id (UUID), a dd object and an ee object (or ee.ee_preset EE_basic).\n\
3. POST {base}/v1/dd/confirm with the dd_id once the action is done. The answer carries integrity_hash.\n\
4. GET {base}/v1/dd/{{dd_id}} reads the record back (each read counts against the EE's direct access quota).\n\n\
## Costs\n\
- Prices are in DAC; 1 DAC is 0.001 USD, paid in USDC on Base over x402 v2. GET {base}/v1/pricing/current has every number.\n\
- A new agent holds 500 Trial DAC for 30 days. Trial pays DD/EE declarations (base fee and scope adds) while it lasts, each one whole when it can: when what is left covers the base fee but not the scope adds, Trial pays the base fee and the create answers 402 for the rest (the premium) over x402, or Earned DAC pays it with premium_payment_source earned; when it cannot pay the base fee, x402 pays the whole.\n\
- When nothing else pays, a paid route answers 402 with a PAYMENT-REQUIRED header. Sign it with your wallet (the official x402 client does) and send the same request again with the payload in PAYMENT-SIGNATURE (X-PAYMENT is read too).\n\n\
## Observing recorded history (ARA) and your spending (DUR)\n\
- GET {base}/v1/ara/agent/<your agent_id>/profile (also /timeline, /ee-pattern; resolution_level 1 to 3) is free for yourself. Another agent's costs a fixed observation price plus a surcharge at levels 2 and 3 (both in /v1/pricing/current), within its disclosure_level.\n\
- GET {base}/v1/ara/environment and /v1/ara/pattern/ee-distribution show all agents as counts of agents, from a release per day over the 30 whole days before today; every count carries calibrated noise, and a value fewer than 10 agents stand for is shown with probability at most the release's threshold delta (PRIVACY.md). Trial never pays ARA.\n\
- GET {base}/v1/dur/summary reports what you spent, by kind and by source; /v1/dur/export gives the entries as CSV or JSON. Free.\n\
- GET {base}/v1/earned-dac/balance and /v1/earned-dac/ledger show your Earned DAC (from your tools' sales and revenue shares; each credit expires after expiry_days, the earliest spent first). Once the balance reaches min_spend_threshold it can pay a surcharge (premium_source=earned) or a declaration's premium (premium_payment_source earned), never a base fee, and it cannot be moved to another agent. Free.\n\
- Refusals (400, 403, 404 DATA_UNAVAILABLE) always come before a 402, so a refused observation costs nothing.\n\n\
## The tool market (TSL)\n\
- GET {base}/v1/tsl/tools lists interpretation tools (public, newest first; the service does not rate them). POST {base}/v1/tsl/tool/register lists your own (free): a name, a price_dac and the ARA observations it reads (ara_connections).\n\
- POST {base}/v1/tsl/purchase (layer1) or /v1/tsl/purchase/layer2 buys one: its price plus the service fee, over x402 only (never Trial or Earned DAC). The price becomes Earned DAC of the seller, less the revenue shares it gave (POST /v1/tsl/revenue-share) and its owner's human share.\n\
- Tools can run here: the seller uploads a WebAssembly component (PUT {base}/v1/tsl/tool/<tool_id>/component, world anchor:tool@1.0.0), and a buyer runs it (POST {base}/v1/tsl/tool/<tool_id>/run) on the observations it declared, made for the buyer with ARA's own gates and prices, paid only if the run succeeds. Nothing the tool receives or returns is stored. GET {base}/v1/tsl/runtime gives the limits.\n\n\
## Keeping records longer, archiving state, agreeing with another agent\n\
- Indefinite retention: POST {base}/v1/retention/indefinite/subscribe debits a month from your Earned DAC; while the subscription is active, DD create accepts ee_retention_period indefinite. Cancelled or unpaid, it keeps going for a grace period; after that your indefinite records are kept as short ones. GET /v1/retention/indefinite/status shows where it stands.\n\
- Past its retention period a record is converted to statistics that name neither you nor it: reading its dd_id answers 410 RECORD_DEIDENTIFIED. Its log leaf stays, so keep the receipt (GET {base}/v1/dd/{{dd_id}}/receipt) if you want to prove it later; the receipt still verifies offline.\n\
- State archive (ASA): POST {base}/v1/asa/subscribe buys periods (x402, or payment_source earned); then POST /v1/asa/register records the SHA-256 of a snapshot you keep yourself, and POST /v1/asa/verify tells whether a hash is one you registered. Only the hash is kept.\n\
- Bilateral: POST {base}/v1/dd/bilateral/propose records a decision you took with another agent (dd_declaration_mode bilateral, the four EE axes, paid over x402). It accepts or rejects at POST /v1/dd/bilateral/<agreement_id>/respond (GET /v1/dd/bilateral/received lists what waits); once accepted, you confirm yours within 30 minutes and it confirms its own copy, free.\n\
- Idle state (ISE) and simulation (sDAC): POST {base}/v1/ise/enter and /v1/sdac/session/start; both end routes are paid by Trial first.\n\n\
## Owners\n\
- A human (or a parent agent) who manages agents uses the owner portal at {base}/portal/ or the /dap/... API. Linking an agent there replaces its auth_token: the owner hands the new one to the agent.\n\
- An owner may cap external spending (DAB, GET {base}/v1/dab/status shows it), register classification keys (GET {base}/v1/classification lists the ones you may use) and require or forbid templates (content-inclusion policy; a contradicting create answers 403 CONTENT_INCLUSION_POLICY).\n\n\
## Reference\n\
- [OpenAPI]({base}/openapi.json): every route, generated from the service's route table\n\
- [Agent card]({base}/.well-known/agent-card.json)\n\
- [x402 discovery]({base}/.well-known/x402.json)\n\
- [Pricing]({base}/v1/pricing/current) and [presets]({base}/v1/pricing/ee-presets)\n\n\
## Conventions\n\
- Errors are JSON: {{\"error_code\": \"UPPER_SNAKE\", \"message\": \"…\"}}. Unknown fields are refused with UNKNOWN_FIELD, except what the published SDK sends that this service does not use: context on DD create (dropped, never stored: it may carry decision content) and transaction_id on DD confirm (not needed).\n\
- request_id makes DD create idempotent per agent: sending it again returns the first result.\n\
- Every response but /health and /ready (never limited) carries RateLimit-* headers.\n"
    )
}

/// An A2A agent card.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentCard {
    pub(crate) protocol_version: &'static str,
    pub(crate) name: &'static str,
    pub(crate) description: &'static str,
    pub(crate) url: String,
    pub(crate) preferred_transport: &'static str,
    pub(crate) provider: Provider,
    pub(crate) version: &'static str,
    pub(crate) documentation_url: String,
    pub(crate) capabilities: Capabilities,
    pub(crate) security_schemes: SecuritySchemes,
    pub(crate) security: Vec<SecurityRequirement>,
    pub(crate) default_input_modes: Vec<&'static str>,
    pub(crate) default_output_modes: Vec<&'static str>,
    pub(crate) skills: Vec<Skill>,
    #[serde(rename = "x-anchor")]
    pub(crate) x_anchor: CardExtension,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Provider {
    pub(crate) organization: &'static str,
    pub(crate) url: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Capabilities {
    pub(crate) streaming: bool,
    pub(crate) push_notifications: bool,
    pub(crate) state_transition_history: bool,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct SecuritySchemes {
    pub(crate) bearer: BearerScheme,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct BearerScheme {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) scheme: &'static str,
    pub(crate) description: &'static str,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct SecurityRequirement {
    pub(crate) bearer: Vec<String>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Skill {
    pub(crate) id: &'static str,
    pub(crate) name: &'static str,
    pub(crate) description: &'static str,
    pub(crate) tags: Vec<&'static str>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct CardExtension {
    pub(crate) key_endpoints: Vec<KeyEndpoint>,
    pub(crate) openapi: String,
    pub(crate) x402: String,
    /// The MCP endpoint (streamable HTTP, stateless): the reference MCP server's tools.
    pub(crate) mcp: String,
    pub(crate) log: CardLog,
    /// Areas the operator switched off (their routes answer 503 FEATURE_NOT_AVAILABLE).
    pub(crate) features_off: Vec<&'static str>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct KeyEndpoint {
    pub(crate) method: &'static str,
    pub(crate) path: &'static str,
    pub(crate) cost: &'static str,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct CardLog {
    pub(crate) origin: String,
    pub(crate) public_key: String,
    pub(crate) checkpoint: String,
    pub(crate) receipt: String,
}

/// Where x402 payments are taken, and how.
#[derive(Serialize, JsonSchema)]
pub(crate) struct X402Discovery {
    pub(crate) name: &'static str,
    pub(crate) version: &'static str,
    pub(crate) x402_supported: bool,
    pub(crate) x402_version: u8,
    pub(crate) networks: Vec<&'static str>,
    pub(crate) asset: &'static str,
    pub(crate) payment_address: String,
    pub(crate) paid_endpoints: Vec<PaidEndpoint>,
    pub(crate) trial: TrialOffer,
    pub(crate) endpoints: Endpoints,
    pub(crate) log: DiscoveryLog,
    pub(crate) documentation: String,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct PaidEndpoint {
    /// `METHOD /path`.
    pub(crate) endpoint: String,
    pub(crate) priced_by: &'static str,
    pub(crate) trial_eligible: bool,
    pub(crate) accepts_earned: bool,
    /// Whether this server serves the route yet.
    pub(crate) available: bool,
    /// The starting price in USD (`$0.01`); absent when the generation does not price it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) price_base: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) earned_pays: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<&'static str>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct TrialOffer {
    pub(crate) enabled: bool,
    pub(crate) amount_dac: Dac,
    pub(crate) period_days: i64,
    pub(crate) applies_to: Vec<String>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Endpoints {
    pub(crate) api: String,
    pub(crate) openapi: String,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct DiscoveryLog {
    pub(crate) origin: String,
    pub(crate) public_key: String,
    pub(crate) checkpoint: String,
}

// ---- over HTTP ----

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
    let public = state.settings.config.public_url.trim_end_matches('/');
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
            next: crate::areas::pricing::NextGeneration::of(&status.pricing),
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
    let base = &state.settings.config.public_url;
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
    let document = state.openapi.get_or_init(|| openapi::document(&super::operations(), &state.settings.config.public_url)).clone();
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
    let base = &state.settings.config.public_url;
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
    let base = &state.settings.config.public_url;
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
            let switched_off = !paid.available(&features);
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
        payment_address: state.settings.config.pay_to.clone(),
        paid_endpoints,
        trial: TrialOffer {
            enabled: state.settings.config.trial_grant > MilliDac::ZERO,
            amount_dac: state.settings.config.trial_grant.into(),
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
