//! Documents about the service itself: health, the generated OpenAPI, llms.txt,
//! the agent card and x402 discovery. All text here is this project's own.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::openapi::{self, INTERFACE_VERSION, Operation, op};
use crate::state::AppState;
use crate::wire::Dac;
use anchor_app::catalog;
use anchor_domain::MilliDac;
use anchor_x402::{NETWORK, USDC_BASE};

/// This implementation's own version.
pub const SERVICE_VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/health", get(health))
            .tag("Discovery")
            .summary("Liveness, versions and uptime")
            .extension()
            .returns::<Health>(200, "Healthy")
            .returns::<Health>(503, "Storage does not answer"),
        op(Method::GET, "/", get(root))
            .tag("Discovery")
            .summary("What this service is and where to start")
            .extension()
            .returns::<Index>(200, "Index"),
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
    ]
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum HealthStatus {
    Ok,
    Degraded,
}

#[derive(Serialize, JsonSchema)]
struct Health {
    status: HealthStatus,
    /// The interface version implemented.
    version: &'static str,
    service_version: &'static str,
    uptime_seconds: u64,
    /// sqlite or postgres.
    storage: &'static str,
    storage_reachable: bool,
    pricing_version: String,
    /// The pricing generation in force on this host, and the next one scheduled.
    pricing: PricingInfo,
    host_id: Uuid,
    log: LogInfo,
}

#[derive(Serialize, JsonSchema)]
struct PricingInfo {
    pricing_version: String,
    component_sha256: String,
    /// Its publication's activation time; null for the generation the host started with.
    effective_from: Option<String>,
    next: Option<super::pricing::NextGeneration>,
}

#[derive(Serialize, JsonSchema)]
struct LogInfo {
    origin: String,
    public_key: String,
    checkpoint_size: Option<i64>,
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
            next: super::pricing::NextGeneration::of(&status.pricing),
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

#[derive(Serialize, JsonSchema)]
struct Index {
    service: &'static str,
    version: &'static str,
    service_version: &'static str,
    start_here: String,
    openapi: String,
    llms_txt: String,
    /// The owner portal (a web page for people who manage agents).
    portal: String,
    /// The software's terms of service and privacy policy.
    terms: String,
    privacy: String,
}

async fn root(State(state): State<AppState>) -> Json<Index> {
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

/// The guide for agents (llms.txt), also served by the MCP tool get_documentation.
pub(crate) fn llms_text(state: &AppState) -> String {
    let base = &state.settings.public_url;
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
- A new agent holds 500 Trial DAC for 30 days. Trial pays DD/EE declarations (base fee and scope adds) while it lasts, each one whole or not at all: when what is left covers the base fee but not the scope adds, the create answers 402 for the whole price unless you send premium_payment_source external (Trial then pays the base fee and x402 the premium) or earned.\n\
- When nothing else pays, a paid route answers 402 with a PAYMENT-REQUIRED header. Sign it with your wallet (the official x402 client does) and send the same request again with the payload in PAYMENT-SIGNATURE (X-PAYMENT is read too).\n\n\
## Observing recorded history (ARA) and your spending (DUR)\n\
- GET {base}/v1/ara/agent/<your agent_id>/profile (also /timeline, /ee-pattern; resolution_level 1 to 3) is free for yourself. Another agent's costs a fixed observation price plus a surcharge at levels 2 and 3 (both in /v1/pricing/current), within its disclosure_level.\n\
- GET {base}/v1/ara/environment and /v1/ara/pattern/ee-distribution show all agents as counts of agents, from a release per day over the 30 whole days before today; a value fewer than 10 agents stand for is never shown, and the rest carry calibrated noise. Trial never pays ARA.\n\
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
- Every response carries RateLimit-* headers.\n"
    )
}

/// An A2A agent card.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct AgentCard {
    protocol_version: &'static str,
    name: &'static str,
    description: &'static str,
    url: String,
    preferred_transport: &'static str,
    provider: Provider,
    version: &'static str,
    documentation_url: String,
    capabilities: Capabilities,
    security_schemes: SecuritySchemes,
    security: Vec<SecurityRequirement>,
    default_input_modes: Vec<&'static str>,
    default_output_modes: Vec<&'static str>,
    skills: Vec<Skill>,
    #[serde(rename = "x-anchor")]
    x_anchor: CardExtension,
}

#[derive(Serialize, JsonSchema)]
struct Provider {
    organization: &'static str,
    url: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Capabilities {
    streaming: bool,
    push_notifications: bool,
    state_transition_history: bool,
}

#[derive(Serialize, JsonSchema)]
struct SecuritySchemes {
    bearer: BearerScheme,
}

#[derive(Serialize, JsonSchema)]
struct BearerScheme {
    #[serde(rename = "type")]
    kind: &'static str,
    scheme: &'static str,
    description: &'static str,
}

#[derive(Serialize, JsonSchema)]
struct SecurityRequirement {
    bearer: Vec<String>,
}

#[derive(Serialize, JsonSchema)]
struct Skill {
    id: &'static str,
    name: &'static str,
    description: &'static str,
    tags: Vec<&'static str>,
}

#[derive(Serialize, JsonSchema)]
struct CardExtension {
    key_endpoints: Vec<KeyEndpoint>,
    openapi: String,
    x402: String,
    /// The MCP endpoint (streamable HTTP, stateless): the reference MCP server's tools.
    mcp: String,
    log: CardLog,
    /// Areas the operator switched off (their routes answer 503 FEATURE_NOT_AVAILABLE).
    features_off: Vec<&'static str>,
}

#[derive(Serialize, JsonSchema)]
struct KeyEndpoint {
    method: &'static str,
    path: &'static str,
    cost: &'static str,
}

#[derive(Serialize, JsonSchema)]
struct CardLog {
    origin: String,
    public_key: String,
    checkpoint: String,
    receipt: String,
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

/// Where x402 payments are taken, and how.
#[derive(Serialize, JsonSchema)]
struct X402Discovery {
    name: &'static str,
    version: &'static str,
    x402_supported: bool,
    x402_version: u8,
    networks: Vec<&'static str>,
    asset: &'static str,
    payment_address: String,
    paid_endpoints: Vec<PaidEndpoint>,
    trial: TrialOffer,
    endpoints: Endpoints,
    log: DiscoveryLog,
    documentation: String,
}

#[derive(Serialize, JsonSchema)]
struct PaidEndpoint {
    /// `METHOD /path`.
    endpoint: String,
    priced_by: &'static str,
    trial_eligible: bool,
    accepts_earned: bool,
    /// Whether this server serves the route yet.
    available: bool,
    /// The starting price in USD (`$0.01`); absent when the generation does not price it.
    #[serde(skip_serializing_if = "Option::is_none")]
    price_base: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    earned_pays: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'static str>,
}

#[derive(Serialize, JsonSchema)]
struct TrialOffer {
    enabled: bool,
    amount_dac: Dac,
    period_days: i64,
    applies_to: Vec<String>,
}

#[derive(Serialize, JsonSchema)]
struct Endpoints {
    api: String,
    openapi: String,
}

#[derive(Serialize, JsonSchema)]
struct DiscoveryLog {
    origin: String,
    public_key: String,
    checkpoint: String,
}

async fn x402(State(state): State<AppState>) -> Json<X402Discovery> {
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
            enabled: true,
            amount_dac: anchor_domain::agents::TRIAL_DAC.into(),
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
