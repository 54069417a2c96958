//! Extractors: the authenticated agent, and the body, path and query readers.
//!
//! Every extractor here fails with an `ApiError`, so every refusal, however
//! early, is a JSON body with its `error_code`: handlers use these instead of
//! axum's `Json`, `Path` and `Query`, whose rejections are plain text.

use anchor_domain::records::AgentRecord;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde_json::Value;

use crate::error::{ApiError, AuthFailure};
use crate::state::AppState;

/// The agent whose bearer token came with the request
/// (`anchor_app::agents::authenticate`).
pub struct AuthAgent(pub AgentRecord);

impl FromRequestParts<AppState> for AuthAgent {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<AuthAgent, ApiError> {
        let bearer = Bearer::from_request_parts(parts, state).await?;
        match anchor_app::agents::authenticate(&state.app, &bearer.0).await? {
            Some(agent) => Ok(AuthAgent(agent)),
            None => Err(bearer.refused(state)),
        }
    }
}

/// The agent whose bearer token came with a DD create, possibly as this host
/// found it by that token lately (`anchor_app::agents::authenticate_for_create`),
/// with the token for a refusal found later.
pub struct CreatingAgent(pub anchor_ports::FoundAgent, pub Bearer);

impl FromRequestParts<AppState> for CreatingAgent {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<CreatingAgent, ApiError> {
        let bearer = Bearer::from_request_parts(parts, state).await?;
        match anchor_app::agents::authenticate_for_create(&state.app, &bearer.0).await? {
            Some(found) => Ok(CreatingAgent(found, bearer)),
            None => Err(bearer.refused(state)),
        }
    }
}

/// The bearer token that came with the request, not yet looked up: for a
/// route that authenticates together with its first read (a confirmation).
pub struct Bearer(pub String);

impl Bearer {
    /// The refusal of a token that names no agent.
    pub fn refused(&self, state: &AppState) -> ApiError {
        unauthorized(state, AuthFailure::InvalidToken)
    }
}

fn unauthorized(state: &AppState, failure: AuthFailure) -> ApiError {
    ApiError::Unauthorized { failure, base_url: state.settings.config.public_url.clone() }
}

impl FromRequestParts<AppState> for Bearer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Bearer, ApiError> {
        let missing = || unauthorized(state, AuthFailure::Missing);
        let value = parts.headers.get(header::AUTHORIZATION).ok_or_else(missing)?;
        let value = value.to_str().map_err(|_| missing())?;
        let token = bearer_token(value).ok_or_else(missing)?;
        Ok(Bearer(token.to_string()))
    }
}

/// The token of an `Authorization` value of the Bearer scheme, whose name
/// is case-insensitive (RFC 9110 §11.1): `Bearer x`, `bearer x`, `BEARER x`.
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The client a request comes from, as limits count it: an IPv4 address or
/// an IPv6 /64 ([`crate::listener::client_key`]).
pub struct Client(pub std::net::IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for Client {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Client, Self::Rejection> {
        let ip = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map_or(std::net::IpAddr::from([127, 0, 0, 1]), |info| info.0.ip());
        Ok(Client(crate::listener::client_key(ip)))
    }
}

/// A JSON body. An empty body reads as `null`; a body sent as another media
/// type than JSON is 415 `UNSUPPORTED_MEDIA_TYPE`; anything that is not JSON is 400
/// `INVALID_INPUT`; a body over the limit is 413 `PAYLOAD_TOO_LARGE`; a NUL
/// character anywhere in it (a key or a string) is 400 `INVALID_VALUE`, so no
/// text the database cannot store ever reaches it.
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<JsonBody, ApiError> {
        let declared = request.headers().get(axum::http::header::CONTENT_TYPE).cloned();
        let bytes = read_body(request, state, too_large).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(Value::Null));
        }
        // A body declared as something else is not read as JSON: a browser
        // sends text/plain or a form across origins without asking first.
        if let Some(declared) = declared
            && !is_json(&declared)
        {
            return Err(ApiError::Protocol {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                code: "UNSUPPORTED_MEDIA_TYPE",
                message: format!(
                    "the request body is sent as {}; send it as Content-Type: application/json",
                    anchor_domain::brief(&String::from_utf8_lossy(declared.as_bytes()))
                ),
                allow: None,
            });
        }
        // A key named twice in one object would be read as its last value
        // here and perhaps as its first by whatever checked the body before;
        // a key the JSON reader keeps for itself would be read as a number.
        // Looked for first, so that its message is the one given.
        if let Err(e) = no_repeated_keys(&bytes) {
            let message = if e.is_data() { e.to_string() } else { format!("the request body is not valid JSON: {e}") };
            return Err(ApiError::bad("INVALID_INPUT", message));
        }
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad("INVALID_INPUT", format!("the request body is not valid JSON: {e}")))?;
        if let Some(path) = nul_at(&value, "") {
            return Err(nul_refused(&path));
        }
        Ok(JsonBody(value))
    }
}

