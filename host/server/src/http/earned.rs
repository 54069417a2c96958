//! Earned DAC over HTTP: the agent's balance and its ledger
//! (`anchor_app::earned`). Both free.

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use anchor_app::earned;
use anchor_domain::earned::EntryKind;
use anchor_domain::payments::SubjectDomain;
use anchor_store::EarnedEntry;

use crate::error::ApiResult;
use crate::extract::{ApiQuery, AuthAgent};
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time};

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

/// The lot that expires next.
#[derive(Serialize, JsonSchema)]
struct NextExpiry {
    amount: Dac,
    expires_at: Time,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct BalanceView {
    /// Unexpired and unspent.
    earned_balance: Dac,
    /// Whether earned_balance reaches min_spend_threshold, so that Earned can pay.
    spendable: bool,
    min_spend_threshold: Dac,
    expiry_days: u32,
    /// Null when nothing is left to expire.
    next_expiry: Option<NextExpiry>,
    received_total: Dac,
    /// Debited, less refunds.
    spent_total: Dac,
    expired_total: Dac,
}

async fn balance(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Json<BalanceView>> {
    Ok(Json(balance_of(&state, &agent).await?))
}

/// The Earned DAC balance, as REST and the MCP tool get_dac_balance answer it.
pub(crate) async fn balance_of(state: &AppState, agent: &anchor_store::AgentRecord) -> ApiResult<BalanceView> {
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
struct LedgerQuery {
    #[schemars(extend("default" = 20, "minimum" = 1, "maximum" = 100))]
    limit: Option<i64>,
    #[schemars(extend("default" = 0, "minimum" = 0))]
    offset: Option<i64>,
}

/// What a ledger line is about.
#[derive(Serialize, JsonSchema)]
struct Reference {
    kind: Named<SubjectDomain>,
    id: Id,
}

#[derive(Serialize, JsonSchema)]
struct LedgerEntry {
    entry_id: Id,
    #[serde(rename = "type")]
    kind: Named<EntryKind>,
    reason: String,
    amount: Dac,
    /// The unexpired balance once this line was written.
    balance_after: Dac,
    /// The lot's expiry (credits and expiries); null otherwise.
    expires_at: Option<Time>,
    reference: Option<Reference>,
    at: Time,
}

#[derive(Serialize, JsonSchema)]
struct LedgerView {
    entries: Vec<LedgerEntry>,
    limit: i64,
    offset: i64,
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

async fn ledger(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiQuery(query): ApiQuery<LedgerQuery>,
) -> ApiResult<Json<LedgerView>> {
    let entries = earned::ledger(&state.app, &agent, query.limit, query.offset).await?;
    Ok(Json(LedgerView {
        entries: entries.iter().map(LedgerEntry::from).collect(),
        limit: query.limit.unwrap_or(20),
        offset: query.offset.unwrap_or(0),
    }))
}
