//! discovery: the wire shapes of its operations (requests, answers) and the
//! function each runs, shared by REST (`http::discovery`) and MCP.

use crate::state::AppState;
use crate::wire::Dac;
use schemars::JsonSchema;
use serde::Serialize;
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
    pub(crate) next: Option<crate::api::pricing::NextGeneration>,
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
