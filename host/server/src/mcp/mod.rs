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

mod tools;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value};

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
    axum::Router::new().route_service("/mcp", service(state))
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
        .with_allowed_hosts(allowed_hosts(&state.settings.public_url));
    StreamableHttpService::new(
        move || Ok(Mcp { state: state.clone(), tools: tools.clone() }),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

impl ServerHandler for Mcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
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
        check_arguments(tool, &arguments).map_err(|message| ErrorData::invalid_params(format!("{}: {message}", tool.name), None))?;
        let bearer = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.headers.get(axum::http::header::AUTHORIZATION))
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(|token| token.trim().to_string());
        // The SDK runs the call on a task of its own: it gets its own one-generation scope.
        let outcome = self.state.app.schedule.in_one_generation(tools::call(&self.state, &tool.name, arguments, bearer)).await;
        Ok(tools::render(outcome).await.into())
    }
}

/// Whether `arguments` fit the tool's input schema: no unknown name, every
/// required one present, each of the declared JSON type and, for an enum,
/// one of its values.
fn check_arguments(tool: &Tool, arguments: &Map<String, Value>) -> Result<(), String> {
    let schema = &tool.input_schema;
    let properties = schema.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
    for (name, value) in arguments {
        let Some(property) = properties.get(name) else {
            return Err(format!("unknown argument {}", anchor_domain::brief(name)));
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
            return Err(format!("{name} must be of type {}", property["type"]));
        }
        if let Some(allowed) = property.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            let names: Vec<String> = allowed.iter().map(|v| v.to_string()).collect();
            return Err(format!("{name} must be one of {}", names.join(", ")));
        }
    }
    for required in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if !arguments.contains_key(required) {
            return Err(format!("missing required argument {required}"));
        }
    }
    Ok(())
}
