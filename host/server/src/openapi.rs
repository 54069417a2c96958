//! The route table and the OpenAPI document built from it.
//!
//! Every API operation is declared once as an [`Operation`]: its method, path,
//! handler and documentation together, with the Rust types of its request
//! body, query, path parameters and responses. The router and `/openapi.json`
//! are both built from that one list, and every schema is generated from
//! those types (schemars), so a route cannot exist undocumented and a body
//! cannot drift from its schema; enums come from the domain's own lists of
//! wire names.

use axum::http::Method;
use axum::routing::MethodRouter;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

use crate::error::ErrorBody;
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

/// How a schema is made: from the Rust type a handler reads or returns, or,
/// for a body that is not JSON, written out.
#[derive(Clone)]
pub enum SchemaSource {
    Type(fn(&mut SchemaGenerator) -> Schema),
    Value(Value),
}

fn schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

impl SchemaSource {
    pub fn of<T: JsonSchema>() -> SchemaSource {
        SchemaSource::Type(schema_of::<T>)
    }

    fn render(&self, generator: &mut SchemaGenerator) -> Value {
        match self {
            SchemaSource::Type(make) => {
                // A schema used inline (not a named component) gets the same
                // OpenAPI 3.0 rewriting the components get.
                let mut schema = make(generator);
                for transform in generator.transforms_mut() {
                    transform.transform(&mut schema);
                }
                schema.to_value()
            }
            SchemaSource::Value(value) => value.clone(),
        }
    }
}

pub struct Response {
    pub status: u16,
    pub description: String,
    pub schema: Option<SchemaSource>,
    /// The media type of the body: `application/json` unless said otherwise.
    pub media: &'static str,
    /// Other media types the same status may carry, with their schemas
    /// (`None`: text).
    pub alternatives: Vec<(&'static str, Option<SchemaSource>)>,
}

impl Response {
    fn json(status: u16, description: impl Into<String>, schema: SchemaSource) -> Response {
        Response { status, description: description.into(), schema: Some(schema), media: "application/json", alternatives: Vec::new() }
    }
}

/// One parameter, or every field of a query type.
pub enum Parameter {
    One {
        name: &'static str,
        location: &'static str,
        required: bool,
        schema: SchemaSource,
        description: Option<&'static str>,
    },
    /// Each property of the type is a query parameter (required when the type requires it).
    QueryOf(SchemaSource),
}

pub struct Operation {
    pub method: Method,
    pub path: &'static str,
    pub tag: &'static str,
    pub summary: &'static str,
    pub description: Option<&'static str>,
    pub auth: Auth,
    pub parameters: Vec<Parameter>,
    pub request: Option<SchemaSource>,
    /// The request body's media type: `application/json` unless said otherwise.
    pub request_media: &'static str,
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
        request_media: "application/json",
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
        self.responses.push(Response::json(
            401,
            "Authentication failed; the body says how to authenticate. Codes: UNAUTHORIZED (no token), INVALID_TOKEN (a token that is not an agent's current one).",
            SchemaSource::of::<crate::error::UnauthorizedBody>(),
        ));
        self
    }
    pub fn owner(mut self) -> Self {
        self.auth = Auth::Owner;
        self.responses.push(Response::json(
            401,
            "No valid session: sign in with POST /dap/login (or, where one is asked for, the password is wrong). Code: UNAUTHORIZED.",
            SchemaSource::of::<ErrorBody>(),
        ));
        self
    }
    pub fn extension(mut self) -> Self {
        self.extension = true;
        self
    }
    /// A path parameter read as `T`.
    pub fn path<T: JsonSchema>(mut self, name: &'static str) -> Self {
        self.parameters.push(Parameter::One { name, location: "path", required: true, schema: SchemaSource::of::<T>(), description: None });
        self
    }
    /// A path parameter read as `T`, with a description.
    pub fn path_described<T: JsonSchema>(mut self, name: &'static str, description: &'static str) -> Self {
        self.parameters.push(Parameter::One {
            name,
            location: "path",
            required: true,
            schema: SchemaSource::of::<T>(),
            description: Some(description),
        });
        self
    }
    /// The query parameters: every field of `Q`.
    pub fn query<Q: JsonSchema>(mut self) -> Self {
        self.parameters.push(Parameter::QueryOf(SchemaSource::of::<Q>()));
        self
    }
    /// The JSON body is read as `T`; `example` is what a GET on the route shows.
    pub fn takes<T: JsonSchema>(mut self, example: Value) -> Self {
        self.request = Some(SchemaSource::of::<T>());
        self.example = Some(example);
        self
    }
    /// The body is raw bytes of `media` (an uploaded file), not JSON.
    pub fn takes_bytes(mut self, media: &'static str) -> Self {
        self.request = Some(SchemaSource::Value(json!({ "type": "string", "format": "binary" })));
        self.request_media = media;
        self
    }
    /// A JSON response of type `T`.
    pub fn returns<T: JsonSchema>(mut self, status: u16, description: &str) -> Self {
        self.responses.push(Response::json(status, description, SchemaSource::of::<T>()));
        self
    }
    /// A response whose body is text (or bytes) of `media`, not JSON.
    pub fn ok_media(mut self, status: u16, description: &str, media: &'static str) -> Self {
        let schema = if media.starts_with("text/") { json!({ "type": "string" }) } else { json!({ "type": "string", "format": "binary" }) };
        self.responses.push(Response {
            status,
            description: description.into(),
            schema: Some(SchemaSource::Value(schema)),
            media,
            alternatives: Vec::new(),
        });
        self
    }
    /// The response of `status` may also be text of `media` (a format parameter chooses).
    pub fn or_media(mut self, status: u16, media: &'static str) -> Self {
        if let Some(response) = self.responses.iter_mut().find(|r| r.status == status) {
            response.alternatives.push((media, None));
        }
        self
    }
    /// The response of `status` may also be JSON of type `T` (a format parameter chooses).
    pub fn or_returns<T: JsonSchema>(mut self, status: u16) -> Self {
        if let Some(response) = self.responses.iter_mut().find(|r| r.status == status) {
            response.alternatives.push(("application/json", Some(SchemaSource::of::<T>())));
        }
        self
    }
    /// An error response with its codes. Several calls with one status are
    /// documented together.
    pub fn error(mut self, status: u16, description: &str, codes: &[&str]) -> Self {
        let description = if codes.is_empty() { description.to_string() } else { format!("{description} Codes: {}.", codes.join(", ")) };
        self.responses.push(Response::json(status, description, SchemaSource::of::<ErrorBody>()));
        self
    }
    /// The 402s of a route settled before its answer: the challenge, or a
    /// payment refused at settlement (`SETTLEMENT_FAILED`, with PAYMENT-RESPONSE).
    pub fn paid_inline(self, description: &str) -> Self {
        self.payment_required(description).error(
            402,
            "Or: the payment was refused at settlement; nothing was charged, PAYMENT-RESPONSE says why.",
            &["SETTLEMENT_FAILED"],
        )
    }
    pub fn payment_required(mut self, description: &str) -> Self {
        self.responses.push(Response::json(
            402,
            format!("{description} The PAYMENT-REQUIRED header carries the same object, base64-encoded."),
            SchemaSource::of::<anchor_x402::Challenge>(),
        ));
        self
    }
}

