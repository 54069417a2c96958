//! Tools that run (`anchor_app::tools`), our addition to the market: the
//! seller uploads a WebAssembly component of `anchor:tool@1.0.0` for its
//! tool, and an agent that bought it runs it here on the ARA observations
//! it declared. The limits every run is held to are public.
//!
//! Its wire shapes and the function each operation runs are one set, served
//! by the route table here and by the MCP tools (`mcp/`) alike.

use crate::body::path_uuid;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, AuthAgent, Body, PaymentOffer};
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::{Dac, Id, Time};
use crate::x402_headers::with_settlement;
use anchor_app::tools::{self, RunAsk};
use anchor_domain::records::{ComponentRecord, RunRecord};
use anchor_domain::tools::ToolLimits;
use axum::Json;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

/// The bounds every run is held to on this host, and how its slots are shared.
#[derive(Serialize, JsonSchema)]
pub(crate) struct RunLimitsView {
    /// The largest component accepted, in bytes.
    pub(crate) component_bytes: usize,
    /// Instructions (wasmtime fuel, about one per WebAssembly operator) per run.
    pub(crate) fuel_per_run: u64,
    pub(crate) wall_clock_ms_per_run: u64,
    /// Linear memory a run may hold: all the memories of all the component's
    /// instances together, counted before anything is allocated.
    pub(crate) memory_bytes_per_run: usize,
    /// Table elements a run may hold, all its tables together.
    pub(crate) table_elements_per_run: usize,
    /// Core instances a component may create (each of a language runtime's counts).
    pub(crate) core_instances_per_component: usize,
    /// Linear memories its instances may define, together.
    pub(crate) memories_per_component: usize,
    /// Tables its instances may define, together.
    pub(crate) tables_per_component: usize,
    /// The report's size: its strings plus eight bytes per number.
    pub(crate) output_bytes: usize,
    pub(crate) max_metrics: usize,
    pub(crate) max_columns: usize,
    pub(crate) max_rows: usize,
    pub(crate) max_values_per_row: usize,
    pub(crate) max_text_bytes: usize,
    /// Runs at once on one host, all agents together; past them a run waits
    /// a few seconds in line, then gets 503 TOOL_RUNNER_BUSY with Retry-After.
    pub(crate) concurrent_runs: usize,
    /// Runs at once of one agent on one host; past them its runs wait in
    /// its own line, then get 429 RATE_LIMITED.
    pub(crate) concurrent_runs_per_agent: usize,
    /// Uploads a tool takes in a UTC day (the same bytes again and refused components count).
    pub(crate) uploads_per_tool_per_day: i64,
    /// Uploads a seller makes in a UTC day, all its tools together.
    pub(crate) uploads_per_seller_per_day: i64,
}

impl From<ToolLimits> for RunLimitsView {
    fn from(l: ToolLimits) -> RunLimitsView {
        RunLimitsView {
            component_bytes: l.component_bytes,
            fuel_per_run: l.fuel,
            wall_clock_ms_per_run: l.wall_ms,
            memory_bytes_per_run: l.memory_bytes,
            table_elements_per_run: l.table_elements,
            core_instances_per_component: l.instances,
            memories_per_component: l.memories,
            tables_per_component: l.tables,
            output_bytes: l.output_bytes,
            max_metrics: l.max_metrics,
            max_columns: l.max_columns,
            max_rows: l.max_rows,
            max_values_per_row: l.max_values_per_row,
            max_text_bytes: l.max_text_bytes,
            concurrent_runs: l.concurrent_runs,
            concurrent_runs_per_agent: l.runs_per_agent,
            uploads_per_tool_per_day: tools::UPLOADS_PER_DAY,
            uploads_per_seller_per_day: tools::UPLOADS_PER_SELLER_PER_DAY,
        }
    }
}

// ---- over HTTP ----

const TAG: &str = "TSL runtime";

