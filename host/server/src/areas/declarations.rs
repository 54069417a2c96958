//! DD and EE: create (priced by the pricing component, paid from Trial or
//! over x402), confirm (fixes the integrity hash), list, detail, lineage.
//! The rules live in `anchor_app::declarations`.
//!
//! # Direct access
//!
//! `GET /v1/dd/{dd_id}` returns the original: every declared field. Each such
//! read by the owning agent counts one against the EE's
//! `ee_direct_access_quota` and must fall within `ee_direct_access_period`,
//! which runs from the record's creation.
//!
//! Its wire shapes and the function each operation runs are one set, served
//! by the route table here and by the MCP tools (`mcp/`) alike.

use crate::body::path_uuid;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, AuthAgent, Bearer, Body, CreatingAgent, PaymentOffer, TraceParent};
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Ratio, Time, Usdc};
use crate::x402_headers;
use anchor_app::declarations::{self, Form, Lineage, PremiumSource};
use anchor_domain::MilliDac;
use anchor_domain::declarations::dd::{self, CORE_SCHEMA_VERSION, DdFields};
use anchor_domain::declarations::ee;
use anchor_domain::declarations::template::{self, Template};
use anchor_domain::integrity::ENCODING_NAME;
use anchor_domain::payments::{PaymentSource, SettlementStatus};
use anchor_domain::records::{AgentRecord, StoredDeclaration};
use anchor_domain::trace::TraceId;
use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

// ---- the create request ----

#[derive(Deserialize, JsonSchema)]
pub(crate) struct CreateRequest {
    /// Idempotency key, scoped to the agent.
    pub(crate) request_id: Id,
    pub(crate) dd: DdInput,
    pub(crate) ee: EeRequest,
    pub(crate) continuity: Option<Continuity>,
    pub(crate) premium_payment_source: Option<PremiumPaymentSource>,
    pub(crate) content_inclusion_flag: Option<Flag>,
    pub(crate) template: Option<TemplateInput>,
    /// Accepted and dropped, never stored or hashed: the published SDK's
    /// `dd.create({ context })` sends it, and it may carry the decision's
    /// content, which this service never keeps.
    #[schemars(extend("x-anchor-beyond-reference" = "sent by the published SDK's dd.create; accepted and dropped"))]
    pub(crate) context: Option<serde_json::Value>,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "DDInput")]
pub(crate) struct DdInput {
    // Required here (the schema says so), optional to serde: the flat shape
    // of the MCP tools reads into this same type and may leave them out, and
    // the use case refuses or defaults them by the request's form.
    #[schemars(with = "Named<dd::UnitType>")]
    pub(crate) dd_unit_type: Option<Named<dd::UnitType>>,
    /// self_declared on POST /v1/dd/create; bilateral on POST /v1/dd/bilateral/propose.
    #[schemars(with = "Named<dd::DeclarationMode>")]
    pub(crate) dd_declaration_mode: Option<Named<dd::DeclarationMode>>,
    pub(crate) decision_type: Named<dd::DecisionType>,
    pub(crate) decision_action_type: Named<dd::ActionType>,
    pub(crate) origin_context_type: Named<dd::OriginContext>,
    #[schemars(with = "Named<dd::SelectionState>")]
    pub(crate) selection_state: Option<Named<dd::SelectionState>>,
    pub(crate) selection_scope: Option<Named<dd::SelectionScope>>,
    /// When the agent decided; normalized to UTC; not later than the anchoring time.
    pub(crate) decision_at: Option<Time>,
    pub(crate) parent_dd_id: Option<Id>,
    /// How many options you considered and left out (0 or more); recorded and hashed with the record.
    #[schemars(
        range(min = 0, max = dd::EXCLUDED_OPTIONS_MAX),
        extend("x-anchor-beyond-reference" = "a DDInput field of the interface specification")
    )]
    pub(crate) excluded_option_count: Option<i64>,
}

/// The four axes are required unless ee_preset is sent.
#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "EEInput")]
pub(crate) struct EeRequest {
    /// A preset from GET /v1/pricing/ee-presets; expands into the four axes and overrides them.
    pub(crate) ee_preset: Option<String>,
    pub(crate) ee_retention_period: Option<Named<ee::Retention>>,
    pub(crate) ee_integrity_verification_level: Option<Named<ee::Integrity>>,
    pub(crate) ee_disclosure_format_policy: Option<Named<ee::Disclosure>>,
    pub(crate) ee_responsibility_scope: Option<Named<ee::Responsibility>>,
    /// A positive whole number and a unit: 30d, 12m, 1y (at most a hundred years).
    #[schemars(pattern(r"^[1-9]\d*[dmy]$"))]
    pub(crate) ee_direct_access_period: Option<String>,
    #[schemars(range(min = 0, max = 1_000_000))]
    pub(crate) ee_direct_access_quota: Option<i64>,
    #[schemars(extend("default" = "owner"))]
    pub(crate) content_disclosure_scope: Option<Named<ee::ContentScope>>,
    #[schemars(extend("default" = "none"))]
    pub(crate) delegation_state: Option<Named<ee::Delegation>>,
    pub(crate) access_class: Option<Named<ee::AccessClass>>,
}

/// Where the declaration continues from; other keys are ignored.
#[derive(Deserialize, JsonSchema)]
pub(crate) struct Continuity {
    pub(crate) parent_dd_id: Option<Id>,
}

#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PremiumPaymentSource {
    External,
    Earned,
}

/// 0 or 1.
#[derive(Clone, Copy, JsonSchema)]
#[schemars(extend("enum" = [0, 1], "default" = 0))]
pub(crate) struct Flag(u8);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Flag, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        match value.as_u64() {
            Some(0) => Ok(Flag(0)),
            Some(1) => Ok(Flag(1)),
            _ => Err(serde::de::Error::unknown_variant(&value.to_string(), &["0", "1"])),
        }
    }
}