/// The refusals every operation shares, referred to from each.
fn common_responses(error: &Value) -> Value {
    let error = |description: &str| json!({ "description": description, "content": { "application/json": { "schema": error } } });
    json!({
        "BadRequest": error("The request could not be read: not JSON, not an object, a NUL character, a parameter given twice or not UTF-8 (BAD_REQUEST: the HTTP request itself is malformed). Codes: INVALID_INPUT, INVALID_VALUE, MISSING_FIELD, UNKNOWN_FIELD, INVALID_ENUM, INVALID_UUID, BAD_REQUEST."),
        "PricingUnavailable": error("The pricing generation in force could not price the request (PRICING_UNAVAILABLE), or prices no such service (FEATURE_NOT_AVAILABLE); nothing was recorded or charged. Codes: PRICING_UNAVAILABLE, FEATURE_NOT_AVAILABLE."),
        "CrossSite": error("A request that changes the owner's state was sent by another site (its Origin or Sec-Fetch-Site), or by a browser without the session's X-CSRF-Token. Code: CSRF_REJECTED."),
        "RequestTimeout": error("The body did not arrive in time after the request head. Code: REQUEST_TIMEOUT."),
        "PayloadTooLarge": error("The body is over the size limit. Code: PAYLOAD_TOO_LARGE."),
        "PaymentSentBefore": error("This agent sent the same payment (PAYMENT-SIGNATURE) before, for a request being completed or completed already: it is charged once, and not again for this one. A paid observation asked again with it, for the same request, once it has settled, is answered again instead (200, the same settlement). Code: DUPLICATE_REQUEST."),
        "UnsupportedMediaType": error("The body is sent as another media type than JSON (its Content-Type is neither application/json nor a +json type), so it is not read: a browser sends text/plain and forms across origins without asking first. Code: UNSUPPORTED_MEDIA_TYPE."),
        "UriTooLong": error("The URL is over the length limit. Code: URI_TOO_LONG."),
        "HeadersTooLarge": error("The header section is over the size limit. Code: HEADERS_TOO_LARGE."),
        "RateLimited": error("Too many requests from this client in the window; RateLimit-* and Retry-After say when to retry (RATE_LIMITED), or too many connections open from this client at once (TOO_MANY_CONNECTIONS). Codes: RATE_LIMITED, TOO_MANY_CONNECTIONS."),
        "StorageUnavailable": error("The database is not reachable or not taking writes for now (a restart, a failover), or refused the request for what others were doing at the same moment (a deadlock, a lock or statement timeout; nothing of it was kept); Retry-After says when to try again, and a create retried with its request_id, or a confirm retried, is recorded once (STORAGE_UNAVAILABLE); or this host holds as many request bodies in memory as it takes at once (SERVER_BUSY), and the body was not read. Codes: STORAGE_UNAVAILABLE, SERVER_BUSY."),
    })
}