/// The largest upload body: the largest component, and room for nothing else.
pub const UPLOAD_BODY_LIMIT: usize = ToolLimits::DEFAULT.component_bytes + (64 << 10);

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::PUT, "/v1/tsl/tool/{tool_id}/component", put(upload).layer(DefaultBodyLimit::max(UPLOAD_BODY_LIMIT)))
            .tag(TAG)
            .summary("Upload the WebAssembly component that runs your tool (the body is the .wasm file)")
            .describe(
                "The component must implement the world anchor:tool/tool@1.0.0 (wit/tool@1.0.0 in the service's repository) and \
                 import no capability: no filesystem, network, clock or randomness (a standard library's wasi:cli and wasi:io \
                 imports are accepted and fail the run if called). It is compiled once, on upload. Each upload becomes the tool's \
                 next version; the same bytes again change nothing (200). Buyers run the latest version. The tool may declare \
                 only the observations tools can receive (GET /v1/tsl/runtime lists them). An upload is let in before its body is \
                 read: the tool must be yours and take components, with uploads left in the day's quota, and it takes one of the \
                 host's four upload places (a seller has one at a time); a refusal then closes the connection. Once its bytes \
                 have arrived, the upload counts against the quota before anything is compiled. A component is compiled once \
                 per host, on a pool of its own.",
            )
            .extension()
            .agent()
            .path::<Uuid>("tool_id")
            .takes_bytes("application/wasm")
            .returns::<ComponentView>(201, "A new version of the tool's component")
            .returns::<ComponentView>(200, "The tool's current component is this one already")
            .error(
                400,
                "Not a component, one that imports a capability, one that does not implement the world, one over the run limits \
                 (core instances, memories, tables, or what they start with), or too large.",
                &[
                    "INVALID_UUID",
                    "COMPONENT_INVALID",
                    "COMPONENT_FORBIDDEN_IMPORT",
                    "COMPONENT_WRONG_WORLD",
                    "COMPONENT_OVER_LIMITS",
                    "COMPONENT_TOO_LARGE",
                ],
            )
            .error(403, "You do not sell the tool.", &["NOT_TOOL_OWNER"])
            .error(404, "No such tool.", &["TOOL_NOT_FOUND"])
            .error(
                409,
                "The tool is defunct, or declares an observation tools cannot receive yet.",
                &["TOOL_NOT_AVAILABLE", "TOOL_INPUT_UNSUPPORTED"],
            )
            .error(415, "The body is not sent as application/wasm (or application/octet-stream).", &["UNSUPPORTED_MEDIA_TYPE"])
            .error(
                413,
                "The body is over the largest component accepted (GET /v1/tsl/runtime), refused from its Content-Length before it is read.",
                &["PAYLOAD_TOO_LARGE"],
            )
            .error(
                429,
                "The tool had its uploads for the day (10), or its seller (30, all its tools together), and Retry-After says when the \
                 day turns; or the seller has an upload under way on this host already.",
                &["RATE_LIMITED"],
            )
            .error(
                503,
                "The host's upload places stayed taken, or another component is compiling and the line is full; Retry-After says when \
                 to try again.",
                &["TOOL_RUNNER_BUSY"],
            ),
        op(Method::GET, "/v1/tsl/tool/{tool_id}/component", get(component))
            .tag(TAG)
            .summary("The tool's current component: version, SHA-256 and size (public)")
            .extension()
            .path::<Uuid>("tool_id")
            .returns::<ComponentView>(200, "The current component")
            .error(400, "tool_id is not a UUID.", &["INVALID_UUID"])
            .error(404, "No such tool.", &["TOOL_NOT_FOUND"])
            .error(409, "The tool has no component: it is a listing only.", &["TOOL_NOT_RUNNABLE"]),
        op(Method::POST, "/v1/tsl/tool/{tool_id}/run", post(run))
            .tag(TAG)
            .summary("Run a tool you bought (or sell) on the ARA observations it declared")
            .describe(
                "The observations are made on your behalf, with ARA's own gates and prices: your own agent-level observations \
                 are free, another agent's (subject_agent_id) are limited by its disclosure level and paid, environment and \
                 pattern releases are paid. With a price above zero and no payment, the answer is the 402 challenge and nothing \
                 runs; with a payment, the tool runs first and the payment settles only if the run succeeds. A failed run is \
                 422 with the reason as its code, and nothing is charged. The report is returned, never stored: the service \
                 keeps only the run's metadata (GET /v1/tsl/runs).",
            )
            .extension()
            .agent()
            .path::<Uuid>("tool_id")
            .takes::<RunRequest>(json!({ "subject_agent_id": "7d2f6c78-ac79-4a6e-9c51-4b5e6f708192" }))
            .returns::<RunView>(200, "The tool's report")
            .error(400, "A malformed id, field or payment header.", &["INVALID_UUID", "UNKNOWN_FIELD", "INVALID_PAYLOAD", "INVALID_VALUE"])
            .error(
                403,
                "You did not buy the tool; the subject's disclosure level does not reach an observation; the DAB.",
                &["TOOL_NOT_PURCHASED", "DISCLOSURE_CAP_EXCEEDED", "DAB_LIMIT_REACHED"],
            )
            .error(
                404,
                "No such tool or subject, or an observation has nothing to show.",
                &["TOOL_NOT_FOUND", "AGENT_NOT_FOUND", "DATA_UNAVAILABLE"],
            )
            .error(
                409,
                "The tool has no component, or declares an observation tools cannot receive.",
                &["TOOL_NOT_RUNNABLE", "TOOL_INPUT_UNSUPPORTED"],
            )
            .error(
                422,
                "The run failed; the code names why. Nothing was charged.",
                &[
                    "TOOL_OUT_OF_FUEL",
                    "TOOL_DEADLINE",
                    "TOOL_OUT_OF_MEMORY",
                    "TOOL_OUTPUT_TOO_LARGE",
                    "TOOL_TRAPPED",
                    "TOOL_REFUSED",
                    "TOOL_UNAVAILABLE",
                ],
            )
            .paid_inline("The run's observations cost something and no payment came, or it was refused (the reason is in `error`).")
            .error(
                429,
                "You already have your run(s) under way on this host (GET /v1/tsl/runtime); Retry-After says when to try again.",
                &["RATE_LIMITED"],
            )
            .error(
                503,
                "Every tool slot of this host is busy and so is its line (Retry-After), or the settlement's outcome is unknown.",
                &["TOOL_RUNNER_BUSY", "SETTLEMENT_PENDING"],
            ),
        op(Method::GET, "/v1/tsl/runtime", get(runtime))
            .tag(TAG)
            .summary("The bounds every tool run is held to, and what tools may receive (public)")
            .extension()
            .returns::<RuntimeView>(200, "Runtime limits"),
        op(Method::GET, "/v1/tsl/runs", get(runs))
            .tag(TAG)
            .summary("Your tool runs, newest first: metadata only, never their input or output")
            .extension()
            .agent()
            .query::<RunsQuery>()
            .returns::<RunList>(200, "Runs")
            .error(400, "limit outside 1 to 100, or a negative offset.", &["INVALID_VALUE"]),
    ]
}

