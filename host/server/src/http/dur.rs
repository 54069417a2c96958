//! DUR over HTTP: spending reports and reports of the agent's own decisions
//! (`anchor_app::dur`), and the owner's versions under `/dap/dur`. All free.

use crate::api::dur::*;
use crate::error::ApiResult;
use crate::extract::{ApiQuery, AuthAgent};
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;
use anchor_app::dur::{self};
use anchor_app::owners;
use anchor_domain::MilliDac;
use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::response::Response;
use axum::routing::get;

pub fn operations() -> Vec<Operation> {
    let decision_report = |path: &'static str, handler, summary, returns: fn(Operation) -> Operation| {
        returns(
            op(Method::GET, path, handler)
                .tag("DUR")
                .summary(summary)
                .describe("Over your own branch-1 decisions (those with a template). Free: dac_charged is 0 and nothing is counted.")
                .agent()
                .query::<DecisionQuery>()
                .error(400, "A malformed agent_id or bound.", &["INVALID_UUID", "INVALID_VALUE"])
                .error(403, "agent_id names another agent.", &["CROSS_AGENT_NOT_ALLOWED"]),
        )
    };
    vec![
        op(Method::GET, "/v1/dur/summary", get(summary))
            .tag("DUR")
            .summary("What you spent: by kind and by source, observations, settlements (free)")
            .describe(RANGE)
            .agent()
            .query::<RangeQuery>()
            .returns::<SummaryView>(200, "DAC usage summary for the range; total = the sum of the kinds = the sum of the sources")
            .error(400, "A malformed bound, or from after to.", &["INVALID_VALUE"]),
        op(Method::GET, "/v1/dur/transactions", get(transactions))
            .tag("DUR")
            .summary("Your usage entries, newest first, a page at a time (free)")
            .describe(RANGE)
            .agent()
            .query::<TransactionsQuery>()
            .returns::<TransactionsView>(200, "Transaction list")
            .error(400, "A malformed bound, type, page or limit.", &["INVALID_VALUE", "INVALID_ENUM"]),
        op(Method::GET, "/v1/dur/tsl", get(tsl))
            .tag("DUR")
            .summary("Your tool market money, newest first: what you paid for tools, what sales and revenue shares credited you (free)")
            .agent()
            .query::<TslQuery>()
            .returns::<TslView>(200, "TSL transaction history")
            .error(400, "A malformed bound, role, page or limit.", &["INVALID_VALUE", "INVALID_ENUM"]),
        op(Method::GET, "/v1/dur/export", get(export))
            .tag("DUR")
            .summary("Your usage entries as CSV (the default) or JSON (free)")
            .describe(RANGE)
            .agent()
            .query::<ExportQuery>()
            .ok_media(
                200,
                "The entries: CSV with the header recorded_at,type,cost_component,payment_source,amount_dac,subject_id, or JSON",
                "text/csv",
            )
            .or_returns::<ExportView>(200)
            .error(400, "A malformed bound or format.", &["INVALID_VALUE", "INVALID_ENUM"]),
        decision_report(
            "/v1/dur/decision-metadata",
            get(decision_metadata),
            "Your decisions by class, target, trigger and human involvement (free)",
            |o| o.returns::<MetadataView>(200, "Metadata distribution; dac_charged is 0"),
        ),
        decision_report("/v1/dur/decision-scale", get(decision_scale), "Your decision scales by unit: count, min, max, mean (free)", |o| {
            o.returns::<ScaleView>(200, "Scale distribution; exact decimals")
        }),
        decision_report("/v1/dur/self-classification", get(self_classification), "Your decisions by self_classification key (free)", |o| {
            o.returns::<ClassificationView>(200, "self_classification distribution")
        }),
        op(Method::GET, "/dap/dur/summary", get(owner_summary))
            .tag("DAP DUR")
            .summary("What one managed agent, or all of them, spent (free)")
            .describe(RANGE)
            .owner()
            .query::<OwnerSummaryQuery>()
            .returns::<SummaryView>(200, "DAC usage summary for the range")
            .error(400, "A malformed agent_id or bound.", &["INVALID_UUID", "INVALID_VALUE"])
            .error(403, "Not managed by this owner.", &["NOT_LINKED"]),
        op(Method::GET, "/dap/dur/export", get(owner_export))
            .tag("DAP DUR")
            .summary("A managed agent's usage entries as CSV (the default) or JSON (free)")
            .describe(RANGE)
            .owner()
            .query::<OwnerExportQuery>()
            .ok_media(200, "The entries as CSV, or JSON", "text/csv")
            .or_returns::<ExportView>(200)
            .error(
                400,
                "agent_id missing or malformed, or a malformed bound or format.",
                &["MISSING_FIELD", "INVALID_UUID", "INVALID_VALUE", "INVALID_ENUM"],
            )
            .error(403, "Not managed by this owner.", &["NOT_LINKED"]),
    ]
}

