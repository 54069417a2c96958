//! Pricing: the active generation's policy, presets and service prices, as
//! the component describes them. Nothing here is computed by the host.
//!
//! Its wire shapes and the function each operation runs are one set, served
//! by the route table here and by the MCP tools (`mcp/`) alike.

use crate::error::ApiResult;
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::{Dac, Named, Ratio};
use anchor_app::charge::PAYMENT_WINDOW_SECS;
use anchor_app::pricing;
use anchor_domain::MilliDac;
use anchor_domain::agents::TRIAL_DAYS;
use anchor_domain::pricing::{ObservationTier, Quote, ServicePrices};
use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

#[derive(Serialize, JsonSchema)]
pub(crate) struct NextGeneration {
    pub(crate) pricing_version: String,
    pub(crate) component_sha256: String,
    pub(crate) wit_package: String,
    /// The UTC date it comes into force, `YYYY-MM-DD`.
    #[schemars(extend("format" = "date"))]
    pub(crate) effective_from: String,
    /// The instant it comes into force.
    pub(crate) effective_at: crate::wire::Time,
}

impl NextGeneration {
    pub(crate) fn of(standing: &pricing::Standing) -> Option<NextGeneration> {
        standing.next.as_ref().map(|(at, generation)| NextGeneration {
            pricing_version: generation.version.clone(),
            component_sha256: generation.sha256.clone(),
            wit_package: generation.interface.clone(),
            effective_from: at.date_naive().to_string(),
            effective_at: crate::wire::Time(*at),
        })
    }
}

// ---- over HTTP ----

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/v1/pricing/current", get(current))
            .tag("Pricing")
            .summary("The active pricing generation")
            .returns::<PricingCurrent>(200, "Policy: base fee, every axis add, the multiplier rule, and the service prices"),
        op(Method::GET, "/v1/pricing/ee-presets", get(presets))
            .tag("Pricing")
            .summary("EE presets with what each costs")
            .returns::<Presets>(200, "Presets"),
    ]
}

#[derive(Serialize, JsonSchema)]
struct PricingCurrent {
    pricing_version: String,
    /// The UTC date this generation came into force on this service (its
    /// publication's activation), or, for the generation a host starts with,
    /// the date the generation itself states: always `YYYY-MM-DD`.
    #[schemars(extend("format" = "date"))]
    effective_from: String,
    /// The instant of a published generation's activation (absent for the
    /// generation a host starts with, which states a date only).
    #[serde(skip_serializing_if = "Option::is_none")]
    effective_at: Option<crate::wire::Time>,
    component_sha256: String,
    /// The next generation an operator published, and when it comes into force
    /// (null when none is scheduled).
    next: Option<NextGeneration>,
    /// The WIT package the pricing component implements.
    wit_package: String,
    currency: &'static str,
    unit: Unit,
    base_fee: Dac,
    /// Per axis, per value: what it adds.
    axes: IndexMap<String, IndexMap<String, AxisValue>>,
    formula: &'static str,
    multiplier_conditions: MultiplierRule,
    indefinite_available: bool,
    trial: TrialTerms,
    payment_window_minutes: u64,
    #[serde(flatten)]
    services: Option<Services>,
}

#[derive(Serialize, JsonSchema)]
struct Unit {
    dac_in_usd: &'static str,
    usdc_base_units_per_dac: u32,
}