#[derive(Serialize, JsonSchema)]
struct ComponentView {
    tool_id: Id,
    version: i32,
    /// Hex SHA-256 of the component's bytes.
    sha256: String,
    size_bytes: i64,
    uploaded_at: Time,
    /// Its imports (none of them a capability).
    #[serde(skip_serializing_if = "Option::is_none")]
    imports: Option<Vec<String>>,
}

impl ComponentView {
    fn of(c: &ComponentRecord, imports: Option<Vec<String>>) -> ComponentView {
        ComponentView {
            tool_id: Id(c.tool_id),
            version: c.version,
            sha256: hex::encode(c.sha256),
            size_bytes: c.size,
            uploaded_at: c.uploaded_at.into(),
            imports,
        }
    }
}

/// 415 unless the body is sent as a component (`application/wasm`, or
/// `application/octet-stream`).
fn wasm_media(request: &Request) -> ApiResult<()> {
    let media = request.headers().get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let media = media.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if media != "application/wasm" && media != "application/octet-stream" {
        return Err(ApiError::Protocol {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: "UNSUPPORTED_MEDIA_TYPE",
            message: "send the component's bytes with Content-Type: application/wasm".into(),
            allow: None,
        });
    }
    Ok(())
}

/// The upload is let in (the agent's token, the seller's tool, the quota, a
/// place on this host) before a byte of its body is read; every refusal
/// before it leaves the body to be read and thrown away, and closes the
/// connection.
async fn upload(
    State(state): State<AppState>,
    agent: Result<AuthAgent, ApiError>,
    tool_id: Result<ApiPath<String>, ApiError>,
    request: Request,
) -> ApiResult<Response> {
    // (The request itself stays out of the future: its body is not Sync.)
    let media = wasm_media(&request);
    let declared =
        request.headers().get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    let admission = async {
        let AuthAgent(agent) = agent?;
        let ApiPath(tool_id) = tool_id?;
        let tool_id = path_uuid("tool_id", &tool_id)?;
        media?;
        Ok::<_, ApiError>(tools::admit_upload(&state.app, &agent, tool_id, declared).await?)
    };
    let admitted = match admission.await {
        Ok(admitted) => admitted,
        Err(refused) => {
            let (_, body) = request.into_parts();
            // The body's own deadline (the listener's body timeout) ends this sooner.
            tokio::spawn(crate::listener::discard(body, std::time::Duration::from_secs(300)));
            let mut response = refused.into_response();
            response.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
            return Ok(response);
        }
    };
    // The body arrives at the upload rate or not at all: a trickled body
    // frees its place within seconds (decision 0063).
    let max = admitted.max_bytes(&state.app.tools.limits());
    let deadline = state.app.tools.upload_deadline(declared, max);
    let body = http_body_util::Limited::new(request.into_body(), max as usize);
    let wasm = match tokio::time::timeout(deadline, http_body_util::BodyExt::collect(body)).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => {
            return Err(ApiError::Protocol {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                code: "PAYLOAD_TOO_LARGE",
                message: format!("a component is at most {max} bytes here (its Content-Length chose the lane)"),
                allow: None,
            });
        }
        Ok(Err(error)) if crate::listener::is_body_timeout(error.as_ref()) => return Err(crate::extract::body_timeout()),
        Ok(Err(_)) => return Err(ApiError::bad("INVALID_INPUT", "the request body could not be read")),
        Err(_) => {
            let mut refused = ApiError::Protocol {
                status: StatusCode::REQUEST_TIMEOUT,
                code: "REQUEST_TIMEOUT",
                message: format!(
                    "the component did not arrive within {:.1} s: an upload's bytes must come at {} KiB/s or more",
                    deadline.as_secs_f64(),
                    tools::UPLOAD_MIN_BYTES_PER_SEC / 1024
                ),
                allow: None,
            }
            .into_response();
            refused.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
            return Ok(refused);
        }
    };
    let uploaded = tools::upload(&state.app, admitted, Vec::from(wasm)).await?;
    let status = if uploaded.unchanged { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(ComponentView::of(&uploaded.component, Some(uploaded.imports)))).into_response())
}