/// Refuses a JSON text in which an object names a key twice (at any depth,
/// escapes decoded), with a message naming the key, or names the key the
/// JSON reader keeps for numbers.
pub fn no_repeated_keys(json: &[u8]) -> Result<(), serde_json::Error> {
    serde_json::from_slice::<NoRepeatedKeys>(json).map(|_| ())
}

/// Whether a Content-Type names JSON: `application/json` or a `+json` type,
/// with any parameters.
fn is_json(declared: &axum::http::HeaderValue) -> bool {
    let Ok(text) = declared.to_str() else { return false };
    let essence = text.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Reads a JSON text only to refuse an object that names a key twice.
struct NoRepeatedKeys;

impl<'de> serde::Deserialize<'de> for NoRepeatedKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<NoRepeatedKeys, D::Error> {
        deserializer.deserialize_any(NoRepeatedKeys)
    }
}

impl<'de> serde::de::Visitor<'de> for NoRepeatedKeys {
    type Value = NoRepeatedKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<NoRepeatedKeys>()?.is_some() {}
        Ok(self)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == RAW_VALUE_KEY {
                return Err(serde::de::Error::custom(RESERVED));
            }
            if key == NUMBER_KEY {
                // A number of the text comes here too, as a map of this one
                // key, its value handed over as an owned string.
                map.next_value::<NumberText>()?;
                continue;
            }
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!(
                    "the request body names the key {} twice in one object",
                    anchor_domain::brief(&format!("{key:?}"))
                )));
            }
            map.next_value::<NoRepeatedKeys>()?;
        }
        Ok(self)
    }
}

/// The key serde_json reads an object under as a number
/// (`{"$serde_json::private::Number": "5"}` as 5), and under which it hands a
/// number of the text to a visitor.
const NUMBER_KEY: &str = "$serde_json::private::Number";

/// The key serde_json reads an object under as raw JSON text: a number
/// or a string sent as `{"$serde_json::private::RawValue": "…"}` would
/// pass for one. No number of the text comes this way.
const RAW_VALUE_KEY: &str = "$serde_json::private::RawValue";

/// Why a body naming [`NUMBER_KEY`] or [`RAW_VALUE_KEY`] is refused.
const RESERVED: &str = "the request body names a key reserved by the JSON reader";

/// The value under [`NUMBER_KEY`]: a number of the text arrives as an owned
/// string (`visit_string`); an object a client wrote with that key holds a
/// string of the text (`visit_str`), and is refused, since no JSON a client
/// means has it.
struct NumberText;

impl<'de> serde::Deserialize<'de> for NumberText {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<NumberText, D::Error> {
        deserializer.deserialize_any(NumberText)
    }
}

impl<'de> serde::de::Visitor<'de> for NumberText {
    type Value = NumberText;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a number")
    }
    fn visit_string<E>(self, _: String) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self, E> {
        Err(E::custom(RESERVED))
    }
}

/// A JSON body read into the route's request type `T` (see
/// [`crate::body`]): every mistake is a 400 with its code and the
/// field's path. `Body<Option<T>>` also accepts an empty body.
pub struct Body<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Body<T>, ApiError> {
        let JsonBody(value) = JsonBody::from_request(request, state).await?;
        let (read, ignored) = crate::body::read_reporting(&value);
        if !ignored.is_empty() {
            let _ = IGNORED_FIELDS.try_with(|cell| cell.borrow_mut().extend(ignored));
        }
        Ok(Body(read?))
    }
}

