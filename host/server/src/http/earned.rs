//! Earned DAC over HTTP: the agent's balance and its ledger
//! (`anchor_app::earned`). Both free.

use crate::api::earned::*;
use crate::error::ApiResult;
use crate::extract::{ApiQuery, AuthAgent};
use crate::openapi::*;
use crate::state::AppState;
use anchor_app::earned;
use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;

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
    let entries = earned::ledger(&state.app, &agent, query.limit, query.offset).await?;
    Ok(Json(LedgerView {
        entries: entries.iter().map(LedgerEntry::from).collect(),
        limit: query.limit.unwrap_or(20),
        offset: query.offset.unwrap_or(0),
    }))
}
