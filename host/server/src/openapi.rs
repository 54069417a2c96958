//! The route table and the OpenAPI document built from it.
//!
//! Every API operation is declared once as an [`Operation`]: its method, path,
//! handler and documentation together. The router and `/openapi.json` are both
//! built from that one list, so a route cannot exist undocumented, and the
//! schemas' enums come from the domain's own lists of wire names.

use axum::http::Method;
use axum::routing::MethodRouter;
use serde_json::{Map, Value, json};

use anchor_domain::agents::DisclosureLevel;
use anchor_domain::declarations::{dd, ee, template};

use crate::state::AppState;

/// The interface version this service implements.
pub const INTERFACE_VERSION: &str = "1.3.42";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    None,
    Agent,
    /// The owner portal's session cookie.
    Owner,
}

pub struct Response {
    pub status: u16,
    pub description: String,
    pub schema: Option<Value>,
    /// The media type of the body: `application/json` unless said otherwise.
    pub media: &'static str,
    /// Other media types the same status may carry (text bodies).
    pub alternatives: Vec<&'static str>,
}

impl Response {
    fn json(status: u16, description: impl Into<String>, schema: Value) -> Response {
        Response { status, description: description.into(), schema: Some(schema), media: "application/json", alternatives: Vec::new() }
    }
}

pub struct Operation {
    pub method: Method,
    pub path: &'static str,
    pub tag: &'static str,
    pub summary: &'static str,
    pub description: Option<&'static str>,
    pub auth: Auth,
    pub parameters: Vec<Value>,
    pub request: Option<Value>,
    pub example: Option<Value>,
    pub responses: Vec<Response>,
    /// Not part of the reference interface: our addition.
    pub extension: bool,
    pub handler: MethodRouter<AppState>,
}

/// Starts an operation; the builder methods fill in the rest.
pub fn op(method: Method, path: &'static str, handler: MethodRouter<AppState>) -> Operation {
    Operation {
        method,
        path,
        tag: "",
        summary: "",
        description: None,
        auth: Auth::None,
        parameters: Vec::new(),
        request: None,
        example: None,
        responses: Vec::new(),
        extension: false,
        handler,
    }
}

impl Operation {
    pub fn tag(mut self, tag: &'static str) -> Self {
        self.tag = tag;
        self
    }
    pub fn summary(mut self, summary: &'static str) -> Self {
        self.summary = summary;
        self
    }
    pub fn describe(mut self, description: &'static str) -> Self {
        self.description = Some(description);
        self
    }
    pub fn agent(mut self) -> Self {
        self.auth = Auth::Agent;
        self.responses.push(Response::json(401, "Authentication failed; the body says how to authenticate", reference("UnauthorizedBody")));
        self
    }
    pub fn owner(mut self) -> Self {
        self.auth = Auth::Owner;
        self.responses.push(Response::json(401, "No valid session: sign in with POST /dap/login", reference("Error")));
        self
    }
    pub fn extension(mut self) -> Self {
        self.extension = true;
        self
    }
    pub fn path_param(mut self, name: &str, schema: Value) -> Self {
        self.parameters.push(json!({ "name": name, "in": "path", "required": true, "schema": schema }));
        self
    }
    pub fn query_param(mut self, name: &str, schema: Value) -> Self {
        self.parameters.push(json!({ "name": name, "in": "query", "required": false, "schema": schema }));
        self
    }
    pub fn required_query(mut self, name: &str, schema: Value) -> Self {
        self.parameters.push(json!({ "name": name, "in": "query", "required": true, "schema": schema }));
        self
    }
    pub fn request(mut self, schema: Value, example: Value) -> Self {
        self.request = Some(schema);
        self.example = Some(example);
        self
    }
    pub fn ok(mut self, status: u16, description: &str, schema: Value) -> Self {
        self.responses.push(Response::json(status, description, schema));
        self
    }
    /// A response whose body is text (or bytes) of `media`, not JSON.
    pub fn ok_media(mut self, status: u16, description: &str, media: &'static str) -> Self {
        let schema = if media.starts_with("text/") { string() } else { json!({ "type": "string", "format": "binary" }) };
        self.responses.push(Response { status, description: description.into(), schema: Some(schema), media, alternatives: Vec::new() });
        self
    }
    /// The response of `status` may also be text of `media` (a format parameter chooses).
    pub fn or_media(mut self, status: u16, media: &'static str) -> Self {
        if let Some(response) = self.responses.iter_mut().find(|r| r.status == status) {
            response.alternatives.push(media);
        }
        self
    }
    /// An error response with its codes.
    pub fn error(mut self, status: u16, description: &str, codes: &[&str]) -> Self {
        let description = if codes.is_empty() { description.to_string() } else { format!("{description} Codes: {}.", codes.join(", ")) };
        self.responses.push(Response::json(status, description, reference("Error")));
        self
    }
    pub fn payment_required(mut self, description: &str) -> Self {
        self.responses.push(Response::json(
            402,
            format!("{description} The PAYMENT-REQUIRED header carries the same object, base64-encoded."),
            reference("X402Challenge"),
        ));
        self
    }
}