async fn summary(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiQuery(query): ApiQuery<RangeQuery>,
) -> ApiResult<Json<SummaryView>> {
    Ok(Json(usage_summary(&state, &agent, query).await?))
}

async fn transactions(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiQuery(query): ApiQuery<TransactionsQuery>,
) -> ApiResult<Json<TransactionsView>> {
    let (page, limit) = page(query.page, query.limit)?;
    let range = dur::range(&state.app, query.from.as_deref(), query.to.as_deref())?;
    let (lines, total) = dur::transactions(&state.app, &[agent.agent_id], range, query.kind.as_deref(), (page - 1) * limit, limit).await?;
    Ok(Json(TransactionsView { transactions: lines.iter().map(Transaction::from).collect(), page, limit, total }))
}

async fn tsl(State(state): State<AppState>, AuthAgent(agent): AuthAgent, ApiQuery(query): ApiQuery<TslQuery>) -> ApiResult<Json<TslView>> {
    let (page, limit) = page(query.page, query.limit)?;
    let range = dur::range(&state.app, query.from.as_deref(), query.to.as_deref())?;
    let (role, name) = match query.role.unwrap_or(Role::All) {
        Role::Buyer => (RoleView::Buyer, "buyer"),
        Role::Seller => (RoleView::Seller, "seller"),
        Role::All => (RoleView::All, "all"),
    };
    let (lines, total) = dur::tsl(&state.app, agent.agent_id, range, name, (page - 1) * limit, limit).await?;
    let transactions = lines
        .into_iter()
        .map(|l| TslTransaction {
            transaction_id: l.line_id,
            direction: l.direction,
            kind: "tsl",
            amount_dac: l.amount.into(),
            purchase_id: l.purchase_id,
            recorded_at: l.at.into(),
        })
        .collect();
    Ok(Json(TslView { role, transactions, page, limit, total }))
}

async fn export(State(state): State<AppState>, AuthAgent(agent): AuthAgent, ApiQuery(query): ApiQuery<ExportQuery>) -> ApiResult<Response> {
    let range = dur::range(&state.app, query.from.as_deref(), query.to.as_deref())?;
    export_of(&state, &[agent.agent_id], range, query.format.unwrap_or_default(), &format!("agent-{}", agent.agent_id)).await
}

async fn decision_metadata(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiQuery(query): ApiQuery<DecisionQuery>,
) -> ApiResult<Json<MetadataView>> {
    Ok(Json(metadata_distribution(&state, &agent, query).await?))
}

async fn decision_scale(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiQuery(query): ApiQuery<DecisionQuery>,
) -> ApiResult<Json<ScaleView>> {
    dur::own_only(agent.agent_id, query.agent_id.map(|a| a.0))?;
    let range = dur::range(&state.app, query.from.as_deref(), query.to.as_deref())?;
    let (range, stats) = dur::decision_scale(&state.app, agent.agent_id, range).await?;
    let units = stats
        .iter()
        .map(|s| Ok(UnitScale { unit: s.unit.clone(), count: s.count, min: number(&s.min)?, max: number(&s.max)?, avg: number(&s.avg)? }))
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(Json(ScaleView { agent_id: agent.agent_id, period: range.into(), units, dac_charged: MilliDac::ZERO.into() }))
}

async fn self_classification(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiQuery(query): ApiQuery<DecisionQuery>,
) -> ApiResult<Json<ClassificationView>> {
    Ok(Json(classification_distribution(&state, &agent, query).await?))
}

async fn owner_summary(
    State(state): State<AppState>,
    owner: AuthOwner,
    ApiQuery(query): ApiQuery<OwnerSummaryQuery>,
) -> ApiResult<Json<SummaryView>> {
    let summary =
        owners::reports::usage_summary(&state.app, &owner.owner, query.agent_id.map(|id| id.0), query.from.as_deref(), query.to.as_deref())
            .await?;
    Ok(Json(SummaryView::of(&summary, &state.settings.fiat)))
}

async fn owner_export(State(state): State<AppState>, owner: AuthOwner, ApiQuery(query): ApiQuery<OwnerExportQuery>) -> ApiResult<Response> {
    let agent_id = owners::managed(&state.app, &owner.owner, query.agent_id.0).await?.agent.agent_id;
    let range = dur::range(&state.app, query.from.as_deref(), query.to.as_deref())?;
    export_of(&state, &[agent_id], range, query.format.unwrap_or_default(), &format!("agent-{agent_id}")).await
}
