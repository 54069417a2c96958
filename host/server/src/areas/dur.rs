//! DUR: spending reports and reports of the agent's own decisions
//! (`anchor_app::dur`), and the owner's versions under `/dap/dur`. All free.
//!
//! Its wire shapes and the function each operation runs are one set, served
//! by the route table here and by the MCP tools (`mcp/`) alike.

use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiQuery, AuthAgent};
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time};
use anchor_app::dur::{self, Range, Summary};
use anchor_app::owners;
use anchor_domain::MilliDac;
use anchor_domain::payments::{CostComponent, PaymentSource};
use anchor_domain::records::UsageLine;
use axum::Json;
use axum::extract::State;
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

pub(crate) const RANGE: &str = "from and to take a date (YYYY-MM-DD, UTC; a to date includes that whole day) or an ISO 8601 time (a to time is exclusive); by default the three months up to now.";

#[derive(Deserialize, JsonSchema)]
pub(crate) struct RangeQuery {
    /// Start (inclusive): a date or an ISO 8601 time.
    pub(crate) from: Option<String>,
    /// End: a date (that whole day included) or an ISO 8601 time (exclusive).
    pub(crate) to: Option<String>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ReportPeriod {
    pub(crate) from: Time,
    pub(crate) to: Time,
}

impl From<Range> for ReportPeriod {
    fn from(r: Range) -> ReportPeriod {
        ReportPeriod { from: r.from.into(), to: r.to.into() }
    }
}

#[derive(Serialize, JsonSchema, Clone)]
pub(crate) struct BySource {
    pub(crate) trial: Dac,
    pub(crate) external: Dac,
    pub(crate) earned: Dac,
}

/// DAC spent in the range, by kind and by source (usage entries).
#[derive(Serialize, JsonSchema, Clone)]
pub(crate) struct DacSpend {
    pub(crate) total: Dac,
    /// Usage entries.
    pub(crate) count: i64,
    pub(crate) dd_ee: Dac,
    pub(crate) ara: Dac,
    pub(crate) ise: Dac,
    pub(crate) sdac: Dac,
    pub(crate) tsl: Dac,
    pub(crate) asa: Dac,
    pub(crate) by_source: BySource,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct AraObservations {
    pub(crate) count: i64,
    pub(crate) total_dac: Dac,
    pub(crate) external_dac: Dac,
    pub(crate) earned_dac: Dac,
}

/// From the Earned ledger: what the range credited (sales and revenue
/// shares), what usage it paid, and how many ledger lines moved money.
#[derive(Serialize, JsonSchema)]
pub(crate) struct EarnedDac {
    pub(crate) received: Dac,
    pub(crate) spent: Dac,
    /// Credits, debits and refunds in the range (expiries are not transactions).
    pub(crate) tx_count: i64,
}

/// The rate of a local-currency estimate: where it came from and when it
/// was taken (for the service's fixed indicative rate, when it was set).
#[derive(Serialize, JsonSchema)]
pub(crate) struct KrwRate {
    /// Won per US dollar, exact.
    pub(crate) krw_per_usd: serde_json::Number,
    pub(crate) as_of: Time,
    pub(crate) source: String,
}

impl KrwRate {
    pub(crate) fn of(rate: &crate::x402_headers::FiatRate) -> KrwRate {
        KrwRate {
            krw_per_usd: rate.text().parse().unwrap_or_else(|_| serde_json::Number::from(0)),
            as_of: Time(rate.as_of),
            source: rate.source.clone(),
        }
    }
}

/// An indication in Korean won of the external spending, at `rate_info`.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Fiat {
    pub(crate) approx_krw: i64,
    /// Deprecated: the same as approx_krw.
    pub(crate) total_krw: i64,
    pub(crate) external_dac: Dac,
    pub(crate) payment_count: i64,
    /// Won per US dollar (`rate_info` says where it came from).
    pub(crate) rate: serde_json::Number,
    /// US dollars per DAC (fixed by the interface).
    pub(crate) unit_price: serde_json::Number,
    pub(crate) rate_info: KrwRate,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Settlements {
    pub(crate) tx_count: usize,
    /// On-chain transaction references, newest first.
    pub(crate) tx_hashes: Vec<String>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct SummaryView {
    pub(crate) period: ReportPeriod,
    /// Declarations anchored in the range and on record.
    pub(crate) dd_count: i64,
    pub(crate) dac_spend: DacSpend,
    pub(crate) ara_observations: AraObservations,
    /// Deprecated: the same object as dac_spend.
    pub(crate) external_dac: DacSpend,
    pub(crate) earned_dac: EarnedDac,
    pub(crate) fiat: Fiat,
    pub(crate) settlement: Settlements,
    pub(crate) dac_charged: Dac,
}

impl SummaryView {
    pub(crate) fn of(s: &Summary, fiat: &crate::x402_headers::FiatRate) -> SummaryView {
        let spend = DacSpend {
            total: s.total().into(),
            count: s.entries(),
            dd_ee: s.by_kind("dd_ee").into(),
            ara: s.by_kind("ara").into(),
            ise: s.by_kind("ise").into(),
            sdac: s.by_kind("sdac").into(),
            tsl: s.by_kind("tsl").into(),
            asa: s.by_kind("asa").into(),
            by_source: BySource {
                trial: s.by_source(PaymentSource::Trial).into(),
                external: s.by_source(PaymentSource::External).into(),
                earned: s.by_source(PaymentSource::Earned).into(),
            },
        };
        let o = s.observations;
        let external = s.by_source(PaymentSource::External);
        SummaryView {
            period: s.range.into(),
            dd_count: s.declarations,
            ara_observations: AraObservations {
                count: o.count,
                total_dac: (o.base + o.premium_external + o.premium_earned).into(),
                external_dac: (o.base + o.premium_external).into(),
                earned_dac: o.premium_earned.into(),
            },
            external_dac: spend.clone(),
            dac_spend: spend,
            earned_dac: EarnedDac {
                received: s.earned.received.into(),
                spent: s.by_source(PaymentSource::Earned).into(),
                tx_count: s.earned.transactions,
            },
            fiat: Fiat {
                approx_krw: fiat.krw(external),
                total_krw: fiat.krw(external),
                external_dac: external.into(),
                payment_count: s.external_entries(),
                rate: fiat.text().parse().unwrap_or_else(|_| serde_json::Number::from(0)),
                unit_price: "0.001".parse().unwrap_or_else(|_| serde_json::Number::from(0)),
                rate_info: KrwRate::of(fiat),
            },
            settlement: Settlements { tx_count: s.settlements.len(), tx_hashes: s.settlements.clone() },
            dac_charged: MilliDac::ZERO.into(),
        }
    }
}

/// The usage summary (DAC-UR), as REST and the MCP tool get_dac_ur answer it.
pub(crate) async fn usage_summary(
    state: &AppState,
    agent: &anchor_domain::records::AgentRecord,
    query: RangeQuery,
) -> ApiResult<SummaryView> {
    let range = dur::range(&state.app, query.from.as_deref(), query.to.as_deref())?;
    let summary = dur::summary(&state.app, &[agent.agent_id], range).await?;
    Ok(SummaryView::of(&summary, &state.settings.fiat))
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct TransactionsQuery {
    pub(crate) from: Option<String>,
    pub(crate) to: Option<String>,
    /// One kind: dd_ee, ara, ise, sdac, tsl or asa.
    #[schemars(extend("enum" = ["dd_ee", "ara", "ise", "sdac", "tsl", "asa"]))]
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    #[schemars(range(min = 1), extend("default" = 1))]
    pub(crate) page: Option<i64>,
    /// Above 200 the page holds 200; the answer's limit is the size used.
    #[schemars(range(min = 1), extend("default" = 50))]
    pub(crate) limit: Option<i64>,
}

/// One usage entry.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Transaction {
    pub(crate) transaction_id: Uuid,
    /// The kind: dd_ee, ara, ise, sdac, tsl or asa.
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) cost_component: Named<CostComponent>,
    pub(crate) payment_source: Named<PaymentSource>,
    pub(crate) amount_dac: Dac,
    /// What was paid for (a declaration, an observation, …).
    pub(crate) subject_id: Uuid,
    pub(crate) recorded_at: Time,
}

impl From<&UsageLine> for Transaction {
    fn from(l: &UsageLine) -> Transaction {
        Transaction {
            transaction_id: l.usage_id,
            kind: dur::kind_of(l.domain),
            cost_component: Named(l.cost_component),
            payment_source: Named(l.source),
            amount_dac: l.amount.into(),
            subject_id: l.subject_id,
            recorded_at: l.recorded_at.into(),
        }
    }
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct TransactionsView {
    pub(crate) transactions: Vec<Transaction>,
    pub(crate) page: i64,
    pub(crate) limit: i64,
    pub(crate) total: i64,
}

#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    Buyer,
    Seller,
    All,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct TslQuery {
    pub(crate) from: Option<String>,
    pub(crate) to: Option<String>,
    #[schemars(extend("default" = "all"))]
    pub(crate) role: Option<Role>,
    #[schemars(range(min = 1), extend("default" = 1))]
    pub(crate) page: Option<i64>,
    /// Above 200 the page holds 200; the answer's limit is the size used.
    #[schemars(range(min = 1), extend("default" = 50))]
    pub(crate) limit: Option<i64>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RoleView {
    Buyer,
    Seller,
    All,
}

/// One movement of tool-market money.
#[derive(Serialize, JsonSchema)]
pub(crate) struct TslTransaction {
    pub(crate) transaction_id: Uuid,
    /// paid: a purchase (paid over x402); received: a sale's or a revenue share's credit (Earned DAC).
    pub(crate) direction: String,
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) amount_dac: Dac,
    pub(crate) purchase_id: Uuid,
    pub(crate) recorded_at: Time,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct TslView {
    pub(crate) role: RoleView,
    /// What you paid for tools and what your sales and revenue shares credited you, newest first.
    pub(crate) transactions: Vec<TslTransaction>,
    pub(crate) page: i64,
    pub(crate) limit: i64,
    pub(crate) total: i64,
}

#[derive(Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Format {
    #[default]
    Csv,
    Json,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct ExportQuery {
    pub(crate) from: Option<String>,
    pub(crate) to: Option<String>,
    #[schemars(extend("default" = "csv"))]
    pub(crate) format: Option<Format>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ExportView {
    pub(crate) period: ReportPeriod,
    pub(crate) transactions: Vec<Transaction>,
    pub(crate) total: i64,
}

/// The entries of `agents` in `range`, as CSV or JSON.
pub(crate) async fn export_of(state: &AppState, agents: &[Uuid], range: Range, format: Format, name: &str) -> ApiResult<Response> {
    let (lines, total) = dur::export_lines(&state.app, agents, range).await?;
    match format {
        Format::Json => {
            Ok(Json(ExportView { period: range.into(), transactions: lines.iter().map(Transaction::from).collect(), total })
                .into_response())
        }
        Format::Csv => {
            let mut csv = String::from("recorded_at,type,cost_component,payment_source,amount_dac,subject_id\n");
            // Oldest first; every value is a time, a name, a number or a UUID.
            for l in lines.iter().rev() {
                csv.push_str(&format!(
                    "{},{},{},{},{},{}\n",
                    Time(l.recorded_at).text(),
                    dur::kind_of(l.domain),
                    l.cost_component,
                    l.source,
                    l.amount,
                    l.subject_id
                ));
            }
            Ok((
                [
                    (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
                    (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{name}-dur.csv\"")),
                ],
                csv,
            )
                .into_response())
        }
    }
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct DecisionQuery {
    /// Your own id, or left out: other agents' decisions are not reported.
    pub(crate) agent_id: Option<Id>,
    pub(crate) from: Option<String>,
    pub(crate) to: Option<String>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct MetadataView {
    pub(crate) agent_id: Uuid,
    pub(crate) period: ReportPeriod,
    /// Branch-1 decisions in the range.
    pub(crate) dd_count: i64,
    pub(crate) decision_class: BTreeMap<String, i64>,
    pub(crate) target_class: BTreeMap<String, i64>,
    pub(crate) decision_trigger: BTreeMap<String, i64>,
    pub(crate) human_involvement: BTreeMap<String, i64>,
    pub(crate) dac_charged: Dac,
}

pub(crate) fn counts_of(counts: &dur::TemplateCounts, dimension: &str) -> BTreeMap<String, i64> {
    counts.counts.iter().filter(|(d, _, _)| d == dimension).map(|(_, v, n)| (v.clone(), *n)).collect()
}

/// The decision-metadata report, as REST and the MCP tool
/// get_decision_metadata_distribution answer it.
pub(crate) async fn metadata_distribution(
    state: &AppState,
    agent: &anchor_domain::records::AgentRecord,
    query: DecisionQuery,
) -> ApiResult<MetadataView> {
    dur::own_only(agent.agent_id, query.agent_id.map(|a| a.0))?;
    let range = dur::range(&state.app, query.from.as_deref(), query.to.as_deref())?;
    let counts = dur::template_counts(&state.app, agent.agent_id, range).await?;
    Ok(MetadataView {
        agent_id: agent.agent_id,
        period: range.into(),
        dd_count: counts.decisions,
        decision_class: counts_of(&counts, "decision_class"),
        target_class: counts_of(&counts, "target_class"),
        decision_trigger: counts_of(&counts, "decision_trigger"),
        human_involvement: counts_of(&counts, "human_involvement"),
        dac_charged: MilliDac::ZERO.into(),
    })
}

/// The decision scales of one unit.
#[derive(Serialize, JsonSchema)]
pub(crate) struct UnitScale {
    pub(crate) unit: String,
    pub(crate) count: i64,
    pub(crate) min: serde_json::Number,
    pub(crate) max: serde_json::Number,
    /// The mean, to six decimal places.
    pub(crate) avg: serde_json::Number,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ScaleView {
    pub(crate) agent_id: Uuid,
    pub(crate) period: ReportPeriod,
    pub(crate) units: Vec<UnitScale>,
    pub(crate) dac_charged: Dac,
}

pub(crate) fn number(text: &str) -> ApiResult<serde_json::Number> {
    text.parse().map_err(|_| ApiError::internal(anyhow::anyhow!("{text} is not a JSON number")))
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ClassificationView {
    pub(crate) agent_id: Uuid,
    pub(crate) period: ReportPeriod,
    /// Branch-1 decisions in the range.
    pub(crate) dd_count: i64,
    /// Those with a self_classification key.
    pub(crate) classified_count: i64,
    pub(crate) distribution: BTreeMap<String, i64>,
    pub(crate) dac_charged: Dac,
}

/// The self-classification report, as REST and the MCP tool
/// get_self_classification_distribution answer it.
pub(crate) async fn classification_distribution(
    state: &AppState,
    agent: &anchor_domain::records::AgentRecord,
    query: DecisionQuery,
) -> ApiResult<ClassificationView> {
    dur::own_only(agent.agent_id, query.agent_id.map(|a| a.0))?;
    let range = dur::range(&state.app, query.from.as_deref(), query.to.as_deref())?;
    let counts = dur::template_counts(&state.app, agent.agent_id, range).await?;
    let distribution = counts_of(&counts, "self_classification");
    Ok(ClassificationView {
        agent_id: agent.agent_id,
        period: range.into(),
        dd_count: counts.decisions,
        classified_count: distribution.values().sum(),
        distribution,
        dac_charged: MilliDac::ZERO.into(),
    })
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct OwnerSummaryQuery {
    pub(crate) from: Option<String>,
    pub(crate) to: Option<String>,
    /// One managed agent; all of them when left out.
    pub(crate) agent_id: Option<Id>,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct OwnerExportQuery {
    pub(crate) from: Option<String>,
    pub(crate) to: Option<String>,
    pub(crate) agent_id: Id,
    #[schemars(extend("default" = "csv"))]
    pub(crate) format: Option<Format>,
}

// ---- over HTTP ----

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
    let range = dur::range(&state.app, query.from.as_deref(), query.to.as_deref())?;
    let lines = dur::transactions(&state.app, &[agent.agent_id], range, query.kind.as_deref(), query.page, query.limit).await?;
    Ok(Json(TransactionsView {
        transactions: lines.items.iter().map(Transaction::from).collect(),
        page: lines.page(),
        limit: lines.limit,
        total: lines.total,
    }))
}

async fn tsl(State(state): State<AppState>, AuthAgent(agent): AuthAgent, ApiQuery(query): ApiQuery<TslQuery>) -> ApiResult<Json<TslView>> {
    let range = dur::range(&state.app, query.from.as_deref(), query.to.as_deref())?;
    let (role, name) = match query.role.unwrap_or(Role::All) {
        Role::Buyer => (RoleView::Buyer, "buyer"),
        Role::Seller => (RoleView::Seller, "seller"),
        Role::All => (RoleView::All, "all"),
    };
    let lines = dur::tsl(&state.app, agent.agent_id, range, name, query.page, query.limit).await?;
    let (page, limit, total) = (lines.page(), lines.limit, lines.total);
    let transactions = lines
        .items
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