/// Names `key` among the body keys the answer says were left out (a key the
/// request's type defines but that this request's other values make moot).
pub fn left_out(key: &str) {
    let _ = IGNORED_FIELDS.try_with(|cell| cell.borrow_mut().push(key.to_string()));
}

tokio::task_local! {
    /// The body keys the request's type left out, for the answer's
    /// [`IGNORED_FIELDS_HEADER`] (scoped per request by `http::observe`).
    pub static IGNORED_FIELDS: std::cell::RefCell<Vec<String>>;
}

/// The header that names the body keys a request's type does not define
/// and the service left out (decision 0061), comma-separated; bytes outside
/// visible ASCII, and `,` and `%`, percent-encoded.
pub const IGNORED_FIELDS_HEADER: &str = "anchor-ignored-fields";

/// The header's value for these keys.
pub fn ignored_fields_value(keys: &[String]) -> String {
    let mut value = String::new();
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            value.push_str(", ");
        }
        for byte in key.bytes() {
            if byte.is_ascii_graphic() && byte != b',' && byte != b'%' {
                value.push(byte as char);
            } else {
                value.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    value
}

/// 413 for a body over the configured limit.
/// The request's body, whole: over the route's limit it is `over` (413), too
/// slow 408, unreadable 400 `INVALID_INPUT`.
pub async fn read_body<S: Send + Sync>(request: Request, state: &S, over: impl FnOnce() -> ApiError) -> Result<Bytes, ApiError> {
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    let _budget = body_budget(declared).await?;
    Bytes::from_request(request, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            over()
        } else if crate::listener::is_body_timeout(&rejection) {
            body_timeout()
        } else {
            ApiError::bad("INVALID_INPUT", "the request body could not be read")
        }
    })
}

/// The request bodies this process buffers at once, in KiB, over all
/// requests (decision 0063): past it a body waits [`BODY_BUDGET_WAIT`] for
/// room, then is refused unread (503 `SERVER_BUSY`), so slow clients holding
/// bodies open cannot make the host hold more than this.
pub const BODY_BUDGET_KIB: usize = 256 << 10;
/// How long a body waits for room in the budget.
pub const BODY_BUDGET_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// What a body of unknown length is counted as: the default body limit.
const UNKNOWN_BODY_KIB: u64 = 1 << 10;

static BODY_BUDGET: std::sync::LazyLock<std::sync::Arc<tokio::sync::Semaphore>> =
    std::sync::LazyLock::new(|| std::sync::Arc::new(tokio::sync::Semaphore::new(BODY_BUDGET_KIB)));

/// Room for a body said to hold `declared` bytes, held while it is read.
async fn body_budget(declared: Option<u64>) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    let kib = declared.map_or(UNKNOWN_BODY_KIB, |bytes| bytes.div_ceil(1024)).clamp(1, BODY_BUDGET_KIB as u64) as u32;
    match tokio::time::timeout(BODY_BUDGET_WAIT, BODY_BUDGET.clone().acquire_many_owned(kib)).await {
        Ok(Ok(permit)) => Ok(permit),
        _ => Err(ApiError::App(anchor_app::AppError::Busy {
            code: "SERVER_BUSY",
            message: "this host holds as many request bodies in memory as it takes at once; send the request again in a moment".into(),
            retry_after_secs: 1,
        })),
    }
}

/// 408 for a body that did not arrive within the body deadline.
pub fn body_timeout() -> ApiError {
    ApiError::Protocol {
        status: StatusCode::REQUEST_TIMEOUT,
        code: "REQUEST_TIMEOUT",
        message: "the request body did not arrive in time; send it whole, then wait for the answer".into(),
        allow: None,
    }
}

pub fn too_large() -> ApiError {
    ApiError::Protocol {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: "PAYLOAD_TOO_LARGE",
        message: "the request body is larger than this service accepts".into(),
        allow: None,
    }
}

fn nul_refused(where_: &str) -> ApiError {
    ApiError::bad("INVALID_VALUE", format!("{where_} contains a NUL character (U+0000), which no text field accepts"))
}

