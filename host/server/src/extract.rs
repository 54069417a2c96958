//! Extractors: the authenticated agent, and the body, path and query readers.
//!
//! Every extractor here fails with an `ApiError`, so every refusal, however
//! early, is a JSON body with its `error_code`: handlers use these instead of
//! axum's `Json`, `Path` and `Query`, whose rejections are plain text.

use anchor_store::AgentRecord;
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
        let fail = |failure| ApiError::Unauthorized { failure, base_url: state.settings.public_url.clone() };
        let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
            return Err(fail(AuthFailure::Missing));
        };
        let value = value.to_str().map_err(|_| fail(AuthFailure::Missing))?;
        let Some(token) = value.strip_prefix("Bearer ").map(str::trim) else {
            return Err(fail(AuthFailure::Missing));
        };
        match anchor_app::agents::authenticate(&state.app, token).await? {
            Some(agent) => Ok(AuthAgent(agent)),
            None => Err(fail(AuthFailure::InvalidToken)),
        }
    }
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

/// A JSON body. An empty body reads as `null`; anything that is not JSON is 400
/// `INVALID_INPUT`; a body over the limit is 413 `PAYLOAD_TOO_LARGE`; a NUL
/// character anywhere in it (a key or a string) is 400 `INVALID_VALUE`, so no
/// text the database cannot store ever reaches it.
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<JsonBody, ApiError> {
        let bytes = read_body(request, state, too_large).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(Value::Null));
        }
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad("INVALID_INPUT", format!("the request body is not valid JSON: {e}")))?;
        if let Some(path) = nul_at(&value, "") {
            return Err(nul_refused(&path));
        }
        // A key named twice in one object would be read as its last value
        // here and perhaps as its first by whatever checked the body before.
        if value.is_object() || value.is_array() {
            serde_json::from_slice::<NoRepeatedKeys>(&bytes).map_err(|e| ApiError::bad("INVALID_INPUT", e.to_string()))?;
        }
        Ok(JsonBody(value))
    }
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

/// A JSON body read into the route's request type `T` (see
/// [`crate::body`]): every mistake is a 400 with its code and the
/// field's path. `Body<Option<T>>` also accepts an empty body.
pub struct Body<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Body<T>, ApiError> {
        let JsonBody(value) = JsonBody::from_request(request, state).await?;
        Ok(Body(crate::body::read(&value)?))
    }
}

/// 413 for a body over the configured limit.
/// The request's body, whole: over the route's limit it is `over` (413), too
/// slow 408, unreadable 400 `INVALID_INPUT`.
pub async fn read_body<S: Send + Sync>(request: Request, state: &S, over: impl FnOnce() -> ApiError) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            over()
        } else if crate::listener::is_body_timeout(&rejection) {
            ApiError::Protocol {
                status: StatusCode::REQUEST_TIMEOUT,
                code: "REQUEST_TIMEOUT",
                message: "the request body did not arrive in time; send it whole, then wait for the answer".into(),
                allow: None,
            }
        } else {
            ApiError::bad("INVALID_INPUT", "the request body could not be read")
        }
    })
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
