//! The MCP endpoint (`POST /mcp`): the reference MCP server's tools, served
//! by this host over MCP's streamable HTTP transport (the official Rust SDK,
//! `rmcp`), stateless, with JSON answers.
//!
//! A tool is a second front end to the same use cases as the REST routes: it
//! reads its arguments into the route's request type, calls the function the
//! route calls (which calls the application layer) and answers with the
//! body the route would send, as structured content. Nothing goes through
//! HTTP twice. A refusal is a tool error carrying the route's status and
//! JSON error (a payment requirement carries the x402 challenge and how to
//! retry with `payment_signature`); a call that does not fit the tool's
//! input schema (unknown tool, unknown or missing argument, wrong type or
//! value outside an enum) is a JSON-RPC invalid-params error.
//!
//! The `Host` header must name the public URL's host or a loopback name
//! (DNS-rebinding protection, enforced by the SDK). The whole router's
//! layers (rate limit, body limit, protocol limits) apply to `/mcp` as to
//! every route.
//!
//! In front of the SDK, [`front`] reads the body itself (within the body
//! limit and deadline) and answers what is not a JSON-RPC request as
//! JSON-RPC does: -32700 for what is not JSON, -32600 for JSON that is not a
//! request, -32602 for a tool call whose params do not fit. Every other
//! refusal at the HTTP level (406, 408, 413, 415, 405, 403) is a JSON-RPC
//! error object too, with the service's `error_code` in
//! its `data`; none is ever a 5xx. Every answer says `Cache-Control:
//! no-store`: `register_agent` returns the new agent's token and recovery
//! key.

mod tools;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, CreateTaskResult, DetailedTask, GetTaskParams,
    GetTaskResult, Implementation, ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities, ServerConfig, Task,
    TaskPayload, TaskStatus, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::state::AppState;

/// The tools with their input schemas (the reference's argument names,
/// types, enums, defaults and required lists; our own descriptions).
const TOOLS: &str = include_str!("tools.json");

/// The MCP server for one request (stateless: made afresh each time).
#[derive(Clone)]
pub struct Mcp {
    state: AppState,
    tools: Arc<Vec<Tool>>,
}

/// The tools as listed.
pub fn tools() -> Vec<Tool> {
    let listed: Value = serde_json::from_str(TOOLS).expect("mcp/tools.json is JSON");
    listed["tools"]
        .as_array()
        .expect("mcp/tools.json lists tools")
        .iter()
        .map(|tool| {
            let name = tool["name"].as_str().expect("a tool has a name").to_string();
            let description = tool["description"].as_str().expect("a tool has a description").to_string();
            let Value::Object(schema) = tool["inputSchema"].clone() else { panic!("{name}: inputSchema is an object") };
            Tool::new(name, description, Arc::new(schema))
        })
        .collect()
}

/// The hosts a request's `Host` header may name: loopback, and the public URL's.
pub fn allowed_hosts(public_url: &str) -> Vec<String> {
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string(), "[::1]".to_string()];
    if let Ok(url) = public_url.parse::<axum::http::Uri>()
        && let Some(authority) = url.authority()
    {
        hosts.push(authority.host().to_string());
        hosts.push(authority.as_str().to_string());
    }
    hosts
}

/// `/mcp`, for the application's router.
pub fn router(state: AppState) -> axum::Router<AppState> {
    let sdk = service(state.clone());
    let limit = state.settings.http.max_body_bytes;
    axum::Router::new().route(
        "/mcp",
        axum::routing::any(move |request: axum::extract::Request| {
            let sdk = sdk.clone();
            async move { front(sdk, limit, request).await }
        }),
    )
}

