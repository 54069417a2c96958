//! Settling x402 payments: `local` (no chain; a deterministic reference) or
//! `facilitator` (the standard x402 facilitator HTTP API: `/supported`,
//! `/verify`, `/settle`).
//!
//! A settle call that times out, or whose answer cannot be read, leaves the
//! payment `settle_unknown`: the money may or may not have moved. It is
//! reconciled by settling the same authorization again: the chain refuses a
//! nonce it already used, so a second settle can never move money twice, and
//! "nonce already used" after an unknown outcome means the first one went
//! through.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

/// What a settle attempt established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Settled; the transaction reference.
    Yes { reference: String },
    /// Refused; nothing moved.
    No { reason: String },
    /// No readable answer: it may have moved.
    Unknown { detail: String },
}

/// Extra headers for facilitator calls (an API key, a signed JWT, …).
pub trait AuthHeaders: Send + Sync {
    fn headers(&self, method: &str, path: &str) -> Vec<(String, String)>;
}

/// One fixed header, or none.
pub struct StaticHeader(pub Option<(String, String)>);

impl AuthHeaders for StaticHeader {
    fn headers(&self, _method: &str, _path: &str) -> Vec<(String, String)> {
        self.0.clone().into_iter().collect()
    }
}

#[async_trait]
pub trait Settler: Send + Sync + 'static {
    /// `local` or `facilitator`.
    fn mode(&self) -> &'static str;
    /// Asks the settler whether it would accept the payment; `Err` carries the reason.
    async fn verify(&self, payload: &Value, requirements: &Value) -> Result<(), String>;
    /// Settles the payment whose payload is `payload` (its JSON text, as
    /// offered and recorded) to `requirements` (`None`: the terms the
    /// payload accepted). `local_reference` names it in local mode.
    async fn settle(&self, payload: &str, requirements: Option<&Value>, local_reference: &str) -> Settled;
}

/// Everything but the chain: verification happened in `x402::verify`.
pub struct LocalSettler;

#[async_trait]
impl Settler for LocalSettler {
    fn mode(&self) -> &'static str {
        "local"
    }
    async fn verify(&self, _payload: &Value, _requirements: &Value) -> Result<(), String> {
        Ok(())
    }
    async fn settle(&self, _payload: &str, _requirements: Option<&Value>, local_reference: &str) -> Settled {
        Settled::Yes { reference: local_reference.to_string() }
    }
}

/// A facilitator speaking the x402 v2 HTTP API.
pub struct FacilitatorSettler {
    base: String,
    http: reqwest::Client,
    auth: Arc<dyn AuthHeaders>,
    verify_timeout: Duration,
    settle_timeout: Duration,
}

impl FacilitatorSettler {
    /// Connects and checks `/supported` lists x402 v2 `exact` on Base.
    pub async fn connect(
        base: &str,
        auth: Arc<dyn AuthHeaders>,
        verify_timeout: Duration,
        settle_timeout: Duration,
    ) -> anyhow::Result<FacilitatorSettler> {
        let settler = FacilitatorSettler {
            base: base.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder().build()?,
            auth,
            verify_timeout,
            settle_timeout,
        };
        let mut request = settler.http.get(format!("{}/supported", settler.base)).timeout(verify_timeout);
        for (name, value) in settler.auth.headers("GET", "/supported") {
            request = request.header(name, value);
        }
        let supported: Value = request.send().await?.error_for_status()?.json().await?;
        let ok = supported["kinds"].as_array().is_some_and(|kinds| {
            kinds.iter().any(|k| k["x402Version"] == json!(2) && k["scheme"] == "exact" && k["network"] == crate::NETWORK)
        });
        anyhow::ensure!(ok, "facilitator {} does not support x402 v2 exact on {}", settler.base, crate::NETWORK);
        Ok(settler)
    }

    async fn post(&self, path: &str, body: &Value, timeout: Duration) -> Result<Value, String> {
        let mut request = self.http.post(format!("{}{path}", self.base)).json(body).timeout(timeout);
        for (name, value) in self.auth.headers("POST", path) {
            request = request.header(name, value);
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        response.json::<Value>().await.map_err(|e| e.to_string())
    }
}

fn request(payload: &Value, requirements: &Value) -> Value {
    json!({ "x402Version": 2, "paymentPayload": payload, "paymentRequirements": requirements })
}

#[async_trait]
impl Settler for FacilitatorSettler {
    fn mode(&self) -> &'static str {
        "facilitator"
    }

    async fn verify(&self, payload: &Value, requirements: &Value) -> Result<(), String> {
        let answer = self.post("/verify", &request(payload, requirements), self.verify_timeout).await?;
        if answer["isValid"] == json!(true) {
            Ok(())
        } else {
            Err(answer["invalidReason"].as_str().unwrap_or("invalid_payload").to_string())
        }
    }

    async fn settle(&self, payload: &str, requirements: Option<&Value>, _local_reference: &str) -> Settled {
        // Read only here, where it is sent: a payment recorded is JSON (an
        // object, checked when it was offered).
        let Ok(payload) = serde_json::from_str::<Value>(payload) else {
            return Settled::No { reason: "invalid_payload".into() };
        };
        let requirements = requirements.unwrap_or(&payload["accepted"]);
        match self.post("/settle", &request(&payload, requirements), self.settle_timeout).await {
            Err(detail) => Settled::Unknown { detail },
            Ok(answer) if answer["success"] == json!(true) => {
                Settled::Yes { reference: answer["transaction"].as_str().unwrap_or_default().to_string() }
            }
            Ok(answer) => {
                let reason = answer["errorReason"].as_str().unwrap_or("unexpected_settle_error").to_string();
                if reason == "settlement_pending" { Settled::Unknown { detail: reason } } else { Settled::No { reason } }
            }
        }
    }
}

/// The reason a facilitator gives when the chain already used the nonce.
pub const NONCE_USED: &str = "invalid_exact_evm_nonce_already_used";