#[derive(Deserialize, JsonSchema)]
#[schemars(extend("minProperties" = 1))]
pub(crate) struct TemplateInput {
    pub(crate) decision_class: Option<Named<template::DecisionClass>>,
    /// Kept as written, digits, point and sign (the integrity hash covers
    /// its JSON text, not a float's rounding of it), but for an exponent,
    /// kept as `e` and its sign as JSON encoders write it (`1E2` is kept as
    /// `1e+2`); the record's answers show the text the hash covers.
    pub(crate) decision_scale_value: Option<serde_json::Number>,
    pub(crate) target_class: Option<Named<template::TargetClass>>,
    #[schemars(length(max = template::CALL_CHAIN_MAX), inner(pattern(template::CALL_CHAIN_PATTERN)))]
    pub(crate) call_chain: Option<Vec<String>>,
    #[schemars(length(max = 20), pattern(template::SCALE_UNIT_PATTERN))]
    pub(crate) decision_scale_unit: Option<String>,
    /// A key from GET /v1/classification.
    pub(crate) self_classification: Option<String>,
    pub(crate) decision_trigger: Option<Named<template::Trigger>>,
    pub(crate) human_involvement: Option<Named<template::HumanInvolvement>>,
}

impl CreateRequest {
    /// The create as the use case takes it (its rules and defaults are the
    /// use case's, by the shape it arrived in).
    pub(crate) fn into_request(self, trace: Option<TraceId>, form: Form) -> declarations::CreateRequest {
        // The SDK's free-form context goes no further than this.
        drop(self.context);
        declarations::CreateRequest {
            request_id: self.request_id.0,
            dd: self.dd.into_request(),
            ee: self.ee.into_request(),
            continuity_parent: self.continuity.and_then(|c| c.parent_dd_id).map(|p| p.0),
            content_inclusion: self.content_inclusion_flag.is_some_and(|f| f.0 == 1),
            template: self.template.map(TemplateInput::into_request),
            premium_source: self.premium_payment_source.map(|p| match p {
                PremiumPaymentSource::External => PremiumSource::External,
                PremiumPaymentSource::Earned => PremiumSource::Earned,
            }),
            trace,
            form,
        }
    }
}

impl DdInput {
    pub(crate) fn into_request(self) -> declarations::DdRequest {
        declarations::DdRequest {
            unit_type: self.dd_unit_type.map(|v| v.0),
            declaration_mode: self.dd_declaration_mode.map(|v| v.0),
            decision_type: self.decision_type.0,
            action_type: self.decision_action_type.0,
            origin_context: self.origin_context_type.0,
            selection_state: self.selection_state.map(|v| v.0),
            selection_scope: self.selection_scope.map(|s| s.0),
            decision_at: self.decision_at.map(|t| t.0),
            parent_dd_id: self.parent_dd_id.map(|p| p.0),
            excluded_option_count: self.excluded_option_count,
        }
    }
}

impl EeRequest {
    pub(crate) fn into_request(self) -> declarations::EeRequest {
        declarations::EeRequest {
            preset: self.ee_preset,
            retention: self.ee_retention_period.map(|v| v.0),
            integrity: self.ee_integrity_verification_level.map(|v| v.0),
            disclosure: self.ee_disclosure_format_policy.map(|v| v.0),
            responsibility: self.ee_responsibility_scope.map(|v| v.0),
            direct_access_period: self.ee_direct_access_period,
            direct_access_quota: self.ee_direct_access_quota,
            content_scope: self.content_disclosure_scope.map(|v| v.0),
            delegation: self.delegation_state.map(|v| v.0),
            access_class: self.access_class.map(|v| v.0),
        }
    }
}

impl TemplateInput {
    pub(crate) fn into_request(self) -> declarations::TemplateRequest {
        declarations::TemplateRequest {
            decision_class: self.decision_class.map(|v| v.0),
            decision_scale_value: self.decision_scale_value.map(|n| n.to_string()),
            decision_scale_unit: self.decision_scale_unit,
            target_class: self.target_class.map(|v| v.0),
            call_chain: self.call_chain,
            self_classification: self.self_classification,
            decision_trigger: self.decision_trigger.map(|v| v.0),
            human_involvement: self.human_involvement.map(|v| v.0),
        }
    }
}

// ---- answers shared by several routes ----

/// How a declaration's price was made and who paid each part.
#[derive(Serialize, JsonSchema)]
pub struct CostBreakdown {
    pub base_fee: Dac,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_fee_source: Option<Named<PaymentSource>>,
    pub premium: Dac,
    /// external or earned; absent when the premium is 0, or when Trial paid
    /// it with the base fee (base_fee_source trial: a declaration is paid
    /// from Trial whole).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["external", "earned"]))]
    pub premium_source: Option<Named<PaymentSource>>,
    /// Base fee plus every axis add, before the multiplier.
    pub subtotal: Dac,
    pub multiplier: Ratio,
    pub total_dac: Dac,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub axes: Option<Vec<AxisCharge>>,
}

#[derive(Serialize, JsonSchema)]
pub struct AxisCharge {
    pub axis: String,
    pub value: String,
    pub add: Dac,
}

impl CostBreakdown {
    pub(crate) fn of(s: &StoredDeclaration) -> CostBreakdown {
        CostBreakdown {
            base_fee: s.base_fee.into(),
            base_fee_source: Some(Named(s.base_fee_source)),
            premium: s.premium().into(),
            premium_source: (s.premium() > MilliDac::ZERO && s.premium_source != PaymentSource::Trial).then_some(Named(s.premium_source)),
            subtotal: s.subtotal.into(),
            multiplier: Ratio(s.multiplier_permille),
            total_dac: s.declaration.dac_amount.into(),
            axes: None,
        }
    }
}