/// A JSON-RPC error answer (`id` null unless the request's could be read).
/// Its `data.status` is the status a REST route would answer: a refusal
/// sent with HTTP 200 (invalid params, as JSON-RPC does) says 400.
fn rpc_error(status: StatusCode, rpc_code: i32, error_code: &str, message: &str, id: Value) -> Response {
    let data_status = if status.is_success() { 400 } else { status.as_u16() };
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": rpc_code, "message": message, "data": { "error_code": error_code, "status": data_status } },
    });
    let mut response = (status, axum::Json(body)).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Reads the body (408, 413 and what is not JSON-RPC answered here, as
/// JSON-RPC errors), hands the request to the SDK, and turns any answer of
/// the SDK's that is not JSON into one.
async fn front(mut sdk: StreamableHttpService<Mcp, NeverSessionManager>, limit: usize, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    let request = if parts.method == axum::http::Method::POST {
        let bytes = match read_limited(body, limit).await {
            Ok(bytes) => bytes,
            Err(Unread::TooLarge) => {
                return rpc_error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    -32600,
                    "PAYLOAD_TOO_LARGE",
                    &format!("the request body is over the {limit} bytes this service accepts"),
                    Value::Null,
                );
            }
            Err(Unread::Timeout) => {
                return rpc_error(
                    StatusCode::REQUEST_TIMEOUT,
                    -32000,
                    "REQUEST_TIMEOUT",
                    "the request body did not arrive in time; send it whole, then wait for the answer",
                    Value::Null,
                );
            }
            Err(Unread::Broken) => {
                return rpc_error(StatusCode::BAD_REQUEST, -32700, "INVALID_INPUT", "the request body could not be read", Value::Null);
            }
        };
        let value: Value = match serde_json::from_slice(&bytes) {
            Ok(value) => value,
            Err(error) => {
                return rpc_error(StatusCode::BAD_REQUEST, -32700, "INVALID_INPUT", &format!("Parse error: {error}"), Value::Null);
            }
        };
        let id = value.get("id").filter(|id| id.is_string() || id.is_number()).cloned().unwrap_or(Value::Null);
        // A key named twice (in the envelope or a tool's arguments, an
        // auth_token say) would be read as its last value here and perhaps as
        // its first by whatever checked the request before.
        if (value.is_object() || value.is_array())
            && let Err(repeated) = crate::extract::no_repeated_keys(&bytes)
        {
            return rpc_error(StatusCode::BAD_REQUEST, -32600, "INVALID_INPUT", &format!("Invalid request: {repeated}"), id);
        }
        // Read as the SDK reads it, from the text: an integer past 64 bits
        // is then kept exactly, as REST keeps it (a value read back from
        // `value` would not be).
        if let Err(error) = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(&bytes) {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                -32600,
                "INVALID_INPUT",
                &format!("Invalid request: not a JSON-RPC 2.0 request, notification or response of MCP: {error}"),
                id,
            );
        }
        // A tool call or an initialize whose params do not fit (a tool's
        // arguments not an object, no name; no protocol version) would reach
        // the SDK as a method of its own, and be answered "method not
        // found": it is a call with invalid params. (A notification, with
        // no id, is answered nothing.)
        if let Some(method) = value.get("method").and_then(Value::as_str).filter(|_| value.get("id").is_some())
            && let Err(error) = required_params_fit(method, &bytes)
        {
            return rpc_error(StatusCode::OK, -32602, "INVALID_INPUT", &format!("Invalid params for {method}: {error}"), id);
        }
        axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))
    } else {
        axum::extract::Request::from_parts(parts, body)
    };
    let response = match tower::Service::call(&mut sdk, request).await {
        Ok(response) => response.map(axum::body::Body::new),
        Err(never) => match never {},
    };
    let json = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| {
        let v = v.to_ascii_lowercase();
        v.starts_with("application/json") || v.starts_with("text/event-stream")
    });
    if response.status().is_success() || json {
        let mut response = with_error_code(response).await;
        response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return response;
    }
    // The SDK's own refusals are plain text: the same, as JSON-RPC errors.
    let status = response.status();
    let allow = response.headers().get(header::ALLOW).cloned();
    let text = axum::body::to_bytes(response.into_body(), 64 << 10).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).into_owned();
    let (status, code) = match status {
        StatusCode::NOT_ACCEPTABLE => (status, "NOT_ACCEPTABLE"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (status, "UNSUPPORTED_MEDIA_TYPE"),
        StatusCode::PAYLOAD_TOO_LARGE => (status, "PAYLOAD_TOO_LARGE"),
        StatusCode::METHOD_NOT_ALLOWED => (status, "METHOD_NOT_ALLOWED"),
        StatusCode::FORBIDDEN => (status, "FORBIDDEN"),
        StatusCode::NOT_FOUND => (status, "NOT_FOUND"),
        s if s.is_server_error() => {
            tracing::error!(status = s.as_u16(), text = %anchor_domain::brief(&text), "the MCP SDK failed a request");
            (s, "INTERNAL_ERROR")
        }
        // Any other client error the SDK names, as a bad request.
        s => (s, "INVALID_INPUT"),
    };
    let rpc_code = if status.is_server_error() { -32603 } else { -32600 };
    let mut answer = rpc_error(status, rpc_code, code, text.trim(), Value::Null);
    if let Some(allow) = allow {
        answer.headers_mut().insert(header::ALLOW, allow);
    }
    answer
}

