//! `ApiError`: every failure a handler can answer, with its status and documented
//! `error_code`. Internal failures are logged once and answered with a fixed
//! message; nothing about the database or a plugin leaks to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Serialize;

use anchor_app::AppError;

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

/// A failure as HTTP answers it: a use case's refusal ([`AppError`], whose
/// variants carry the codes every front end shares), or one of the refusals
/// only HTTP has (authentication, rate limits, the protocol itself).
#[derive(Debug)]
pub enum ApiError {
    /// 400, 402, 403, 404, 409, 410, 503 or 500, by the variant.
    App(AppError),
    Unauthorized {
        failure: AuthFailure,
        base_url: String,
    },
    TooManyRequests {
        message: String,
        retry_after_secs: u64,
    },
    /// A refusal at the protocol level: 408, 413, 414, 431, 405 (with the path's
    /// methods in `Allow`).
    Protocol {
        status: StatusCode,
        code: &'static str,
        message: String,
        allow: Option<String>,
    },
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn bad(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::App(AppError::invalid(code, message))
    }

    pub fn forbidden(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::App(AppError::forbidden(code, message))
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::App(AppError::not_found(code, message))
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::App(AppError::Conflict { code, message: message.into() })
    }

    pub fn unavailable(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::App(AppError::Unavailable { code, message: message.into() })
    }

    pub fn internal(error: impl Into<anyhow::Error>) -> ApiError {
        ApiError::App(AppError::Internal(error.into()))
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::App(error) => match error {
                AppError::Invalid(_) => StatusCode::BAD_REQUEST,
                AppError::Unauthenticated { .. } | AppError::TokenRefused => StatusCode::UNAUTHORIZED,
                AppError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
                AppError::Forbidden { .. } => StatusCode::FORBIDDEN,
                AppError::NotFound { .. } => StatusCode::NOT_FOUND,
                AppError::Conflict { .. } => StatusCode::CONFLICT,
                AppError::Unprocessable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
                AppError::Gone { .. } => StatusCode::GONE,
                AppError::PaymentRequired(_) | AppError::SettlementFailed { .. } | AppError::Unpaid { .. } => StatusCode::PAYMENT_REQUIRED,
                AppError::Unavailable { .. } | AppError::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
                AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            ApiError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Protocol { status, .. } => *status,
        }
    }
}

/// Everything a use case, the domain, the store or the pricing component
/// refuses with reaches HTTP through [`AppError`] and its one mapping.
impl<E: Into<AppError>> From<E> for ApiError {
    fn from(error: E) -> ApiError {
        ApiError::App(error.into())
    }
}

/// A refusal already answered as JSON (`error_code` and `message`),
/// answered instead as concise problem details (RFC 9290, CBOR) for
/// clients that speak COSE: the title `title` gives its code, else its
/// status's name; the detail its message; the status and headers (such as
/// Retry-After) kept.
pub async fn concise_problem(response: Response, title: impl Fn(&str) -> Option<&'static str>) -> Response {
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024).await.unwrap_or_default();
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let code = json.get("error_code").and_then(|c| c.as_str()).unwrap_or("ERROR");
    let detail = json.get("message").and_then(|m| m.as_str()).unwrap_or_else(|| parts.status.canonical_reason().unwrap_or("Error"));
    let title = title(code).unwrap_or_else(|| parts.status.canonical_reason().unwrap_or("Error"));
    let body = anchor_verify::cose::coded_problem(title, detail, code);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/concise-problem-details+cbor"));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// Whether a request speaks COSE (its body is COSE, or it accepts COSE or
/// CBOR answers), so its refusals are best said as concise problem details.
pub fn speaks_cose(headers: &axum::http::HeaderMap) -> bool {
    let has = |name: header::HeaderName| {
        headers.get_all(name).iter().any(|v| v.to_str().is_ok_and(|v| v.contains("application/cose") || v.contains("application/cbor")))
    };
    has(header::CONTENT_TYPE) || has(header::ACCEPT)
}

/// The longest message an error body carries; longer ones are cut (they never
/// should be: inputs are quoted with `anchor_domain::brief`).
const MESSAGE_MAX_CHARS: usize = 1_000;

/// Every refusal's body.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(rename = "Error")]
pub struct ErrorBody {
    /// UPPER_SNAKE code naming the failure.
    pub error_code: String,
    /// What went wrong and what to do instead.
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: &str, message: &str) -> ErrorBody {
        let message = if message.chars().count() > MESSAGE_MAX_CHARS {
            let mut cut: String = message.chars().take(MESSAGE_MAX_CHARS).collect();
            cut.push('…');
            cut
        } else {
            message.to_string()
        };
        ErrorBody { error_code: code.to_string(), message }
    }
}

/// The code of a failed agent authentication.
#[derive(Clone, Copy, Debug, Serialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AuthCode {
    Unauthorized,
    InvalidToken,
    InvalidRecoveryKey,
}