/// The schemas of one document: request types are described as they are
/// read, response types as they are written (an optional field a response
/// leaves out when empty is not required, for example).
struct Schemas {
    requests: SchemaGenerator,
    responses: SchemaGenerator,
}

impl Schemas {
    fn new() -> Schemas {
        Schemas {
            requests: SchemaGenerator::new(SchemaSettings::openapi3().for_deserialize()),
            responses: SchemaGenerator::new(SchemaSettings::openapi3().for_serialize()),
        }
    }

    /// The named schemas of both kinds. A name used by a request type and a
    /// response type with different shapes is a mistake in the types.
    fn components(mut self) -> Map<String, Value> {
        let mut all: Map<String, Value> = Map::new();
        for (name, schema) in self.responses.take_definitions(true).into_iter().chain(self.requests.take_definitions(true)) {
            if let Some(existing) = all.get(&name) {
                assert_eq!(existing, &schema, "two types are documented as the schema {name} with different shapes; rename one");
            }
            all.insert(name, schema);
        }
        all
    }

    /// The properties of a query type, as parameters.
    fn query_parameters(&mut self, source: &SchemaSource) -> Vec<Value> {
        let schema = source.render(&mut self.requests);
        let schema = match schema.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                let name = reference.rsplit('/').next().unwrap_or_default().to_string();
                self.requests.definitions().get(&name).cloned().unwrap_or(Value::Null)
            }
            None => schema,
        };
        let required: Vec<&str> = schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        let mut out = Vec::new();
        if let Some(properties) = schema["properties"].as_object() {
            for (name, property) in properties {
                let mut property = property.clone();
                let description = property.as_object_mut().and_then(|p| {
                    p.remove("nullable");
                    p.remove("description")
                });
                let mut parameter =
                    json!({ "name": name, "in": "query", "required": required.contains(&name.as_str()), "schema": property });
                if let Some(description) = description {
                    parameter["description"] = description;
                }
                out.push(parameter);
            }
        }
        out
    }
}