// ---- schema helpers ----

pub fn string() -> Value {
    json!({ "type": "string" })
}
pub fn uuid() -> Value {
    json!({ "type": "string", "format": "uuid" })
}
pub fn datetime() -> Value {
    json!({ "type": "string", "format": "date-time" })
}
pub fn number() -> Value {
    json!({ "type": "number" })
}
pub fn integer() -> Value {
    json!({ "type": "integer" })
}
pub fn boolean() -> Value {
    json!({ "type": "boolean" })
}
pub fn enumeration(names: &[&str]) -> Value {
    json!({ "type": "string", "enum": names })
}
pub fn array(items: Value) -> Value {
    json!({ "type": "array", "items": items })
}
pub fn nullable(mut schema: Value) -> Value {
    schema["nullable"] = Value::Bool(true);
    schema
}
pub fn doc(mut schema: Value, description: &str) -> Value {
    schema["description"] = Value::String(description.into());
    schema
}
pub fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}
pub fn object(required: &[&str], properties: Vec<(&str, Value)>) -> Value {
    let mut props = Map::new();
    for (name, schema) in properties {
        props.insert(name.to_string(), schema);
    }
    let mut schema = json!({ "type": "object", "properties": props });
    if !required.is_empty() {
        schema["required"] = json!(required);
    }
    schema
}