/// Where the first NUL character sits in `value` (a key or a string), if any.
fn nul_at(value: &Value, path: &str) -> Option<String> {
    let here = || if path.is_empty() { "the request body".to_string() } else { path.to_string() };
    match value {
        Value::String(s) if s.contains('\0') => Some(here()),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| nul_at(v, &format!("{}[{i}]", here()))),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            if k.contains('\0') {
                return Some(format!("a field name in {}", here()));
            }
            nul_at(v, &if path.is_empty() { anchor_domain::brief(k) } else { format!("{path}.{}", anchor_domain::brief(k)) })
        }),
        _ => None,
    }
}

/// Path parameters. A segment that is not UTF-8 once percent-decoded, or
/// cannot be read as `T`, is 400 `INVALID_VALUE`.
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ApiPath<T>, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(ApiPath(value)),
            Err(rejection) => Err(ApiError::bad(
                "INVALID_VALUE",
                format!(
                    "a path parameter could not be read ({}); path parameters are UTF-8 text",
                    anchor_domain::brief(&rejection.body_text())
                ),
            )),
        }
    }
}

/// Query parameters read into `T` (see [`crate::body`]: numbers and
/// booleans are parsed from their text). Each name may appear once; NUL
/// characters are refused; what does not fit `T` is 400 `INVALID_VALUE`
/// (`MISSING_FIELD` for a required one that is absent).
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<ApiQuery<T>, ApiError> {
        let raw = parts.uri.query().unwrap_or("");
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw)
            .map_err(|e| ApiError::bad("INVALID_VALUE", format!("the query string could not be read: {e}")))?;
        let mut seen = std::collections::HashSet::new();
        for (name, value) in &pairs {
            if name.contains('\0') || value.contains('\0') {
                return Err(nul_refused(&format!("query parameter {}", anchor_domain::brief(name))));
            }
            if !seen.insert(name.as_str()) {
                return Err(ApiError::bad(
                    "INVALID_VALUE",
                    format!("query parameter {} appears more than once; send it once", anchor_domain::brief(name)),
                ));
            }
        }
        Ok(ApiQuery(crate::body::read_query(pairs)?))
    }
}

/// The x402 payment offered with a request: the payload from
/// `PAYMENT-SIGNATURE` (x402 v2) or `X-PAYMENT` (the header the published JS
/// SDK tells its users to retry with), which get the same verification.
/// Whether a malformed one is refused is the charge pipeline's call: only once
/// an external payment is needed.
pub struct PaymentOffer(pub anchor_app::charge::Offered);

impl<S: Send + Sync> FromRequestParts<S> for PaymentOffer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<PaymentOffer, ApiError> {
        use anchor_app::charge::Offered;
        let signature = parts.headers.get("payment-signature");
        let legacy = parts.headers.get("x-payment");
        let (name, value) = match (signature, legacy) {
            (None, None) => return Ok(PaymentOffer(Offered::None)),
            (Some(a), Some(b)) if a != b => {
                return Ok(PaymentOffer(Offered::Malformed(
                    "PAYMENT-SIGNATURE and X-PAYMENT carry different payments; send one of them".into(),
                )));
            }
            (Some(value), _) => ("PAYMENT-SIGNATURE", value),
            (None, Some(value)) => ("X-PAYMENT", value),
        };
        let offered = match value.to_str() {
            Err(_) => Offered::Malformed(format!("{name} is not ASCII")),
            Ok(text) => match anchor_x402::decode_payload(name, text) {
                Ok(payload) => Offered::Payload(payload),
                Err(message) => Offered::Malformed(message),
            },
        };
        Ok(PaymentOffer(offered))
    }
}

/// The trace id of the caller's W3C trace context (`traceparent`), when it
/// sends exactly one well-formed header. A missing, repeated or malformed one
/// reads as none, as a receiver of trace context does: the request goes on,
/// unlinked.
pub struct TraceParent(pub Option<anchor_domain::trace::TraceId>);

impl TraceParent {
    pub fn of(headers: &axum::http::HeaderMap) -> TraceParent {
        let mut values = headers.get_all("traceparent").iter();
        let trace = match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().ok().and_then(anchor_domain::trace::TraceId::from_traceparent),
            _ => None,
        };
        TraceParent(trace)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for TraceParent {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<TraceParent, Self::Rejection> {
        Ok(TraceParent::of(&parts.headers))
    }
}