/// The OpenAPI 3.0 document for `operations`.
pub fn document(operations: &[Operation], server_url: &str) -> Value {
    let mut schemas = Schemas::new();
    let error = SchemaSource::of::<ErrorBody>().render(&mut schemas.responses);
    let common = common_responses(&error);
    let mut paths = Map::new();
    let mut tags: Vec<&str> = Vec::new();
    for operation in operations {
        if !tags.contains(&operation.tag) {
            tags.push(operation.tag);
        }
        let mut responses = Map::new();
        for response in &operation.responses {
            let key = response.status.to_string();
            if let Some(existing) = responses.get_mut(&key) {
                // A second entry for one status: one description for both,
                // and either body when their schemas differ.
                let joined = format!("{} {}", existing["description"].as_str().unwrap_or_default(), response.description);
                existing["description"] = json!(joined);
                if let Some(schema) = &response.schema {
                    let other = schema.render(&mut schemas.responses);
                    let slot = &mut existing["content"][response.media]["schema"];
                    if *slot != other {
                        let mut parts = match slot.get("anyOf") {
                            Some(Value::Array(parts)) => parts.clone(),
                            _ => vec![slot.clone()],
                        };
                        if !parts.contains(&other) {
                            parts.push(other);
                        }
                        *slot = json!({ "anyOf": parts });
                    }
                }
                continue;
            }
            let mut entry = json!({ "description": response.description });
            if let Some(schema) = &response.schema {
                entry["content"] = json!({ response.media: { "schema": schema.render(&mut schemas.responses) } });
                for (media, schema) in &response.alternatives {
                    let schema = match schema {
                        Some(schema) => schema.render(&mut schemas.responses),
                        None => json!({ "type": "string" }),
                    };
                    entry["content"][*media] = json!({ "schema": schema });
                }
            }
            responses.insert(key, entry);
        }
        // What any operation may answer before its handler runs: refusals of
        // the request's form (400 when it has input to refuse), its origin
        // (403 on the owner's writes), its size (413, 414, 431), its media
        // type (415 where the body is JSON), its pace (408, 429); and what
        // any may answer while the database is away (503). Where the
        // operation documents that status itself, the shared refusals are
        // added to its description.
        // A body is refused by its size or pace even where none is expected.
        let has_input = operation.request.is_some() || !operation.parameters.is_empty();
        // What the pricing generation prices (anything paid, and what quotes or counts a price).
        let priced = operation.responses.iter().any(|r| r.status == 402)
            || ["/v1/dd/", "/v1/sdac/", "/v1/ise/", "/v1/ara/", "/v1/tsl/", "/v1/pricing/", "/v1/asa/", "/v1/retention/"]
                .iter()
                .any(|p| operation.path.starts_with(p));
        let owner_write = operation.path.starts_with("/dap/") && operation.method != Method::GET && operation.method != Method::HEAD;
        // A route whose x402 payment settles within the request (every paid
        // route but a declaration's, which settles with its confirmation).
        let settles_inline = anchor_app::catalog::settles_inline(operation.method.as_str(), operation.path);
        for (status, name, applies) in [
            ("400", "BadRequest", has_input),
            ("403", "CrossSite", owner_write),
            ("408", "RequestTimeout", true),
            ("409", "PaymentSentBefore", settles_inline),
            ("413", "PayloadTooLarge", true),
            ("414", "UriTooLong", true),
            ("415", "UnsupportedMediaType", operation.request.is_some() && operation.request_media == "application/json"),
            ("429", "RateLimited", true),
            ("431", "HeadersTooLarge", true),
            ("503", "StorageUnavailable", true),
            ("503", "PricingUnavailable", priced),
        ] {
            if !applies {
                continue;
            }
            match responses.get_mut(status) {
                None => {
                    responses.insert(status.into(), json!({ "$ref": format!("#/components/responses/{name}") }));
                }
                // The operation's own refusals with this status (or another
                // shared one), and the shared ones beside them.
                Some(own) => {
                    if let Some(other) = own.get("$ref").and_then(Value::as_str).and_then(|r| r.rsplit('/').next()) {
                        *own = common[other].clone();
                    }
                    // An answer of its own shape for that status (`/ready`'s
                    // 503 is a readiness report): the shared error is not one of its.
                    if own["content"]["application/json"]["schema"] != error {
                        continue;
                    }
                    let shared = common[name]["description"].as_str().unwrap_or_default();
                    let joined = format!("{} Also: {shared}", own["description"].as_str().unwrap_or_default());
                    own["description"] = json!(joined);
                }
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
        let mut parameters = Vec::new();
        for parameter in &operation.parameters {
            match parameter {
                Parameter::One { name, location, required, schema, description } => {
                    let mut value =
                        json!({ "name": name, "in": location, "required": required, "schema": schema.render(&mut schemas.requests) });
                    if let Some(description) = description {
                        value["description"] = json!(description);
                    }
                    parameters.push(value);
                }
                Parameter::QueryOf(source) => parameters.extend(schemas.query_parameters(source)),
            }
        }
        if !parameters.is_empty() {
            entry["parameters"] = json!(parameters);
        }
        if let Some(schema) = &operation.request {
            let mut content = json!({ "schema": schema.render(&mut schemas.requests) });
            if let Some(example) = &operation.example {
                content["example"] = example.clone();
            }
            entry["requestBody"] = json!({ "required": true, "content": { operation.request_media: content } });
        }
        if operation.extension {
            entry["x-anchor-extension"] = json!(true);
        }
        // axum's catch-all segment `{*name}` is the OpenAPI parameter `{name}`.
        let path = paths.entry(operation.path.replace("{*", "{")).or_insert_with(|| json!({}));
        path[operation.method.as_str().to_ascii_lowercase()] = entry;
    }
    let components = schemas.components();
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Decision Anchor compatible anchoring service",
            "version": INTERFACE_VERSION,
            "description": "Agents declare decisions (DD) with an accountability scope (EE) and pay for them in DAC. \
                The service keeps metadata only, never the content of a decision, and never judges it. \
                This document is generated from the service's route table and the Rust types of its request and response bodies.",
        },
        "servers": [{ "url": server_url }],
        "tags": tags.iter().map(|t| json!({ "name": t })).collect::<Vec<_>>(),
        "paths": paths,
        "components": {
            "schemas": components,
            "responses": common,
            "securitySchemes": {
                "AgentToken": { "type": "http", "scheme": "bearer", "description": "auth_token from POST /v1/agent/register (da_tk_…)" },
                "OwnerSession": { "type": "apiKey", "in": "cookie", "name": "connect.sid", "description": "Owner portal session, set by POST /dap/login" },
            },
        },
    })
}
