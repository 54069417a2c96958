//! `AppError`: every way a use case can refuse, each with its documented
//! `error_code`. Front ends choose the status (HTTP) or shape (anything else);
//! the code and message are the same everywhere.

use anchor_domain::Invalid;
use anchor_domain::pricing::PricingError;
use anchor_ports::StoreError;

use crate::charge::PaymentRequired;

#[derive(Debug)]
pub enum AppError {
    /// The input breaks a rule (HTTP 400).
    Invalid(Invalid),
    /// An owner's password or session was not accepted (401 `UNAUTHORIZED`).
    Unauthenticated {
        message: String,
    },
    /// An agent token offered as proof (not as the request's credential) is
    /// not the agent's current one (401 `INVALID_TOKEN`).
    TokenRefused,
    /// Too many attempts at a secret in the window (429).
    RateLimited {
        message: String,
        retry_after_secs: u64,
    },
    /// Not allowed for this caller (403).
    Forbidden {
        code: &'static str,
        message: String,
    },
    NotFound {
        code: &'static str,
        message: String,
    },
    /// The state does not allow it (409).
    Conflict {
        code: &'static str,
        message: String,
    },
    /// Understood, but what it ran could not finish (422): a tool's run that
    /// failed, with the reason as its code.
    Unprocessable {
        code: &'static str,
        message: String,
    },
    /// Gone for good (410), such as an expired payment window.
    Gone {
        code: &'static str,
        message: String,
    },
    /// A balance could not pay a debit that has no x402 alternative (402,
    /// no challenge), such as a subscription's month from Earned DAC.
    Unpaid {
        code: &'static str,
        message: String,
    },
    /// Nothing that may pay for this has paid: the typed challenge.
    PaymentRequired(Box<PaymentRequired>),
    /// The payment was refused at settlement; nothing moved.
    SettlementFailed {
        reason: String,
        payer: String,
    },
    /// A dependency cannot answer now; nothing was recorded (503).
    Unavailable {
        code: &'static str,
        message: String,
    },
    /// This host is full for now (every slot of a shared resource taken,
    /// the line for them too); nothing was recorded (503 with Retry-After).
    Busy {
        code: &'static str,
        message: String,
        retry_after_secs: u64,
    },
    Internal(anyhow::Error),
}

impl AppError {
    pub fn invalid(code: &'static str, message: impl Into<String>) -> AppError {
        AppError::Invalid(Invalid::new(code, message))
    }

    pub fn forbidden(code: &'static str, message: impl Into<String>) -> AppError {
        AppError::Forbidden { code, message: message.into() }
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> AppError {
        AppError::NotFound { code, message: message.into() }
    }

    /// 429 for a quota of the UTC day spent at `now`: Retry-After counts to the next midnight.
    pub fn until_the_day_turns(message: String, now: chrono::DateTime<chrono::Utc>) -> AppError {
        let tomorrow = anchor_domain::ara::day_start_of(now) + chrono::Duration::days(1);
        AppError::RateLimited { message, retry_after_secs: (tomorrow - now).num_seconds().max(1) as u64 }
    }

    /// The documented `error_code`.
    pub fn code(&self) -> &str {
        match self {
            AppError::Invalid(invalid) => invalid.code,
            AppError::Forbidden { code, .. }
            | AppError::NotFound { code, .. }
            | AppError::Conflict { code, .. }
            | AppError::Unprocessable { code, .. }
            | AppError::Gone { code, .. }
            | AppError::Unpaid { code, .. }
            | AppError::Unavailable { code, .. }
            | AppError::Busy { code, .. } => code,
            AppError::Unauthenticated { .. } => "UNAUTHORIZED",
            AppError::TokenRefused => "INVALID_TOKEN",
            AppError::RateLimited { .. } => "RATE_LIMITED",
            AppError::PaymentRequired(_) => "PAYMENT_REQUIRED",
            AppError::SettlementFailed { .. } => "SETTLEMENT_FAILED",
            AppError::Internal(_) => "INTERNAL_ERROR",
        }
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppError::Invalid(invalid) => write!(f, "{invalid}"),
            AppError::Forbidden { message, .. }
            | AppError::NotFound { message, .. }
            | AppError::Conflict { message, .. }
            | AppError::Unprocessable { message, .. }
            | AppError::Gone { message, .. }
            | AppError::Unpaid { message, .. }
            | AppError::Unavailable { message, .. }
            | AppError::Busy { message, .. }
            | AppError::Unauthenticated { message }
            | AppError::RateLimited { message, .. } => write!(f, "{}: {message}", self.code()),
            AppError::TokenRefused => write!(f, "INVALID_TOKEN: the agent token is not the agent's current one"),
            AppError::PaymentRequired(required) => write!(f, "payment required: {} DAC for {}", required.amount, required.route),
            AppError::SettlementFailed { reason, .. } => write!(f, "settlement failed: {reason}"),
            AppError::Internal(error) => write!(f, "internal error: {error:#}"),
        }
    }
}

impl std::error::Error for AppError {}

impl From<Invalid> for AppError {
    fn from(invalid: Invalid) -> AppError {
        AppError::Invalid(invalid)
    }
}

impl From<StoreError> for AppError {
    fn from(error: StoreError) -> AppError {
        if error.is_transient() {
            // A failover, a restart, a lock, a deadlock's victim: said as 503
            // with Retry-After, so a client (and a load balancer) tries
            // again; never a 500.
            tracing::warn!(%error, "storage unavailable");
            return AppError::Busy {
                code: "STORAGE_UNAVAILABLE",
                message: "the database is not reachable, or could not take this request at the moment (nothing of it was kept); try again shortly (a create retried with its request_id, or a confirm retried, is recorded once)".into(),
                retry_after_secs: 2,
            };
        }
        AppError::Internal(error.into())
    }
}

impl From<PricingError> for AppError {
    fn from(error: PricingError) -> AppError {
        match error {
            PricingError::Refused { reason, .. } => AppError::invalid("INVALID_VALUE", reason),
            failed @ PricingError::Failed { .. } => {
                tracing::error!(error = %failed, "pricing unavailable");
                AppError::Unavailable {
                    code: "PRICING_UNAVAILABLE",
                    message: "the pricing generation could not price this request; nothing was recorded or charged".into(),
                }
            }
        }
    }
}