/// How to authenticate, in a 401 of an agent route.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct AuthGuide {
    pub model: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header: Option<&'static str>,
    #[schemars(url)]
    pub register: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(url)]
    pub recover: Option<String>,
    pub note: &'static str,
}

/// A 401 of an agent route: what failed and how to authenticate.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct UnauthorizedBody {
    pub error_code: AuthCode,
    pub message: &'static str,
    pub authentication: AuthGuide,
    #[schemars(url)]
    pub documentation: String,
}

fn body(code: &str, message: &str) -> axum::Json<ErrorBody> {
    axum::Json(ErrorBody::new(code, message))
}

fn unauthorized_body(failure: AuthFailure, base: &str) -> UnauthorizedBody {
    let documentation = format!("{base}/llms.txt");
    let register = format!("{base}/v1/agent/register");
    let recover = Some(format!("{base}/v1/agent/token/recover"));
    let (error_code, message, authentication) = match failure {
        AuthFailure::Missing => (
            AuthCode::Unauthorized,
            "this route needs an agent token: send Authorization: Bearer <auth_token>",
            AuthGuide {
                model: "register-then-bearer",
                header: Some("Authorization: Bearer <auth_token>"),
                register,
                recover: None,
                note: "register once to receive auth_token and recovery_key, then send the token as a Bearer credential",
            },
        ),
        AuthFailure::InvalidToken => (
            AuthCode::InvalidToken,
            "the bearer token is not the current token of any agent",
            AuthGuide {
                model: "agent-bearer",
                header: Some("Authorization: Bearer <auth_token>"),
                register,
                recover,
                note: "a rotated or recovered token stops working at once; an agent that lost its token recovers it with agent_id and recovery_key",
            },
        ),
        AuthFailure::InvalidRecoveryKey => (
            AuthCode::InvalidRecoveryKey,
            "agent_id and recovery_key do not match",
            AuthGuide {
                model: "agent_id + recovery_key",
                header: None,
                register,
                recover,
                note: "the recovery key is the one issued at registration or at the last rotation or recovery",
            },
        ),
    };
    UnauthorizedBody { error_code, message, authentication, documentation }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        match self {
            ApiError::Unauthorized { failure, base_url } => {
                let mut response = (status, axum::Json(unauthorized_body(failure, &base_url))).into_response();
                response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                response
            }
            // An owner's password or session: error_code and message only, without the agent-token guidance.
            ApiError::App(AppError::Unauthenticated { message }) => (status, body("UNAUTHORIZED", &message)).into_response(),
            ApiError::App(AppError::TokenRefused) => (
                status,
                body(
                    "INVALID_TOKEN",
                    "the agent token is not the agent's current token; an agent that lost it recovers it with POST /v1/agent/token/recover",
                ),
            )
                .into_response(),
            ApiError::App(AppError::RateLimited { message, retry_after_secs })
            | ApiError::TooManyRequests { message, retry_after_secs } => {
                let mut response = (status, body("RATE_LIMITED", &message)).into_response();
                if let Ok(value) = HeaderValue::from_str(&retry_after_secs.to_string()) {
                    response.headers_mut().insert(header::RETRY_AFTER, value);
                }
                response
            }
            ApiError::App(AppError::Busy { code, message, retry_after_secs }) => {
                let mut response = (status, body(code, &message)).into_response();
                if let Ok(value) = HeaderValue::from_str(&retry_after_secs.to_string()) {
                    response.headers_mut().insert(header::RETRY_AFTER, value);
                }
                response
            }
            ApiError::App(AppError::Invalid(invalid)) => (status, body(invalid.code, &invalid.message)).into_response(),
            ApiError::App(
                AppError::Forbidden { code, message }
                | AppError::NotFound { code, message }
                | AppError::Conflict { code, message }
                | AppError::Unprocessable { code, message }
                | AppError::Gone { code, message }
                | AppError::Unpaid { code, message }
                | AppError::Unavailable { code, message },
            ) => (status, body(code, &message)).into_response(),
            ApiError::App(AppError::PaymentRequired(required)) => crate::x402_headers::challenge_response(required.challenge()),
            ApiError::App(AppError::SettlementFailed { reason, payer }) => {
                let mut response =
                    (status, body("SETTLEMENT_FAILED", &format!("the payment did not settle ({reason}); nothing was charged or anchored")))
                        .into_response();
                if let Ok(value) = HeaderValue::from_str(&anchor_x402::settle_response(false, "", &payer, Some(&reason), None)) {
                    response.headers_mut().insert("payment-response", value);
                }
                response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                response
            }
            ApiError::Protocol { code, message, allow, .. } => {
                let mut response = (status, body(code, &message)).into_response();
                if let Some(value) = allow.and_then(|a| HeaderValue::from_str(&a).ok()) {
                    response.headers_mut().insert(header::ALLOW, value);
                }
                response
            }
            ApiError::App(AppError::Internal(error)) => {
                tracing::error!(error = format!("{error:#}"), "internal error");
                (status, body("INTERNAL_ERROR", "the service failed to handle this request; nothing was changed")).into_response()
            }
        }
    }
}