/// A declaration's identity and accounting, never its declared fields.
#[derive(Serialize, JsonSchema)]
pub struct Summary {
    pub(crate) dd_id: Uuid,
    pub(crate) ee_id: Uuid,
    pub(crate) anchored_at: Time,
    pub(crate) confirmed_at: Option<Time>,
    pub(crate) settlement_status: Named<SettlementStatus>,
    pub(crate) dac_amount: Dac,
    pub(crate) pricing_version: String,
    pub(crate) integrity_hash: Option<String>,
    pub(crate) parent_dd_id: Option<Uuid>,
    pub(crate) lineage_group_id: Uuid,
}

impl From<&StoredDeclaration> for Summary {
    fn from(s: &StoredDeclaration) -> Summary {
        let d = &s.declaration;
        Summary {
            dd_id: d.dd_id,
            ee_id: d.ee_id,
            anchored_at: d.anchored_at.into(),
            confirmed_at: s.confirmed_at.map(Time),
            settlement_status: Named(s.settlement_status),
            dac_amount: d.dac_amount.into(),
            pricing_version: d.pricing_version.clone(),
            integrity_hash: s.integrity_hash.clone(),
            parent_dd_id: d.dd.parent_dd_id,
            lineage_group_id: d.lineage_group_id,
        }
    }
}

/// A declaration's DD fields as declared.
#[derive(Serialize, JsonSchema)]
pub struct DeclaredDd {
    pub(crate) dd_unit_type: Named<dd::UnitType>,
    pub(crate) dd_declaration_mode: Named<dd::DeclarationMode>,
    pub(crate) decision_type: Named<dd::DecisionType>,
    pub(crate) decision_action_type: Named<dd::ActionType>,
    pub(crate) origin_context_type: Named<dd::OriginContext>,
    pub(crate) selection_state: Named<dd::SelectionState>,
    pub(crate) selection_scope: Option<Named<dd::SelectionScope>>,
    pub(crate) decision_at: Option<Time>,
    /// As declared; absent when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) excluded_option_count: Option<i64>,
}

impl From<&DdFields> for DeclaredDd {
    fn from(f: &DdFields) -> DeclaredDd {
        DeclaredDd {
            dd_unit_type: Named(f.unit_type),
            dd_declaration_mode: Named(f.declaration_mode),
            decision_type: Named(f.decision_type),
            decision_action_type: Named(f.action_type),
            origin_context_type: Named(f.origin_context),
            selection_state: Named(f.selection_state),
            selection_scope: f.selection_scope.map(Named),
            decision_at: f.decision_at.map(Time),
            excluded_option_count: f.excluded_option_count,
        }
    }
}

/// The four priced EE axes.
#[derive(Serialize, JsonSchema)]
pub struct Axes {
    pub ee_retention_period: Named<ee::Retention>,
    pub ee_integrity_verification_level: Named<ee::Integrity>,
    pub ee_disclosure_format_policy: Named<ee::Disclosure>,
    pub ee_responsibility_scope: Named<ee::Responsibility>,
}

impl Axes {
    pub fn new(retention: ee::Retention, integrity: ee::Integrity, disclosure: ee::Disclosure, responsibility: ee::Responsibility) -> Axes {
        Axes {
            ee_retention_period: Named(retention),
            ee_integrity_verification_level: Named(integrity),
            ee_disclosure_format_policy: Named(disclosure),
            ee_responsibility_scope: Named(responsibility),
        }
    }
}

impl From<&ee::Scope> for Axes {
    fn from(s: &ee::Scope) -> Axes {
        Axes::new(s.retention, s.integrity, s.disclosure, s.responsibility)
    }
}

