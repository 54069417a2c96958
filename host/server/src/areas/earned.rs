//! Earned DAC: the agent's balance and its ledger
//! (`anchor_app::earned`). Both free.
//!
//! Its wire shapes and the function each operation runs are one set, served
//! by the route table here and by the MCP tools (`mcp/`) alike.

use crate::error::ApiResult;
use crate::extract::{ApiQuery, AuthAgent};
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time};
use anchor_app::earned;
use anchor_domain::earned::EntryKind;
use anchor_domain::payments::SubjectDomain;
use anchor_domain::records::EarnedEntry;
use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The lot that expires next.
#[derive(Serialize, JsonSchema)]
pub(crate) struct NextExpiry {
    pub(crate) amount: Dac,
    pub(crate) expires_at: Time,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct BalanceView {
    /// Unexpired and unspent.
    pub(crate) earned_balance: Dac,
    /// Whether earned_balance reaches min_spend_threshold, so that Earned can pay.
    pub(crate) spendable: bool,
    pub(crate) min_spend_threshold: Dac,
    pub(crate) expiry_days: u32,
    /// Null when nothing is left to expire.
    pub(crate) next_expiry: Option<NextExpiry>,
    pub(crate) received_total: Dac,
    /// Debited, less refunds.
    pub(crate) spent_total: Dac,
    pub(crate) expired_total: Dac,
}

/// The Earned DAC balance, as REST and the MCP tool get_dac_balance answer it.
pub(crate) async fn balance_of(state: &AppState, agent: &anchor_domain::records::AgentRecord) -> ApiResult<BalanceView> {
    let b = earned::balance(&state.app, agent).await?;
    Ok(BalanceView {
        earned_balance: b.totals.balance.into(),
        spendable: b.spendable,
        min_spend_threshold: b.terms.threshold.into(),
        expiry_days: b.terms.expiry_days,
        next_expiry: b.totals.next_expiry.map(|(amount, at)| NextExpiry { amount: amount.into(), expires_at: at.into() }),
        received_total: b.totals.received.into(),
        spent_total: b.totals.spent.into(),
        expired_total: b.totals.expired.into(),
    })
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct LedgerQuery {
    #[schemars(extend("default" = 20, "minimum" = 1, "maximum" = 100))]
    pub(crate) limit: Option<i64>,
    #[schemars(extend("default" = 0, "minimum" = 0))]
    pub(crate) offset: Option<i64>,
}

/// What a ledger line is about.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Reference {
    pub(crate) kind: Named<SubjectDomain>,
    pub(crate) id: Id,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct LedgerEntry {
    pub(crate) entry_id: Id,
    #[serde(rename = "type")]
    pub(crate) kind: Named<EntryKind>,
    pub(crate) reason: String,
    pub(crate) amount: Dac,
    /// The unexpired balance once this line was written.
    pub(crate) balance_after: Dac,
    /// The lot's expiry (credits and expiries); null otherwise.
    pub(crate) expires_at: Option<Time>,
    pub(crate) reference: Option<Reference>,
    pub(crate) at: Time,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct LedgerView {
    pub(crate) entries: Vec<LedgerEntry>,
    pub(crate) limit: i64,
    pub(crate) offset: i64,
}

impl From<&EarnedEntry> for LedgerEntry {
    fn from(e: &EarnedEntry) -> LedgerEntry {
        LedgerEntry {
            entry_id: Id(e.entry_id),
            kind: Named(e.kind),
            reason: e.reason.clone(),
            amount: e.amount.into(),
            balance_after: e.balance_after.into(),
            expires_at: e.expires_at.map(Time::from),
            reference: e.reference.map(|r| Reference { kind: Named(r.domain), id: Id(r.id) }),
            at: e.at.into(),
        }
    }
}

// ---- over HTTP ----

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/v1/earned-dac/balance", get(balance))
            .tag("Earned DAC")
            .summary("Your Earned DAC: what is left, whether you may spend it, what expires next (free)")
            .describe(
                "Earned DAC comes from sales in the tool market. It pays resolution surcharges, ISE stays and ASA, never a base fee; \
                 it is spendable only while the unexpired balance reaches min_spend_threshold, and each credit expires expiry_days after it was earned. \
                 It cannot be transferred or converted.",
            )
            .agent()
            .returns::<BalanceView>(200, "Balance info"),
        op(Method::GET, "/v1/earned-dac/ledger", get(ledger))
            .tag("Earned DAC")
            .summary("Your Earned DAC ledger, newest first: credits, debits, expiries and refunds (free)")
            .agent()
            .query::<LedgerQuery>()
            .returns::<LedgerView>(200, "Ledger entries")
            .error(400, "limit outside 1 to 100, or a negative offset.", &["INVALID_VALUE"]),
    ]
}

async fn balance(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Json<BalanceView>> {
    Ok(Json(balance_of(&state, &agent).await?))
}

async fn ledger(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiQuery(query): ApiQuery<LedgerQuery>,
) -> ApiResult<Json<LedgerView>> {
    let page = earned::ledger(&state.app, &agent, query.limit, query.offset).await?;
    Ok(Json(LedgerView { entries: page.entries.iter().map(LedgerEntry::from).collect(), limit: page.limit, offset: page.offset }))
}