async fn component(State(state): State<AppState>, ApiPath(tool_id): ApiPath<String>) -> ApiResult<Json<ComponentView>> {
    let component = tools::component(&state.app, path_uuid("tool_id", &tool_id)?).await?;
    Ok(Json(ComponentView::of(&component, None)))
}

#[derive(Default, Deserialize, JsonSchema)]
struct RunRequest {
    /// The agent the tool's agent-level observations look at; yourself when left out.
    subject_agent_id: Option<Id>,
}

#[derive(Serialize, JsonSchema)]
struct MetricView {
    name: String,
    /// The value in fixed point: value / 10^scale.
    value: i64,
    scale: u8,
}

#[derive(Serialize, JsonSchema)]
struct RowView {
    label: String,
    values: Vec<i64>,
}

#[derive(Serialize, JsonSchema)]
struct ReportView {
    metrics: Vec<MetricView>,
    columns: Vec<String>,
    rows: Vec<RowView>,
}

#[derive(Serialize, JsonSchema)]
struct RunView {
    run_id: Id,
    tool_id: Id,
    version: i32,
    sha256: String,
    report: ReportView,
    /// Observations the tool received.
    observations: usize,
    /// Instructions (fuel) the run used.
    fuel_used: u64,
    /// The most linear memory the run held at once, all memories together.
    memory_bytes: usize,
    wall_ms: f64,
    output_bytes: usize,
    /// What the observations cost, paid over x402 (0 when all were free).
    dac_charged: Dac,
}