// ---- create ----

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CreateStatus {
    TrialPaid,
    PendingPayment,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct CreateResponse {
    pub(crate) dd_id: Uuid,
    pub(crate) ee_id: Uuid,
    pub(crate) request_id: Uuid,
    pub(crate) dac_amount: Dac,
    pub(crate) pricing_version: String,
    pub(crate) pricing_component_sha256: String,
    /// 0: the decision fact only; 1: its template too.
    #[schemars(extend("enum" = [0, 1]))]
    pub(crate) content_inclusion_flag: u8,
    pub(crate) cost_breakdown: CostBreakdown,
    pub(crate) status: CreateStatus,
    pub(crate) settlement_status: Named<SettlementStatus>,
    pub(crate) anchored_at: Time,
    pub(crate) lineage_group_id: Uuid,
    /// Present when Trial paid (all of it, or the base fee).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) trial_payment: Option<TrialPayment>,
    /// Present when part of the price is paid externally: confirm before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payment_deadline: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payment: Option<PaymentInstructions>,
    /// Present when this instance cannot give the declared
    /// ee_integrity_verification_level: its receipts reach `reachable` at
    /// most (enhanced needs witnesses of the log, certifiable a
    /// time-stamping authority too). Nothing is charged for the level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) integrity_level: Option<IntegrityNotice>,
    /// Present when the request carried a W3C traceparent: the record's salt
    /// commits to its trace id under this key (hex); the receipt carries it
    /// too, and `anchor verify --trace-id` checks the link.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) trace_key: Option<String>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct IntegrityNotice {
    pub(crate) declared: Named<ee::Integrity>,
    pub(crate) reachable: Named<ee::Integrity>,
    pub(crate) note: &'static str,
}

impl IntegrityNotice {
    pub(crate) fn of(declared: ee::Integrity, reachable: ee::Integrity) -> Option<IntegrityNotice> {
        use anchor_app::transparency::level_rank;
        (level_rank(declared) > level_rank(reachable)).then_some(IntegrityNotice {
            declared: Named(declared),
            reachable: Named(reachable),
            note: match reachable {
                ee::Integrity::Basic => {
                    "this instance has no witnesses of its log: receipts prove inclusion in checkpoints signed by the log alone"
                }
                _ => "this instance has no time-stamping authority: receipts are witnessed, not timestamped",
            },
        })
    }
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct TrialPayment {
    pub(crate) payment_source: Named<PaymentSource>,
    pub(crate) trial_remaining: Dac,
    pub(crate) trial_expires_at: Time,
    /// `base_fee` when Trial paid the base fee only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) covers: Option<&'static str>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct PaymentInstructions {
    pub(crate) payment_address: String,
    pub(crate) network: &'static str,
    pub(crate) asset: &'static str,
    pub(crate) amount_usdc: Usdc,
    /// USDC base units.
    pub(crate) amount_units: String,
    /// An indication in Korean won at `krw_rate`; never used for settlement.
    pub(crate) approx_krw: i64,
    pub(crate) krw_rate: crate::areas::dur::KrwRate,
    pub(crate) expires_at: Option<Time>,
    pub(crate) note: &'static str,
}

impl CreateResponse {
    pub(crate) fn new(
        s: &StoredDeclaration,
        agent: &AgentRecord,
        pay_to: &str,
        fiat: &x402_headers::FiatRate,
        reachable: ee::Integrity,
    ) -> CreateResponse {
        let d = &s.declaration;
        let external = s.paid_externally();
        let trial_payment = (s.base_fee_source == PaymentSource::Trial).then(|| TrialPayment {
            payment_source: Named(PaymentSource::Trial),
            trial_remaining: s.trial_remaining_after.unwrap_or(MilliDac::ZERO).into(),
            trial_expires_at: agent.trial_expires_at.into(),
            covers: external.then_some("base_fee"),
        });
        // 1 DAC = 0.001 USDC, so milli-DAC count USDC base units.
        let usdc = if s.base_fee_source == PaymentSource::External { d.dac_amount } else { s.premium() };
        CreateResponse {
            dd_id: d.dd_id,
            ee_id: d.ee_id,
            request_id: s.request_id,
            dac_amount: d.dac_amount.into(),
            pricing_version: d.pricing_version.clone(),
            pricing_component_sha256: d.pricing_sha256.clone(),
            content_inclusion_flag: u8::from(d.content_inclusion),
            cost_breakdown: CostBreakdown::of(s),
            status: if external { CreateStatus::PendingPayment } else { CreateStatus::TrialPaid },
            settlement_status: Named(s.settlement_status),
            anchored_at: d.anchored_at.into(),
            lineage_group_id: d.lineage_group_id,
            trial_payment,
            payment_deadline: if external { s.payment_deadline.map(Time) } else { None },
            payment: external.then(|| PaymentInstructions {
                payment_address: pay_to.to_string(),
                network: anchor_x402::NETWORK,
                asset: anchor_x402::USDC_BASE,
                amount_usdc: Usdc(usdc.usdc_base_units()),
                amount_units: usdc.usdc_base_units().to_string(),
                approx_krw: fiat.krw(usdc),
                krw_rate: crate::areas::dur::KrwRate::of(fiat),
                expires_at: s.payment_deadline.map(Time),
                note: "the authorization is reserved, not settled: confirm before expires_at to settle it; after that it is released and nothing is charged",
            }),
            integrity_level: IntegrityNotice::of(d.ee.scope.integrity, reachable),
            trace_key: d.trace_key.map(hex::encode),
        }
    }
}

/// DD create, as REST and the MCP tool create_decision answer it.
pub(crate) async fn create_decision(
    state: &AppState,
    found: &anchor_ports::FoundAgent,
    offered: anchor_app::charge::Offered,
    request: CreateRequest,
    form: Form,
    trace: Option<TraceId>,
) -> ApiResult<CreateResponse> {
    let stored = declarations::create_found(&state.app, found, request.into_request(trace, form), offered).await?;
    let reachable = anchor_app::transparency::reachable_level(&state.app);
    Ok(CreateResponse::new(&stored, &found.agent, &state.settings.config.pay_to, &state.settings.fiat, reachable))
}

// ---- confirm ----

#[derive(Deserialize, JsonSchema)]
pub(crate) struct ConfirmRequest {
    pub(crate) dd_id: Id,
    /// Accepted and not used: the published SDK's `dd.confirm(id,
    /// transactionId)` sends it. This service settles an external payment
    /// from the signed x402 payment of the create, so a confirm needs no
    /// transaction reference (the settlement's is in the answer).
    #[schemars(
        length(max = 256),
        extend("x-anchor-beyond-reference" = "sent by the published SDK's dd.confirm(id, transactionId); accepted and not used")
    )]
    pub(crate) transaction_id: Option<String>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ConfirmResponse {
    pub(crate) dd_id: Uuid,
    pub(crate) settlement_status: Named<SettlementStatus>,
    pub(crate) anchored_at: Time,
    pub(crate) confirmed_at: Time,
    /// sha256: and 64 hex digits over the record's canonical encoding.
    pub(crate) integrity_hash: String,
    pub(crate) dac_ur_recorded: bool,
    pub(crate) payment_sources: Vec<Named<PaymentSource>>,
    pub(crate) settlement_currency: Option<&'static str>,
    /// For a USDC settlement: when the local-currency rate of this
    /// service's estimates was taken (for its fixed indicative rate, when it
    /// was set); the settlement itself is in USDC at 1 DAC = 0.001 USD.
    pub(crate) exchange_rate_timestamp: Option<Time>,
    /// For a USDC settlement: where that rate came from.
    #[schemars(extend("x-anchor-beyond-reference" = "the source of the rate exchange_rate_timestamp dates"))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) exchange_rate_source: Option<String>,
    /// Present only when a time-alignment reward was credited in Earned DAC;
    /// this service credits no such reward (Earned DAC comes from tool sales).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sync_reward: Option<SyncReward>,
}

/// A time-alignment reward (this service credits none).
#[derive(Serialize, JsonSchema)]
pub(crate) struct SyncReward {
    pub(crate) dac_amount: Dac,
    pub(crate) gap_seconds: i64,
    pub(crate) window_minutes: i64,
    pub(crate) earned_balance: Dac,
    pub(crate) expires_at: Time,
}

/// DD confirm, as REST and the MCP tool confirm_decision answer it, with the
/// settlement (reference, payer) an external payment got.
pub(crate) async fn confirm_decision(
    state: &AppState,
    agent: &AgentRecord,
    dd_id: Uuid,
    read: Option<declarations::ToConfirm>,
) -> ApiResult<(ConfirmResponse, Option<anchor_app::charge::Settlement>, crate::x402_headers::SettledAt)> {
    let confirmed = declarations::confirm(&state.app, agent.agent_id, dd_id, read).await?;
    let mut sources: Vec<Named<PaymentSource>> = confirmed.usage.iter().map(|u| Named(u.source)).collect();
    sources.dedup();
    let external = confirmed.settlement.is_some();
    let body = ConfirmResponse {
        dd_id: confirmed.dd_id,
        settlement_status: Named(SettlementStatus::Settled),
        anchored_at: confirmed.anchored_at.into(),
        confirmed_at: confirmed.confirmed_at.into(),
        integrity_hash: confirmed.integrity_hash,
        dac_ur_recorded: true,
        payment_sources: sources,
        settlement_currency: external.then_some("USDC"),
        exchange_rate_timestamp: external.then_some(Time(state.settings.fiat.as_of)),
        exchange_rate_source: external.then(|| state.settings.fiat.source.clone()),
        sync_reward: None,
    };
    Ok((body, confirmed.settlement, crate::x402_headers::SettledAt(confirmed.confirmed_at)))
}

// ---- reads ----

#[derive(Deserialize, JsonSchema)]
pub(crate) struct ListQuery {
    pub(crate) from: Option<Time>,
    pub(crate) to: Option<Time>,
    /// Above 200 the page holds 200; the answer's limit is the size used.
    #[schemars(range(min = 1), extend("default" = 50))]
    pub(crate) limit: Option<i64>,
    #[schemars(range(min = 0), extend("default" = 0))]
    pub(crate) offset: Option<i64>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ListResponse {
    pub(crate) dds: Vec<Summary>,
    pub(crate) total: i64,
    pub(crate) limit: i64,
    pub(crate) offset: i64,
}

/// DD list, as REST and the MCP tool list_decisions answer it.
pub(crate) async fn list_decisions(state: &AppState, agent: &AgentRecord, query: ListQuery) -> ApiResult<ListResponse> {
    let page =
        declarations::list(&state.app, agent.agent_id, query.from.map(|t| t.0), query.to.map(|t| t.0), query.limit, query.offset).await?;
    Ok(ListResponse { dds: page.items.iter().map(Summary::from).collect(), total: page.total, limit: page.limit, offset: page.offset })
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Detail {
    pub(crate) dd: DetailDd,
    pub(crate) ee: DetailEe,
    pub(crate) dac: DetailDac,
    pub(crate) payment: DetailPayment,
    pub(crate) direct_access: DirectAccess,
    pub(crate) integrity: IntegrityInfo,
    pub(crate) retention: RetentionInfo,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct DetailDd {
    pub(crate) dd_id: Uuid,
    pub(crate) agent_id: Uuid,
    #[serde(flatten)]
    pub(crate) declared: DeclaredDd,
    #[schemars(extend("enum" = [0, 1]))]
    pub(crate) content_inclusion_flag: u8,
    pub(crate) anchored_at: Time,
    pub(crate) integrity_hash: Option<String>,
    pub(crate) core_schema_version: &'static str,
    pub(crate) parent_dd_id: Option<Uuid>,
    pub(crate) lineage_group_id: Uuid,
    pub(crate) template: Option<TemplateView>,
}

/// A template as declared.
#[derive(Serialize, JsonSchema)]
pub struct TemplateView {
    pub(crate) decision_class: Option<Named<template::DecisionClass>>,
    pub(crate) decision_scale_value: Option<serde_json::Number>,
    pub(crate) decision_scale_unit: Option<String>,
    pub(crate) target_class: Option<Named<template::TargetClass>>,
    pub(crate) call_chain: Option<Vec<String>>,
    pub(crate) self_classification: Option<String>,
    pub(crate) decision_trigger: Option<Named<template::Trigger>>,
    pub(crate) human_involvement: Option<Named<template::HumanInvolvement>>,
}

impl From<&Template> for TemplateView {
    fn from(t: &Template) -> TemplateView {
        TemplateView {
            decision_class: t.decision_class.map(Named),
            decision_scale_value: t.decision_scale_value.as_ref().and_then(|v| v.parse().ok()),
            decision_scale_unit: t.decision_scale_unit.clone(),
            target_class: t.target_class.map(Named),
            call_chain: t.call_chain.clone(),
            self_classification: t.self_classification.clone(),
            decision_trigger: t.decision_trigger.map(Named),
            human_involvement: t.human_involvement.map(Named),
        }
    }
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct DetailEe {
    pub(crate) ee_id: Uuid,
    pub(crate) ee_preset: Option<String>,
    #[serde(flatten)]
    pub(crate) axes: Axes,
    pub(crate) ee_direct_access_period: String,
    pub(crate) ee_direct_access_quota: i64,
    pub(crate) access_class: Named<ee::AccessClass>,
    pub(crate) content_disclosure_scope: Named<ee::ContentScope>,
    pub(crate) delegation_state: Named<ee::Delegation>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct DetailDac {
    pub(crate) dac_amount: Dac,
    pub(crate) dac_unit_type: &'static str,
    pub(crate) cost_context_type: &'static str,
    pub(crate) pricing_version: String,
    pub(crate) pricing_component_sha256: String,
    pub(crate) cost_breakdown: CostBreakdown,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct DetailPayment {
    pub(crate) settlement_status: Named<SettlementStatus>,
    pub(crate) payment_sources: Vec<Named<PaymentSource>>,
    pub(crate) payment_method: Option<&'static str>,
    pub(crate) paid_at: Option<Time>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct DirectAccess {
    pub(crate) access_class: Named<ee::AccessClass>,
    pub(crate) direct_access_remaining: i64,
    pub(crate) direct_access_expires_at: Time,
}

/// How long the record is kept. The declared ee_retention_period stays as
/// anchored; an indefinite record whose subscription ended is kept as a
/// short one from its demotion.
#[derive(Serialize, JsonSchema)]
pub(crate) struct RetentionInfo {
    pub(crate) effective_retention_period: Named<ee::Retention>,
    /// Null while indefinite retention holds.
    pub(crate) retention_expires_at: Option<Time>,
    pub(crate) retention_demoted_at: Option<Time>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct IntegrityInfo {
    /// The canonical encoding hashed into integrity_hash.
    pub(crate) encoding: &'static str,
    /// The record's private salt, hex; with the fields above it recomputes integrity_hash.
    pub(crate) salt: String,
    /// Present when the create carried a W3C traceparent: hex of the key
    /// under which the salt commits to the trace id,
    /// SHA-256("anchor-trace/1\n" ‖ key ‖ trace id bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) trace_key: Option<String>,
}

/// A record read through direct access, as REST and the MCP tool get_decision answer it.
pub(crate) async fn decision_detail(state: &AppState, agent: &AgentRecord, dd_id: Uuid) -> ApiResult<Detail> {
    let declarations::Original { stored, remaining } = declarations::read_original(&state.app, agent.agent_id, dd_id).await?;
    let d = &stored.declaration;
    let mut sources = vec![Named(stored.base_fee_source)];
    if stored.premium() > MilliDac::ZERO && stored.premium_source != stored.base_fee_source {
        sources.push(Named(stored.premium_source));
    }
    Ok(Detail {
        dd: DetailDd {
            dd_id: d.dd_id,
            agent_id: d.agent_id,
            declared: DeclaredDd::from(&d.dd),
            content_inclusion_flag: u8::from(d.content_inclusion),
            anchored_at: d.anchored_at.into(),
            integrity_hash: stored.integrity_hash.clone(),
            core_schema_version: CORE_SCHEMA_VERSION,
            parent_dd_id: d.dd.parent_dd_id,
            lineage_group_id: d.lineage_group_id,
            template: d.template.as_ref().map(TemplateView::from),
        },
        ee: DetailEe {
            ee_id: d.ee_id,
            ee_preset: d.ee.preset.clone(),
            axes: Axes::from(&d.ee.scope),
            ee_direct_access_period: d.ee.direct_access_period.to_string(),
            ee_direct_access_quota: d.ee.direct_access_quota,
            access_class: Named(d.ee.access_class),
            content_disclosure_scope: Named(d.ee.scope.content_scope),
            delegation_state: Named(d.ee.scope.delegation),
        },
        dac: DetailDac {
            dac_amount: d.dac_amount.into(),
            dac_unit_type: "DAC",
            cost_context_type: "dd_ee",
            pricing_version: d.pricing_version.clone(),
            pricing_component_sha256: d.pricing_sha256.clone(),
            cost_breakdown: CostBreakdown::of(&stored),
        },
        payment: DetailPayment {
            settlement_status: Named(stored.settlement_status),
            payment_sources: sources,
            payment_method: None,
            paid_at: stored.confirmed_at.map(Time),
        },
        direct_access: DirectAccess {
            access_class: Named(d.ee.access_class),
            direct_access_remaining: remaining,
            direct_access_expires_at: stored.direct_access_expires_at.into(),
        },
        integrity: IntegrityInfo { encoding: ENCODING_NAME, salt: hex::encode(d.salt), trace_key: d.trace_key.map(hex::encode) },
        retention: RetentionInfo {
            effective_retention_period: Named(match stored.retention_demoted_at {
                Some(_) => ee::Retention::Short,
                None => d.ee.scope.retention,
            }),
            retention_expires_at: stored.retention_expires_at.map(Time),
            retention_demoted_at: stored.retention_demoted_at.map(Time),
        },
    })
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct LineageView {
    pub(crate) dd_id: Uuid,
    pub(crate) lineage_group_id: Uuid,
    pub(crate) root_dd_id: Uuid,
    pub(crate) ancestors: Vec<Summary>,
    /// Nested summaries from the root; each node has its children.
    pub(crate) tree: TreeNode,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct TreeNode {
    #[serde(flatten)]
    pub(crate) summary: Summary,
    pub(crate) children: Vec<TreeNode>,
}

impl TreeNode {
    pub(crate) fn of(lineage: &Lineage, node: &StoredDeclaration, depth: usize) -> TreeNode {
        let children = if depth > 1_000 {
            Vec::new()
        } else {
            lineage.children(node.declaration.dd_id).map(|child| TreeNode::of(lineage, child, depth + 1)).collect()
        };
        TreeNode { summary: Summary::from(node), children }
    }
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct LineageGroup {
    pub(crate) lineage_group_id: Uuid,
    pub(crate) dds: Vec<Summary>,
    pub(crate) count: usize,
}

// ---- over HTTP ----

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::POST, "/v1/dd/create", post(create))
            .tag("DD")
            .summary("Declare a decision with its accountability scope")
            .describe("Records the declaration's metadata, prices its EE with the active pricing generation and pays it from Trial while Trial lasts. When what is left of Trial covers the whole price, Trial pays it; when it covers the base fee but not the premium, Trial pays the base fee and x402 the premium (the 402 asks for the premium alone; premium_payment_source earned has Earned DAC pay it instead); when it cannot pay the base fee, x402 pays the whole. Reusing a request_id returns the earlier result. When nothing can pay, answers 402 with an x402 challenge. A template is read only with content_inclusion_flag 1 (branch 1); with the flag 0 (branch 0, the decision fact only) a template sent is ignored, not stored, and named in the Anchor-Ignored-Fields header. context (sent by the published SDK) is accepted and dropped: it may carry decision content, which this service never stores. A traceparent header (W3C trace context of the run that made the decision), sent once and well-formed, links the record: its salt commits to the trace id (the id itself is not stored), the answer carries trace_key, and the receipt lets whoever holds the trace id prove the link (anchor verify --trace-id); a missing or malformed one leaves the record unlinked.")
            .agent()
            .takes::<CreateRequest>(json!({
                "request_id": "00000000-0000-4000-8000-000000000000",
                "dd": {
                    "dd_unit_type": "single", "dd_declaration_mode": "self_declared",
                    "decision_type": "internal_service", "decision_action_type": "execute",
                    "origin_context_type": "internal", "selection_state": "SELECTED",
                },
                "ee": { "ee_preset": "EE_basic" },
            }))
            .returns::<CreateResponse>(201, "Created (or the earlier result of the same request_id)")
            .error(400, "Validation failed, premium_payment_source earned with an Earned balance that cannot pay the premium (below min_spend_threshold, or short), or a request_id used before for a declaration of another dd, ee or template (REQUEST_ID_USED; the same body gets the earlier answer). Keys the request does not define are left out and named in the Anchor-Ignored-Fields header.", &[
                "MISSING_FIELD", "INVALID_ENUM", "UNKNOWN_FIELD", "INVALID_UUID", "INVALID_VALUE", "INVALID_INPUT",
                "INVALID_EE_PRESET", "EE_PRESET_DISABLED", "DECLARATION_MODE_NOT_ALLOWED", "DECISION_AT_IN_FUTURE",
                "PII_DETECTED", "INSUFFICIENT_DAC", "REQUEST_ID_USED",
            ])
            .error(400, "A PAYMENT-SIGNATURE (or X-PAYMENT) header that is not base64 JSON, or both headers with different payments.", &["INVALID_PAYLOAD"])
            .error(403, "The parent belongs to another agent, the owner's content-inclusion policy forbids it, indefinite retention without a subscription, or the agent's DAB is reached.", &[
                "FORBIDDEN", "CONTENT_INCLUSION_POLICY", "INDEFINITE_SUBSCRIPTION_REQUIRED", "DAB_LIMIT_REACHED",
            ])
            .error(404, "parent_dd_id names no declaration.", &["DD_NOT_FOUND"])
            .error(410, "parent_dd_id names a record past its retention period, de-identified.", &["RECORD_DEIDENTIFIED"])
            .payment_required("Trial cannot pay (spent or expired) and no payment came with the request, or the payment was refused.")
            .error(503, "The pricing generation could not price the request; nothing was recorded or charged.", &["PRICING_UNAVAILABLE"]),
        op(Method::POST, "/v1/dd/confirm", post(confirm))
            .tag("DD")
            .summary("Confirm a declaration after its action")
            .describe("Settles the record once, writes its usage entries and fixes its integrity hash. transaction_id is accepted (the published SDK sends it) and not used: an external payment settles from the x402 payment signed at create, so confirm needs no transaction reference.")
            .agent()
            .takes::<ConfirmRequest>(json!({ "dd_id": "0196b1a2-7c3d-7e4f-8a5b-6c7d8e9f0a1b" }))
            .returns::<ConfirmResponse>(200, "Confirmed")
            .error(400, "Invalid request.", &["MISSING_FIELD", "INVALID_UUID", "UNKNOWN_FIELD"])
            .error(403, "The record belongs to another agent.", &["FORBIDDEN"])
            .error(404, "No such record.", &["DD_NOT_FOUND"])
            .error(409, "Already confirmed, or the payment failed to settle earlier; a bilateral record before acceptance, after rejection, or (the counterparty's) before the proposer's is confirmed.", &[
                "ALREADY_CONFIRMED", "PAYMENT_FAILED", "AGREEMENT_PENDING", "AGREEMENT_REJECTED", "AGREEMENT_UNPAID",
            ])
            .error(410, "The external payment window closed, or the record is past its retention period and was de-identified.", &["PAYMENT_EXPIRED", "RECORD_DEIDENTIFIED"])
            .returns::<crate::error::ErrorBody>(402, "Settlement failed: nothing was charged or anchored; PAYMENT-RESPONSE says why. Code: SETTLEMENT_FAILED.")
            .error(503, "The settlement's outcome is unknown; confirm again to reconcile.", &["SETTLEMENT_PENDING"]),
        op(Method::GET, "/v1/dd/list", get(list))
            .tag("DD")
            .summary("List the agent's declarations, newest first")
            .agent()
            .query::<ListQuery>()
            .returns::<ListResponse>(200, "Summaries (no declared fields; these reads are free)")
            .error(400, "Invalid query.", &["INVALID_VALUE"]),
        op(Method::GET, "/v1/dd/{dd_id}", get(detail))
            .tag("DD")
            .summary("Read a declaration's original (counts against direct access)")
            .agent()
            .path::<Uuid>("dd_id")
            .returns::<Detail>(200, "The declaration")
            .error(400, "dd_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Another agent's record, or direct access spent, expired or not permitted.", &[
                "FORBIDDEN", "DIRECT_ACCESS_EXHAUSTED", "DIRECT_ACCESS_EXPIRED", "DIRECT_ACCESS_NOT_PERMITTED",
            ])
            .error(404, "No such record.", &["DD_NOT_FOUND"])
            .error(410, "The record is past its retention period and was de-identified.", &["RECORD_DEIDENTIFIED"]),
        op(Method::GET, "/v1/dd/{dd_id}/lineage", get(lineage))
            .tag("DD")
            .summary("The lineage tree a declaration belongs to")
            .agent()
            .path::<Uuid>("dd_id")
            .returns::<LineageView>(200, "Lineage tree")
            .error(400, "dd_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Another agent's record.", &["FORBIDDEN"])
            .error(404, "No such record.", &["DD_NOT_FOUND"])
            .error(410, "The record is past its retention period and was de-identified.", &["RECORD_DEIDENTIFIED"]),
        op(Method::GET, "/v1/dd/lineage-group/{group_id}", get(lineage_group))
            .tag("DD")
            .summary("Every declaration of one lineage group")
            .agent()
            .path::<Uuid>("group_id")
            .returns::<LineageGroup>(200, "Declarations in the group, oldest first")
            .error(400, "group_id is not a UUID.", &["INVALID_UUID"])
            .error(404, "The agent has no declaration in this group.", &["NOT_FOUND"]),
    ]
}

async fn create(
    State(state): State<AppState>,
    CreatingAgent(found, bearer): CreatingAgent,
    PaymentOffer(offered): PaymentOffer,
    TraceParent(trace): TraceParent,
    Body(request): Body<CreateRequest>,
) -> ApiResult<(StatusCode, Json<CreateResponse>)> {
    // A template is read only with content_inclusion_flag 1: one sent with
    // the flag 0 is left out, and named as the keys the body's type does not
    // define are (decision 0061).
    if request.template.is_some() && request.content_inclusion_flag.as_ref().is_none_or(|f| f.0 != 1) {
        crate::extract::left_out("template");
    }
    let created = create_decision(&state, &found, offered, request, anchor_app::declarations::Form::Nested, trace).await;
    // A remembered token found no longer the agent's when read again.
    let created = created.map_err(|error| match error {
        ApiError::App(anchor_app::AppError::TokenRefused) => bearer.refused(&state),
        error => error,
    })?;
    Ok((StatusCode::CREATED, Json(created)))
}

async fn confirm(
    State(state): State<AppState>,
    bearer: Bearer,
    request: Result<Body<ConfirmRequest>, ApiError>,
) -> ApiResult<axum::response::Response> {
    // The token and the declaration in one read; a body that does not read
    // is refused after the token is checked, as on every route.
    let (agent, read) = match &request {
        Ok(Body(request)) => declarations::authenticate_to_confirm(&state.app, &bearer.0, request.dd_id.0).await?,
        Err(_) => (anchor_app::agents::authenticate(&state.app, &bearer.0).await?, None),
    };
    let agent = agent.ok_or_else(|| bearer.refused(&state))?;
    let Body(request) = request?;
    if request.transaction_id.as_ref().is_some_and(|t| t.chars().count() > 256) {
        return Err(ApiError::bad("INVALID_VALUE", "transaction_id is at most 256 characters (and not needed: see the OpenAPI)"));
    }
    // A remembered token found no longer the agent's when read again.
    let confirmed = confirm_decision(&state, &agent, request.dd_id.0, read).await.map_err(|error| match error {
        ApiError::App(anchor_app::AppError::TokenRefused) => bearer.refused(&state),
        error => error,
    });
    let (body, settlement, settled_at) = confirmed?;
    let mut response = x402_headers::with_settlement(Json(body).into_response(), settlement.as_ref());
    // It settled with the confirmation: its receipt says when.
    response.extensions_mut().insert(settled_at);
    Ok(response)
}

async fn list(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<ListResponse>> {
    Ok(Json(list_decisions(&state, &agent, query).await?))
}

async fn detail(State(state): State<AppState>, AuthAgent(agent): AuthAgent, ApiPath(dd_id): ApiPath<String>) -> ApiResult<Json<Detail>> {
    let dd_id = path_uuid("dd_id", &dd_id)?;
    Ok(Json(decision_detail(&state, &agent, dd_id).await?))
}

async fn lineage(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(dd_id): ApiPath<String>,
) -> ApiResult<Json<LineageView>> {
    let dd_id = path_uuid("dd_id", &dd_id)?;
    let lineage = declarations::lineage(&state.app, agent.agent_id, dd_id).await?;
    let root = lineage.root();
    Ok(Json(LineageView {
        dd_id,
        lineage_group_id: lineage.declaration.declaration.lineage_group_id,
        root_dd_id: root.declaration.dd_id,
        ancestors: lineage.ancestors.iter().map(Summary::from).collect(),
        tree: TreeNode::of(&lineage, root, 0),
    }))
}

async fn lineage_group(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(group_id): ApiPath<String>,
) -> ApiResult<Json<LineageGroup>> {
    let group_id = path_uuid("group_id", &group_id)?;
    let group = declarations::lineage_group(&state.app, agent.agent_id, group_id).await?;
    Ok(Json(LineageGroup { lineage_group_id: group_id, dds: group.iter().map(Summary::from).collect(), count: group.len() }))
}
