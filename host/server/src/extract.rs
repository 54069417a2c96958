//! Extractors: the authenticated agent, and a JSON body that fails with our own
//! error codes instead of axum's.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header;
use axum::http::request::Parts;
use serde_json::Value;
use subtle::ConstantTimeEq;

use anchor_domain::agents::{TOKEN_PREFIX, has_secret_shape, hash_secret};
use anchor_store::AgentRecord;

use crate::error::{ApiError, AuthFailure};
use crate::state::AppState;

/// The agent whose bearer token came with the request.
///
/// Tokens are looked up by their SHA-256, so the lookup's timing depends on the
/// hash, not on the token; the stored hash is then compared in constant time.
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
        if !has_secret_shape(TOKEN_PREFIX, token) {
            return Err(fail(AuthFailure::InvalidToken));
        }
        let hash = hash_secret(token);
        match state.store.agent_by_token_hash(&hash).await? {
            Some(agent) if bool::from(agent.token_hash.ct_eq(&hash)) => Ok(AuthAgent(agent)),
            _ => Err(fail(AuthFailure::InvalidToken)),
        }
    }
}

/// A JSON body. An empty body reads as `null`; anything that is not JSON is 400
/// `INVALID_INPUT`.
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<JsonBody, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|_| ApiError::bad("INVALID_INPUT", "the request body could not be read"))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(Value::Null));
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad("INVALID_INPUT", format!("the request body is not valid JSON: {e}")))
    }
}
