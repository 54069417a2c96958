//! ise: the wire shapes of its operations (requests, answers) and the
//! function each runs, shared by REST (`http::ise`) and MCP.

use crate::error::ApiResult;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time};
use anchor_app::ise::{self, Terms};
use anchor_domain::ise::IseMode;
use anchor_domain::payments::PaymentSource;
use anchor_domain::records::AgentRecord;
use anchor_domain::records::IseRecord;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Default, Deserialize, JsonSchema)]
pub(crate) struct EnterRequest {
    /// free (the default), earned_only or external.
    #[schemars(extend("default" = "free"))]
    pub(crate) payment_mode: Option<Named<IseMode>>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Entered {
    pub(crate) session_id: Id,
    pub(crate) payment_mode: Named<IseMode>,
    pub(crate) entered_at: Time,
    /// A free stay ends by itself after this many seconds.
    pub(crate) free_seconds: i64,
    /// What exiting an earned_only or external stay costs, flat, whatever its length (free stays cost nothing).
    pub(crate) fee_dac: Dac,
    /// When the stay ends by itself if not exited.
    pub(crate) ends_at: Time,
}

pub(crate) fn ends_at(terms: &Terms, stay: &IseRecord) -> DateTime<Utc> {
    terms.limit(stay.mode, stay.entered_at)
}

/// ISE enter, as REST and the MCP tool create_ise_session answer it.
pub(crate) async fn enter_stay(state: &AppState, agent: &AgentRecord, request: Option<EnterRequest>) -> ApiResult<Entered> {
    let mode = request.unwrap_or_default().payment_mode.map(|m| m.0);
    let (stay, terms) = ise::enter(&state.app, agent, mode).await?;
    let view = Entered {
        session_id: Id(stay.session_id),
        payment_mode: Named(stay.mode),
        entered_at: stay.entered_at.into(),
        free_seconds: terms.free_seconds,
        fee_dac: terms.fee.into(),
        ends_at: ends_at(&terms, &stay).into(),
    };
    Ok(view)
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Status {
    pub(crate) active: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) session_id: Option<Id>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payment_mode: Option<Named<IseMode>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) entered_at: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) elapsed_seconds: Option<i64>,
    /// What exiting now would cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dac_if_exited_now: Option<Dac>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ends_at: Option<Time>,
}

/// ISE status, as REST and the MCP tool get_ise_status answer it.
pub(crate) async fn stay_status(state: &AppState, agent: &AgentRecord) -> ApiResult<Status> {
    let (open, terms) = ise::status(&state.app, agent).await?;
    let now = state.app.clock.now();
    Ok(match open {
        None => Status {
            active: false,
            session_id: None,
            payment_mode: None,
            entered_at: None,
            elapsed_seconds: None,
            dac_if_exited_now: None,
            ends_at: None,
        },
        Some(stay) => Status {
            active: true,
            session_id: Some(Id(stay.session_id)),
            payment_mode: Some(Named(stay.mode)),
            entered_at: Some(stay.entered_at.into()),
            elapsed_seconds: Some((now - stay.entered_at).num_seconds().max(0)),
            dac_if_exited_now: Some(terms.price(stay.mode).into()),
            ends_at: Some(ends_at(&terms, &stay).into()),
        },
    })
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Exited {
    pub(crate) session_id: Id,
    pub(crate) payment_mode: Named<IseMode>,
    pub(crate) entered_at: Time,
    pub(crate) exited_at: Time,
    pub(crate) duration_seconds: i64,
    pub(crate) dac_charged: Dac,
    /// trial, external or earned; null when nothing was charged.
    pub(crate) payment_source: Option<Named<PaymentSource>>,
}

/// ISE exit, as REST and the MCP tool exit_ise_session answer it, with the
/// settlement (reference, payer) an external payment got.
pub(crate) async fn exit_stay(
    state: &AppState,
    agent: &AgentRecord,
    offered: anchor_app::charge::Offered,
) -> ApiResult<(Exited, Option<anchor_app::charge::Settlement>)> {
    let (stay, settlement) = ise::exit(&state.app, agent, offered).await?;
    let exited_at = stay.exited_at.unwrap_or(stay.entered_at);
    let view = Exited {
        session_id: Id(stay.session_id),
        payment_mode: Named(stay.mode),
        entered_at: stay.entered_at.into(),
        exited_at: exited_at.into(),
        duration_seconds: (exited_at - stay.entered_at).num_seconds(),
        dac_charged: stay.charged.into(),
        payment_source: stay.source.map(Named),
    };
    Ok((view, settlement))
}