/// The SDK's own JSON-RPC errors (a method or a tool it does not know)
/// carry no `error_code`, and a tool's arguments refused by its schema no
/// status: the same errors, with the code and status every other refusal
/// here carries in its `data`. Other answers pass unchanged.
async fn with_error_code(response: Response) -> Response {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("application/json"));
    if !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return rpc_error(StatusCode::INTERNAL_SERVER_ERROR, -32603, "INTERNAL_ERROR", "the answer could not be read", Value::Null);
    };
    let pass = |parts, bytes| Response::from_parts(parts, axum::body::Body::from(bytes));
    if !top_level(&bytes).is_ok_and(|answer| answer.contains_key("error")) {
        return pass(parts, bytes);
    }
    let Ok(mut answer) = serde_json::from_slice::<Value>(&bytes) else { return pass(parts, bytes) };
    let Some(error) = answer.get_mut("error").and_then(Value::as_object_mut) else { return pass(parts, bytes) };
    let data = error.get("data");
    if data.and_then(|data| data.get("error_code")).is_some() && data.and_then(|data| data.get("status")).is_some() {
        return pass(parts, bytes);
    }
    let rpc_code = error.get("code").and_then(Value::as_i64);
    let (error_code, status) = match rpc_code {
        Some(-32601) => ("NOT_FOUND", 404),
        Some(-32603) => ("INTERNAL_ERROR", 500),
        _ => ("INVALID_INPUT", 400),
    };
    if rpc_code == Some(-32601)
        && let Some(Value::String(method)) = error.get("message").cloned()
    {
        error.insert("message".into(), Value::String(format!("Method not found: {method}")));
    }
    match error.get_mut("data") {
        // (A tool's arguments refused by its schema carry their own code.)
        Some(Value::Object(data)) => {
            data.entry("error_code").or_insert(error_code.into());
            data.entry("status").or_insert(status.into());
        }
        _ => {
            error.insert("data".into(), serde_json::json!({ "error_code": error_code, "status": status }));
        }
    }
    let body = serde_json::to_vec(&answer).unwrap_or_else(|_| bytes.to_vec());
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// Whether the params of a request of `method` that must have params
/// (tools/call, initialize) have the shape the method takes, read from the
/// request's text as the SDK reads them.
fn required_params_fit(method: &str, request: &[u8]) -> Result<(), serde_json::Error> {
    let top = top_level(request)?;
    let params = top.get("params").map_or("null", |raw| raw.get());
    match method {
        "tools/call" => serde_json::from_str::<rmcp::model::CallToolRequestParams>(params).map(drop),
        "initialize" => serde_json::from_str::<rmcp::model::InitializeRequestParams>(params).map(drop),
        _ => Ok(()),
    }
}