async fn run(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    ApiPath(tool_id): ApiPath<String>,
    Body(request): Body<Option<RunRequest>>,
) -> ApiResult<Response> {
    let tool_id = path_uuid("tool_id", &tool_id)?;
    let request = request.unwrap_or_default();
    let done = tools::run(&state.app, &agent, tool_id, RunAsk { subject: request.subject_agent_id.map(|s| s.0), offered }).await?;
    let view = RunView {
        run_id: Id(done.run_id),
        tool_id: Id(tool_id),
        version: done.version,
        sha256: hex::encode(done.sha256),
        report: ReportView {
            metrics: done.report.metrics.into_iter().map(|m| MetricView { name: m.name, value: m.value, scale: m.scale }).collect(),
            columns: done.report.columns,
            rows: done.report.rows.into_iter().map(|r| RowView { label: r.label, values: r.values }).collect(),
        },
        observations: done.observations,
        fuel_used: done.stats.fuel_used,
        memory_bytes: done.stats.memory_bytes,
        wall_ms: (done.stats.wall.as_micros() as f64) / 1000.0,
        output_bytes: done.stats.output_bytes,
        dac_charged: done.charged.into(),
    };
    Ok(with_settlement(Json(view).into_response(), done.settlement.as_ref()))
}

#[derive(Serialize, JsonSchema)]
struct RuntimeView {
    /// The WIT world a component implements.
    world: &'static str,
    #[serde(flatten)]
    limits: RunLimitsView,
    /// Imports a component may have; anything else is refused at upload.
    allowed_imports: Vec<&'static str>,
    /// The observation types a tool can receive.
    observation_types: Vec<&'static str>,
}

async fn runtime(State(state): State<AppState>) -> Json<RuntimeView> {
    Json(RuntimeView {
        world: "anchor:tool/tool@1.0.0",
        limits: RunLimitsView::from(state.app.tools.limits()),
        allowed_imports: vec!["anchor:tool/types@1.0.0", "wasi:cli/* (trapped)", "wasi:io/* (trapped)"],
        observation_types: anchor_app::ara::for_tools::SUPPORTED.iter().map(|k| k.as_str()).collect(),
    })
}

#[derive(Deserialize, JsonSchema)]
struct RunsQuery {
    #[schemars(extend("default" = 20, "minimum" = 1, "maximum" = 100))]
    limit: Option<i64>,
    #[schemars(extend("default" = 0, "minimum" = 0))]
    offset: Option<i64>,
}

#[derive(Serialize, JsonSchema)]
struct RunItem {
    run_id: Id,
    tool_id: Id,
    version: i32,
    sha256: String,
    started_at: Time,
    wall_ms: f64,
    /// ok, a failure's reason (out_of_fuel, deadline, out_of_memory, output_too_large, trap, tool_error, unavailable) or payment_refused.
    outcome: String,
    fuel_used: Option<i64>,
    output_bytes: Option<i64>,
    dac_charged: Dac,
    payment_id: Option<Id>,
}

impl From<&RunRecord> for RunItem {
    fn from(r: &RunRecord) -> RunItem {
        RunItem {
            run_id: Id(r.run_id),
            tool_id: Id(r.tool_id),
            version: r.version,
            sha256: hex::encode(r.sha256),
            started_at: r.started_at.into(),
            wall_ms: r.wall_micros as f64 / 1000.0,
            outcome: r.outcome.clone(),
            fuel_used: r.fuel_used,
            output_bytes: r.output_bytes,
            dac_charged: r.charged.into(),
            payment_id: r.payment_id.map(Id),
        }
    }
}

#[derive(Serialize, JsonSchema)]
struct RunList {
    runs: Vec<RunItem>,
    total: i64,
    limit: i64,
    offset: i64,
}

async fn runs(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiQuery(query): ApiQuery<RunsQuery>,
) -> ApiResult<Json<RunList>> {
    let page = tools::runs(&state.app, &agent, query.limit, query.offset).await?;
    Ok(Json(RunList { runs: page.items.iter().map(RunItem::from).collect(), total: page.total, limit: page.limit, offset: page.offset }))
}