/// The shared component schemas.
pub fn components() -> Value {
    json!({
        "Error": object(&["error_code", "message"], vec![
            ("error_code", doc(string(), "UPPER_SNAKE code naming the failure")),
            ("message", doc(string(), "What went wrong and what to do instead")),
        ]),
        "UnauthorizedBody": object(&["error_code", "message"], vec![
            ("error_code", enumeration(&["UNAUTHORIZED", "INVALID_TOKEN", "INVALID_RECOVERY_KEY"])),
            ("message", string()),
            ("authentication", object(&[], vec![
                ("model", string()),
                ("header", string()),
                ("register", json!({ "type": "string", "format": "uri" })),
                ("recover", json!({ "type": "string", "format": "uri" })),
                ("note", string()),
            ])),
            ("account", object(&[], vec![("state", string()), ("note", string())])),
            ("documentation", json!({ "type": "string", "format": "uri" })),
        ]),
        "X402Challenge": object(&[], vec![
            ("x402Version", json!({ "type": "integer", "enum": [2] })),
            ("error", string()),
            ("resource", object(&[], vec![
                ("url", json!({ "type": "string", "format": "uri" })),
                ("description", string()),
                ("mimeType", string()),
            ])),
            ("accepts", array(object(&[], vec![
                ("scheme", string()),
                ("network", string()),
                ("amount", doc(string(), "USDC base units (6 decimals); 1 DAC = 1000")),
                ("asset", string()),
                ("payTo", string()),
                ("maxTimeoutSeconds", integer()),
                ("extra", json!({ "type": "object" })),
            ]))),
            ("extensions", json!({ "type": "object" })),
        ]),
        "DDInput": object(
            &["dd_unit_type", "dd_declaration_mode", "decision_type", "decision_action_type", "origin_context_type", "selection_state"],
            vec![
                ("dd_unit_type", enumeration(dd::UnitType::NAMES)),
                ("dd_declaration_mode", doc(enumeration(dd::DeclarationMode::NAMES), "Only self_declared is accepted on POST /v1/dd/create")),
                ("decision_type", enumeration(dd::DecisionType::NAMES)),
                ("decision_action_type", enumeration(dd::ActionType::NAMES)),
                ("origin_context_type", enumeration(dd::OriginContext::NAMES)),
                ("selection_state", enumeration(dd::SelectionState::NAMES)),
                ("selection_scope", enumeration(dd::SelectionScope::NAMES)),
                ("decision_at", doc(datetime(), "When the agent decided; normalized to UTC; not later than the anchoring time")),
                ("parent_dd_id", uuid()),
            ],
        ),
        "EEInput": doc(object(
            &["ee_retention_period", "ee_integrity_verification_level", "ee_disclosure_format_policy", "ee_responsibility_scope"],
            vec![
                ("ee_preset", doc(string(), "A preset from GET /v1/pricing/ee-presets; expands into the four axes and overrides them")),
                ("ee_retention_period", enumeration(ee::Retention::NAMES)),
                ("ee_integrity_verification_level", enumeration(ee::Integrity::NAMES)),
                ("ee_disclosure_format_policy", enumeration(ee::Disclosure::NAMES)),
                ("ee_responsibility_scope", enumeration(ee::Responsibility::NAMES)),
                ("ee_direct_access_period", json!({ "type": "string", "pattern": "^[1-9]\\d*[dmy]$" })),
                ("ee_direct_access_quota", json!({ "type": "integer", "minimum": 0 })),
                ("content_disclosure_scope", json!({ "type": "string", "enum": ee::ContentScope::NAMES, "default": "owner" })),
                ("delegation_state", json!({ "type": "string", "enum": ee::Delegation::NAMES, "default": "none" })),
                ("access_class", enumeration(ee::AccessClass::NAMES)),
            ],
        ), "The four axes are required unless ee_preset is sent"),
        "TemplateInput": {
            "type": "object",
            "minProperties": 1,
            "properties": {
                "decision_class": enumeration(template::DecisionClass::NAMES),
                "decision_scale_value": number(),
                "target_class": enumeration(template::TargetClass::NAMES),
                "call_chain": {
                    "type": "array",
                    "maxItems": template::CALL_CHAIN_MAX,
                    "items": { "type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$" },
                },
                "decision_scale_unit": { "type": "string", "maxLength": 20, "pattern": "^[A-Za-z0-9][A-Za-z0-9_./%-]{0,19}$" },
                "self_classification": doc(string(), "A key from GET /v1/classification"),
                "decision_trigger": enumeration(template::Trigger::NAMES),
                "human_involvement": enumeration(template::HumanInvolvement::NAMES),
            },
        },
        "CostBreakdown": object(&[], vec![
            ("base_fee", number()),
            ("base_fee_source", enumeration(&["trial", "external", "earned"])),
            ("premium", number()),
            ("premium_source", enumeration(&["trial", "external", "earned"])),
            ("subtotal", doc(number(), "Base fee plus every axis add, before the multiplier")),
            ("multiplier", number()),
            ("total_dac", number()),
            ("axes", array(object(&[], vec![("axis", string()), ("value", string()), ("add", number())]))),
        ]),
        "DisclosureLevel": enumeration(DisclosureLevel::NAMES),
    })
}

