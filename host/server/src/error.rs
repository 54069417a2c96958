//! `ApiError`: every failure a handler can answer, with its status and documented
//! `error_code`. Internal failures are logged once and answered with a fixed
//! message; nothing about the database or a plugin leaks to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use anchor_domain::Invalid;
use anchor_domain::pricing::PricingError;
use anchor_store::StoreError;

/// Why an agent request was not authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// No `Authorization: Bearer …` header.
    Missing,
    /// A bearer value that is not a current token.
    InvalidToken,
    /// A recovery attempt with a wrong agent_id or key.
    InvalidRecoveryKey,
}

#[derive(Debug)]
pub enum ApiError {
    /// 400 with a documented code.
    BadRequest(Invalid),
    Unauthorized {
        failure: AuthFailure,
        base_url: String,
    },
    /// 401 for an owner (portal) password or session: `error_code` and
    /// `message` only, without the agent-token guidance.
    OwnerUnauthorized {
        message: String,
    },
    Forbidden {
        code: &'static str,
        message: String,
    },
    NotFound {
        code: &'static str,
        message: String,
    },
    Conflict {
        code: &'static str,
        message: String,
    },
    Gone {
        code: &'static str,
        message: String,
    },
    TooManyRequests {
        message: String,
        retry_after_secs: u64,
    },
    /// 402 with an x402 v2 PaymentRequired object in the header and the body.
    PaymentRequired(Value),
    /// 402 after a settlement failed: `PAYMENT-RESPONSE` carries success false.
    SettlementFailed {
        reason: String,
        payer: String,
    },
    /// 503: a dependency (the pricing component) is failing.
    Unavailable {
        code: &'static str,
        message: String,
    },
    /// A refusal at the protocol level: 408, 413, 414, 431, 405 (with the path's
    /// methods in `Allow`).
    Protocol {
        status: StatusCode,
        code: &'static str,
        message: String,
        allow: Option<String>,
    },
    Internal(anyhow::Error),
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn bad(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::BadRequest(Invalid::new(code, message))
    }