#[derive(Serialize, JsonSchema)]
struct AxisValue {
    add: Dac,
    available: bool,
    /// Charged every month on top (indefinite retention).
    #[serde(skip_serializing_if = "Option::is_none")]
    monthly: Option<Dac>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

#[derive(Serialize, JsonSchema)]
struct MultiplierRule {
    conditions: Vec<Condition>,
    min_matches: u32,
    multiplier: Ratio,
    otherwise: u32,
}

#[derive(Serialize, JsonSchema)]
struct Condition {
    axis: String,
    value: String,
}

#[derive(Serialize, JsonSchema)]
struct TrialTerms {
    amount_dac: Dac,
    period_days: i64,
    covers: [&'static str; 2],
    /// The routes Trial pays (`METHOD /path`).
    applies_to: Vec<String>,
}

/// Prices outside a declaration's EE (generations of anchor:pricing@1.1.0 and later).
#[derive(Serialize, JsonSchema)]
struct Services {
    /// ARA observation prices by tier and resolution level.
    observations: Vec<ObservationPriceView>,
    earned_dac: EarnedTerms,
    asa: AsaTerms,
    ise: IseTerms,
    sdac: SdacTerms,
    retention_subscription: RetentionTerms,
    tsl: TslTerms,
}

#[derive(Serialize, JsonSchema)]
struct ObservationPriceView {
    tier: Named<ObservationTier>,
    /// Null for tiers without levels.
    resolution_level: Option<u8>,
    base_dac: Dac,
    surcharge_dac: Dac,
}

#[derive(Serialize, JsonSchema)]
struct EarnedTerms {
    min_spend: Dac,
    expiry_days: u32,
}

#[derive(Serialize, JsonSchema)]
struct AsaTerms {
    base_cost_dac: Dac,
    base_period_days: u32,
    grace_days: u32,
    max_periods: u32,
    earned_enabled: bool,
}

#[derive(Serialize, JsonSchema)]
struct IseTerms {
    fee_dac: Dac,
    free_seconds: u32,
    max_minutes: u32,
}

#[derive(Serialize, JsonSchema)]
struct SdacTerms {
    base_fee_dac: Dac,
    cost_ratio: Ratio,
}

#[derive(Serialize, JsonSchema)]
struct RetentionTerms {
    monthly_dac: Dac,
    grace_days: u32,
}

#[derive(Serialize, JsonSchema)]
struct TslTerms {
    purchase_fee_dac: Dac,
}

impl From<ServicePrices> for Services {
    fn from(s: ServicePrices) -> Services {
        Services {
            observations: s
                .observations
                .iter()
                .map(|o| ObservationPriceView {
                    tier: Named(o.tier),
                    resolution_level: (o.resolution != 0).then_some(o.resolution),
                    base_dac: o.base.into(),
                    surcharge_dac: o.surcharge.into(),
                })
                .collect(),
            earned_dac: EarnedTerms { min_spend: s.earned_threshold.into(), expiry_days: s.earned_expiry_days },
            asa: AsaTerms {
                base_cost_dac: s.asa_period.into(),
                base_period_days: s.asa_period_days,
                grace_days: s.asa_grace_days,
                max_periods: s.asa_max_periods,
                earned_enabled: true,
            },
            ise: IseTerms { fee_dac: s.ise_fee.into(), free_seconds: s.ise_free_seconds, max_minutes: s.ise_max_minutes },
            sdac: SdacTerms { base_fee_dac: s.sdac_base_fee.into(), cost_ratio: Ratio(s.sdac_ratio_permille) },
            retention_subscription: RetentionTerms { monthly_dac: s.retention_monthly.into(), grace_days: s.retention_grace_days },
            tsl: TslTerms { purchase_fee_dac: s.tsl_base_fee.into() },
        }
    }
}

async fn current(State(state): State<AppState>) -> ApiResult<Json<PricingCurrent>> {
    let published = pricing::current(&state.app)?;
    let policy = published.policy;
    let mut axes: IndexMap<String, IndexMap<String, AxisValue>> = IndexMap::new();
    for price in policy.axes {
        let value = AxisValue {
            add: price.add.into(),
            available: price.available,
            monthly: (price.monthly > MilliDac::ZERO).then_some(price.monthly.into()),
            note: price.note,
        };
        axes.entry(price.axis).or_default().insert(price.value, value);
    }
    Ok(Json(PricingCurrent {
        pricing_version: policy.version,
        effective_from: published.standing.since.map_or(policy.effective_from, |at| at.date_naive().to_string()),
        effective_at: published.standing.since.map(crate::wire::Time),
        component_sha256: published.generation.sha256,
        next: NextGeneration::of(&published.standing),
        wit_package: published.generation.interface,
        currency: "DAC",
        unit: Unit { dac_in_usd: "0.001", usdc_base_units_per_dac: 1000 },
        base_fee: policy.base_fee.into(),
        axes,
        formula: "subtotal = base_fee + every axis add; total_dac = subtotal x multiplier; premium = total_dac - base_fee",
        multiplier_conditions: MultiplierRule {
            conditions: policy.multiplier_conditions.into_iter().map(|(axis, value)| Condition { axis, value }).collect(),
            min_matches: policy.multiplier_min_matches,
            multiplier: Ratio(policy.multiplier_permille),
            otherwise: 1,
        },
        indefinite_available: published.indefinite_available,
        trial: TrialTerms {
            amount_dac: state.settings.config.trial_grant.into(),
            period_days: TRIAL_DAYS,
            covers: ["base_fee", "premium"],
            applies_to: anchor_app::catalog::trial_routes().map(|r| r.to_string()).collect(),
        },
        payment_window_minutes: PAYMENT_WINDOW_SECS / 60,
        services: published.services.map(Services::from),
    }))
}

#[derive(Serialize, JsonSchema)]
struct Presets {
    pricing_version: String,
    presets: Vec<PresetView>,
}

#[derive(Serialize, JsonSchema)]
struct PresetView {
    name: String,
    label: String,
    enabled: bool,
    #[serde(flatten)]
    axes: crate::areas::declarations::Axes,
    dac_amount: Dac,
    cost_breakdown: crate::areas::declarations::CostBreakdown,
}

async fn presets(State(state): State<AppState>) -> ApiResult<Json<Presets>> {
    let (generation, presets) = pricing::presets(&state.app)?;
    Ok(Json(Presets {
        pricing_version: generation.version,
        presets: presets
            .into_iter()
            .map(|(preset, quote)| PresetView {
                axes: crate::areas::declarations::Axes::from(&preset.scope()),
                dac_amount: quote.total.into(),
                cost_breakdown: crate::areas::declarations::CostBreakdown::of_quote(&quote),
                name: preset.name,
                label: preset.label,
                enabled: preset.enabled,
            })
            .collect(),
    }))
}

impl crate::areas::declarations::CostBreakdown {
    /// A quote's breakdown, with every axis add (no payment sources: nothing is paid yet).
    pub(crate) fn of_quote(quote: &Quote) -> crate::areas::declarations::CostBreakdown {
        crate::areas::declarations::CostBreakdown {
            base_fee: quote.base_fee.into(),
            base_fee_source: None,
            premium: quote.premium().into(),
            premium_source: None,
            subtotal: quote.subtotal.into(),
            multiplier: Ratio(quote.multiplier_permille),
            total_dac: quote.total.into(),
            axes: Some(
                quote
                    .charges
                    .iter()
                    .map(|c| crate::areas::declarations::AxisCharge { axis: c.axis.clone(), value: c.value.clone(), add: c.add.into() })
                    .collect(),
            ),
        }
    }
}