/// A JSON object's members, each left as its text (nothing below the top
/// is read into values).
fn top_level(json: &[u8]) -> Result<std::collections::HashMap<std::borrow::Cow<'_, str>, &serde_json::value::RawValue>, serde_json::Error> {
    serde_json::from_slice(json)
}

/// Why a body was not read whole.
enum Unread {
    TooLarge,
    Timeout,
    Broken,
}

/// The body, whole, if it is at most `limit` bytes and arrives in time.
async fn read_limited(body: axum::body::Body, limit: usize) -> Result<axum::body::Bytes, Unread> {
    use http_body_util::BodyExt;
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(Unread::TooLarge),
        Err(error) if crate::listener::is_body_timeout(error.as_ref()) => Err(Unread::Timeout),
        Err(_) => Err(Unread::Broken),
    }
}

/// The service mounted at `/mcp`.
pub fn service(state: AppState) -> StreamableHttpService<Mcp, NeverSessionManager> {
    let tools = Arc::new(tools());
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        // The router's body limit does not reach a mounted service: the SDK keeps its own.
        .with_max_request_body_bytes(state.settings.http.max_body_bytes)
        .with_allowed_hosts(allowed_hosts(&state.settings.config.public_url));
    StreamableHttpService::new(
        move || Ok(Mcp { state: state.clone(), tools: tools.clone() }),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

impl ServerHandler for Mcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tasks().build())
            .with_server_info(Implementation::new("anchor", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Accountability anchoring for agents: declare decisions (create_decision, then confirm_decision) with the scope of \
                 accountability you accept; get_documentation explains costs and payments. Pass auth_token, or send \
                 Authorization: Bearer on the MCP request.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items((*self.tools).clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, ErrorData> {
        let Some(tool) = self.tools.iter().find(|t| t.name == request.name) else {
            return Err(ErrorData::invalid_params(format!("no tool named {}", anchor_domain::brief(&request.name)), None));
        };
        let arguments = request.arguments.unwrap_or_default();
        let holds_tasks = context.client_capabilities().is_some_and(|capabilities| capabilities.supports_tasks());
        check_arguments(tool, &arguments).map_err(|(code, message)| {
            // The code REST gives the same fault, as the envelope's refusals carry theirs.
            ErrorData::invalid_params(format!("{}: {message}", tool.name), Some(serde_json::json!({ "error_code": code })))
        })?;
        let parts = context.extensions.get::<axum::http::request::Parts>();
        // The caller's trace context: `_meta.traceparent` (SEP-414), else the
        // HTTP request's header.
        // (The SDK moves the request's `_meta` into the context.)
        let meta = request.meta.as_ref().and_then(|meta| meta.get_traceparent()).or_else(|| context.meta.get_traceparent());
        let trace = match meta {
            Some(value) => anchor_domain::trace::TraceId::from_traceparent(value),
            None => parts.and_then(|parts| crate::extract::TraceParent::of(&parts.headers).0),
        };
        let bearer = parts
            .and_then(|parts| parts.headers.get(axum::http::header::AUTHORIZATION))
            .and_then(|value| value.to_str().ok())
            .and_then(crate::extract::bearer_token)
            .map(str::to_string);
        // The SDK runs the call on a task of its own: it gets its own one-generation scope.
        let started = std::time::SystemTime::now();
        let outcome = self.state.app.schedule.in_one_generation(tools::call(&self.state, &tool.name, arguments, bearer, trace)).await;
        let settled = outcome.as_ref().ok().and_then(|answer| Some((answer.settlement.clone()?, answer.settled_at)));
        let mut result = tools::render(outcome).await;
        // x402's MCP transport: the settlement, with its signed receipt (the
        // one a PAYMENT-RESPONSE header would carry), in the result's _meta.
        if let Some((settlement, at)) = settled {
            let at = at.unwrap_or_else(|| self.state.app.clock.now());
            let mut meta = Map::new();
            meta.insert(X402_PAYMENT_RESPONSE.into(), crate::x402_headers::settlement_response(&self.state.app, &settlement, at));
            result.meta = Some(MetaObject(meta));
        }
        // The tool call's span, under the HTTP request's (OpenTelemetry's
        // MCP and GenAI conventions: `tools/call {tool}`, execute_tool).
        let parent = parts.and_then(|parts| parts.extensions.get::<crate::otlp::SpanContext>()).copied();
        if let (Some(exporter), Some(parent)) = (&self.state.spans, parent) {
            exporter.record(crate::otlp::Span::tool_call(parent, started, &tool.name, result.is_error == Some(true)));
        }
        // Waiting is the honest answer to "confirm, and tell me when it is
        // witnessed": a client that holds tasks gets one (decision 0071).
        if holds_tasks
            && tool.name == "confirm_decision"
            && result.is_error != Some(true)
            && let Some(task) = self.wait_task(&result).await
        {
            return Ok(CallToolResponse::Task(task));
        }
        Ok(result.into())
    }

    async fn get_task(&self, request: GetTaskParams, _context: RequestContext<RoleServer>) -> Result<GetTaskResult, ErrorData> {
        let now = rfc3339(self.state.app.clock.now());
        let state = match self.task_state(&request.task_id).await? {
            Ok(state) => state,
            // The record went (de-identified past its retention, say): the
            // wait ends with the refusal the receipt route gives.
            Err(refused) => {
                let task = Task::new(request.task_id, TaskStatus::Completed, now.clone(), now);
                let result = tools::render(Err(tools::Failure::Refused(crate::error::ApiError::App(refused)))).await;
                return Ok(GetTaskResult::new(DetailedTask::new(task, TaskPayload::Completed { result: tool_result(result) })));
            }
        };
        let created = rfc3339(state.confirmed_at);
        let task = Task::new(request.task_id, TaskStatus::Working, created, now);
        use anchor_app::tasks::Waited;
        let detailed = match state.waited {
            Waited::Working { declared, reached } => DetailedTask::new(
                task.with_poll_interval_ms(POLL_MS).with_status_message(format!(
                    "confirmed; the receipt reaches {} so far, {} is declared",
                    reached.map_or("no signed checkpoint", |level| level.as_str()),
                    declared.as_str()
                )),
                TaskPayload::Working,
            ),
            Waited::Reached(receipt) => {
                let value = serde_json::json!({ "dd_id": state.dd_id, "receipt": receipt });
                DetailedTask::new(task, TaskPayload::Completed { result: tool_result(CallToolResult::structured(value)) })
            }
            Waited::OutOfReach { declared, reachable, receipt } => {
                let value = serde_json::json!({
                    "status": 409,
                    "error_code": "INTEGRITY_LEVEL_UNREACHABLE",
                    "message": format!(
                        "the declared integrity level {} is beyond what this service reaches ({}): the receipt below is as far as it goes",
                        declared.as_str(),
                        reachable.as_str()
                    ),
                    "dd_id": state.dd_id,
                    "receipt": receipt,
                });
                DetailedTask::new(task, TaskPayload::Completed { result: tool_result(CallToolResult::structured_error(value)) })
            }
        };
        Ok(GetTaskResult::new(detailed))
    }

    async fn cancel_task(&self, request: CancelTaskParams, _context: RequestContext<RoleServer>) -> Result<(), ErrorData> {
        // The confirmation stands and the receipt comes regardless: there is
        // nothing to stop, and the task goes on reporting the receipt.
        self.task_state(&request.task_id).await.map(|_| ())
    }
}

/// The `_meta` key of a tool result's x402 settlement (x402's MCP transport).
const X402_PAYMENT_RESPONSE: &str = "x402/payment-response";

/// How often a client is asked to poll a wait for a receipt.
const POLL_MS: u64 = 500;

fn rfc3339(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn tool_result(result: CallToolResult) -> Map<String, Value> {
    match serde_json::to_value(result) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

impl Mcp {
    /// The task of the wait for a just-confirmed declaration's receipt, the
    /// confirmation's answer in its `_meta`; none if the declaration cannot
    /// be read back (the confirmation's answer then comes as it is).
    async fn wait_task(&self, confirmed: &CallToolResult) -> Option<CreateTaskResult> {
        let answer = confirmed.structured_content.clone()?;
        let dd_id = answer["dd_id"].as_str().and_then(|id| uuid::Uuid::parse_str(id).ok())?;
        let id = anchor_app::tasks::task_id(&self.state.app, dd_id).await.ok()?;
        let confirmed_at = answer["confirmed_at"].as_str().map(str::to_string);
        let now = rfc3339(self.state.app.clock.now());
        let task = Task::new(id, TaskStatus::Working, confirmed_at.unwrap_or_else(|| now.clone()), now)
            .with_poll_interval_ms(POLL_MS)
            .with_status_message("confirmed; waiting for the receipt to reach the declared integrity level");
        // The confirmation's answer, and its settlement where it paid.
        let mut meta = confirmed.meta.as_ref().map(|meta| meta.0.clone()).unwrap_or_default();
        meta.insert("io.github.anchor/confirmation".into(), answer);
        Some(CreateTaskResult::new(task).with_meta(MetaObject(meta)))
    }

    /// The wait `task_id` names: -32602 for an id this service did not
    /// give, -32603 when the database cannot answer now (the client polls
    /// again), and a refusal of the record itself as the task's end.
    async fn task_state(&self, task_id: &str) -> Result<Result<anchor_app::tasks::TaskState, anchor_app::AppError>, ErrorData> {
        use anchor_app::AppError;
        match anchor_app::tasks::state(&self.state.app, task_id).await {
            Ok(state) => Ok(Ok(state)),
            Err(AppError::NotFound { code: "TASK_NOT_FOUND", .. }) => {
                Err(ErrorData::invalid_params(format!("unknown task {}", anchor_domain::brief(task_id)), None))
            }
            Err(error @ (AppError::Unavailable { .. } | AppError::Busy { .. } | AppError::Internal(_))) => {
                tracing::warn!(%task_id, error = %error, "a task could not be read");
                Err(ErrorData::internal_error("the task could not be read at the moment; poll again", None))
            }
            Err(refused) => Ok(Err(refused)),
        }
    }
}

/// Whether `arguments` fit the tool's input schema: no unknown name, every
/// required one present, each of the declared JSON type and, for an enum,
/// one of its values. A misfit is named with the `error_code` REST answers
/// for the same fault in a body.
fn check_arguments(tool: &Tool, arguments: &Map<String, Value>) -> Result<(), (&'static str, String)> {
    let schema = &tool.input_schema;
    let properties = schema.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
    for (name, value) in arguments {
        let Some(property) = properties.get(name) else {
            return Err(("UNKNOWN_FIELD", format!("unknown argument {}", anchor_domain::brief(name))));
        };
        let fits = match property.get("type").and_then(Value::as_str) {
            Some("string") => value.is_string(),
            Some("number") => value.is_number(),
            Some("integer") => value.is_i64() || value.is_u64(),
            Some("boolean") => value.is_boolean(),
            Some("object") => value.is_object(),
            Some("array") => value.is_array(),
            _ => true,
        };
        if !fits {
            return Err(("INVALID_VALUE", format!("{name} must be of type {}", property["type"])));
        }
        if let Some(allowed) = property.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            let names: Vec<String> = allowed.iter().map(|v| v.to_string()).collect();
            return Err(("INVALID_VALUE", format!("{name} must be one of {}", names.join(", "))));
        }
    }
    for required in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if !arguments.contains_key(required) {
            return Err(("MISSING_FIELD", format!("missing required argument {required}")));
        }
    }
    Ok(())
}