/// The refusals every operation shares, referred to from each.
fn common_responses() -> Value {
    let error =
        |description: &str| json!({ "description": description, "content": { "application/json": { "schema": reference("Error") } } });
    json!({
        "BadRequest": error("The request could not be read: not JSON, not an object, a NUL character, a parameter given twice or not UTF-8. Codes: INVALID_INPUT, INVALID_VALUE, MISSING_FIELD, UNKNOWN_FIELD, INVALID_ENUM, INVALID_UUID."),
        "RequestTimeout": error("The body did not arrive in time after the request head. Code: REQUEST_TIMEOUT."),
        "PayloadTooLarge": error("The body is over the size limit. Code: PAYLOAD_TOO_LARGE."),
        "UriTooLong": error("The URL is over the length limit. Code: URI_TOO_LONG."),
        "HeadersTooLarge": error("The header section is over the size limit. Code: HEADERS_TOO_LARGE."),
        "RateLimited": {
            "description": "Too many requests from this client in the window; RateLimit-* and Retry-After say when to retry. Code: RATE_LIMITED.",
            "content": { "application/json": { "schema": reference("Error") } },
        },
    })
}

/// The OpenAPI 3.0 document for `operations`.
pub fn document(operations: &[Operation], server_url: &str) -> Value {
    let mut paths = Map::new();
    let mut tags: Vec<&str> = Vec::new();
    for operation in operations {
        if !tags.contains(&operation.tag) {
            tags.push(operation.tag);
        }
        let mut responses = Map::new();
        for response in &operation.responses {
            let mut entry = json!({ "description": response.description });
            if let Some(schema) = &response.schema {
                entry["content"] = json!({ response.media: { "schema": schema } });
                for media in &response.alternatives {
                    entry["content"][*media] = json!({ "schema": string() });
                }
            }
            responses.insert(response.status.to_string(), entry);
        }
        // What any operation may answer before its handler runs: refusals of
        // the request's form (400 when it has input to refuse), its size
        // (413, 414, 431), its pace (408, 429).
        let has_input = operation.request.is_some() || !operation.parameters.is_empty();
        for (status, name, applies) in [
            ("400", "BadRequest", has_input),
            ("408", "RequestTimeout", operation.request.is_some()),
            ("413", "PayloadTooLarge", operation.request.is_some()),
            ("414", "UriTooLong", true),
            ("429", "RateLimited", true),
            ("431", "HeadersTooLarge", true),
        ] {
            if applies && !responses.contains_key(status) {
                responses.insert(status.into(), json!({ "$ref": format!("#/components/responses/{name}") }));
            }
        }
        let mut entry = json!({
            "tags": [operation.tag],
            "summary": operation.summary,
            "responses": responses,
        });
        if let Some(description) = operation.description {
            entry["description"] = json!(description);
        }
        if operation.auth == Auth::Agent {
            entry["security"] = json!([{ "AgentToken": [] }]);
        }
        if operation.auth == Auth::Owner {
            entry["security"] = json!([{ "OwnerSession": [] }]);
        }
        if !operation.parameters.is_empty() {
            entry["parameters"] = json!(operation.parameters);
        }
        if let Some(schema) = &operation.request {
            let mut content = json!({ "schema": schema });
            if let Some(example) = &operation.example {
                content["example"] = example.clone();
            }
            entry["requestBody"] = json!({ "required": true, "content": { "application/json": content } });
        }
        if operation.extension {
            entry["x-anchor-extension"] = json!(true);
        }
        // axum's catch-all segment `{*name}` is the OpenAPI parameter `{name}`.
        let path = paths.entry(operation.path.replace("{*", "{")).or_insert_with(|| json!({}));
        path[operation.method.as_str().to_ascii_lowercase()] = entry;
    }
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Decision Anchor compatible anchoring service",
            "version": INTERFACE_VERSION,
            "description": "Agents declare decisions (DD) with an accountability scope (EE) and pay for them in DAC. \
                The service keeps metadata only, never the content of a decision, and never judges it. \
                This document is generated from the service's route table.",
        },
        "servers": [{ "url": server_url }],
        "tags": tags.iter().map(|t| json!({ "name": t })).collect::<Vec<_>>(),
        "paths": paths,
        "components": {
            "schemas": components(),
            "responses": common_responses(),
            "securitySchemes": {
                "AgentToken": { "type": "http", "scheme": "bearer", "description": "auth_token from POST /v1/agent/register (da_tk_…)" },
                "OwnerSession": { "type": "apiKey", "in": "cookie", "name": "connect.sid", "description": "Owner portal session, set by POST /dap/login" },
            },
        },
    })
}