    pub fn forbidden(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::Forbidden { code, message: message.into() }
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::NotFound { code, message: message.into() }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized { .. } | ApiError::OwnerUnauthorized { .. } => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Gone { .. } => StatusCode::GONE,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::PaymentRequired(_) | ApiError::SettlementFailed { .. } => StatusCode::PAYMENT_REQUIRED,
            ApiError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Protocol { status, .. } => *status,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<anchor_app::AppError> for ApiError {
    fn from(error: anchor_app::AppError) -> ApiError {
        use anchor_app::AppError;
        match error {
            AppError::Invalid(invalid) => ApiError::BadRequest(invalid),
            AppError::Forbidden { code, message } => ApiError::Forbidden { code, message },
            AppError::NotFound { code, message } => ApiError::NotFound { code, message },
            AppError::Conflict { code, message } => ApiError::Conflict { code, message },
            AppError::Gone { code, message } => ApiError::Gone { code, message },
            AppError::PaymentRequired(required) => ApiError::PaymentRequired(required.challenge()),
            AppError::SettlementFailed { reason, payer } => ApiError::SettlementFailed { reason, payer },
            AppError::Unavailable { code, message } => ApiError::Unavailable { code, message },
            AppError::Internal(error) => ApiError::Internal(error),
        }
    }
}

impl From<Invalid> for ApiError {
    fn from(invalid: Invalid) -> ApiError {
        ApiError::BadRequest(invalid)
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        ApiError::Internal(error.into())
    }
}

impl From<PricingError> for ApiError {
    fn from(error: PricingError) -> ApiError {
        ApiError::from(anchor_app::AppError::from(error))
    }
}

/// The longest message an error body carries; longer ones are cut (they never
/// should be: inputs are quoted with `anchor_domain::brief`).
const MESSAGE_MAX_CHARS: usize = 1_000;

fn body(code: &str, message: &str) -> Value {
    let message = if message.chars().count() > MESSAGE_MAX_CHARS {
        let mut cut: String = message.chars().take(MESSAGE_MAX_CHARS).collect();
        cut.push('…');
        cut
    } else {
        message.to_string()
    };
    json!({ "error_code": code, "message": message })
}

fn unauthorized_body(failure: AuthFailure, base: &str) -> Value {
    let documentation = format!("{base}/llms.txt");
    match failure {
        AuthFailure::Missing => json!({
            "error_code": "UNAUTHORIZED",
            "message": "this route needs an agent token: send Authorization: Bearer <auth_token>",
            "authentication": {
                "model": "register-then-bearer",
                "header": "Authorization: Bearer <auth_token>",
                "register": format!("{base}/v1/agent/register"),
                "note": "register once to receive auth_token and recovery_key, then send the token as a Bearer credential",
            },
            "documentation": documentation,
        }),
        AuthFailure::InvalidToken => json!({
            "error_code": "INVALID_TOKEN",
            "message": "the bearer token is not the current token of any agent",
            "authentication": {
                "model": "agent-bearer",
                "header": "Authorization: Bearer <auth_token>",
                "register": format!("{base}/v1/agent/register"),
                "recover": format!("{base}/v1/agent/token/recover"),
                "note": "a rotated or recovered token stops working at once; an agent that lost its token recovers it with agent_id and recovery_key",
            },
            "documentation": documentation,
        }),
        AuthFailure::InvalidRecoveryKey => json!({
            "error_code": "INVALID_RECOVERY_KEY",
            "message": "agent_id and recovery_key do not match",
            "authentication": {
                "model": "agent_id + recovery_key",
                "register": format!("{base}/v1/agent/register"),
                "recover": format!("{base}/v1/agent/token/recover"),
                "note": "the recovery key is the one issued at registration or at the last rotation or recovery",
            },
            "documentation": documentation,
        }),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        match self {
            ApiError::BadRequest(invalid) => (status, axum::Json(body(invalid.code, &invalid.message))).into_response(),
            ApiError::Unauthorized { failure, base_url } => {
                let mut response = (status, axum::Json(unauthorized_body(failure, &base_url))).into_response();
                response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                response
            }
            ApiError::OwnerUnauthorized { message } => (status, axum::Json(body("UNAUTHORIZED", &message))).into_response(),
            ApiError::Forbidden { code, message }
            | ApiError::NotFound { code, message }
            | ApiError::Conflict { code, message }
            | ApiError::Gone { code, message }
            | ApiError::Unavailable { code, message } => (status, axum::Json(body(code, &message))).into_response(),
            ApiError::TooManyRequests { message, retry_after_secs } => {
                let mut response = (status, axum::Json(body("RATE_LIMITED", &message))).into_response();
                if let Ok(value) = HeaderValue::from_str(&retry_after_secs.to_string()) {
                    response.headers_mut().insert(header::RETRY_AFTER, value);
                }
                response
            }
            ApiError::PaymentRequired(challenge) => crate::payment::challenge_response(challenge),
            ApiError::SettlementFailed { reason, payer } => {
                let mut response = (
                    status,
                    axum::Json(body(
                        "SETTLEMENT_FAILED",
                        &format!("the payment did not settle ({reason}); nothing was charged or anchored"),
                    )),
                )
                    .into_response();
                if let Ok(value) = HeaderValue::from_str(&anchor_x402::settle_response(false, "", &payer, Some(&reason))) {
                    response.headers_mut().insert("payment-response", value);
                }
                response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                response
            }
            ApiError::Protocol { code, message, allow, .. } => {
                let mut response = (status, axum::Json(body(code, &message))).into_response();
                if let Some(value) = allow.and_then(|a| HeaderValue::from_str(&a).ok()) {
                    response.headers_mut().insert(header::ALLOW, value);
                }
                response
            }
            ApiError::Internal(error) => {
                tracing::error!(error = format!("{error:#}"), "internal error");
                (status, axum::Json(body("INTERNAL_ERROR", "the service failed to handle this request; nothing was changed")))
                    .into_response()
            }
        }
    }
}
