//! Pricing: the active generation's policy and presets, as the component
//! describes them. Nothing here is computed by the host.

use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use serde_json::{Map, Value, json};

use anchor_domain::MilliDac;
use anchor_domain::agents::{TRIAL_DAC, TRIAL_DAYS};

use crate::error::ApiResult;
use crate::openapi::*;
use crate::state::AppState;
use anchor_app::charge::PAYMENT_WINDOW_SECS;

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/v1/pricing/current", get(current)).tag("Pricing").summary("The active pricing generation").ok(
            200,
            "Policy: base fee, every axis add, the multiplier rule",
            object(
                &[],
                vec![
                    ("pricing_version", string()),
                    ("effective_from", string()),
                    ("component_sha256", string()),
                    ("wit_package", string()),
                    ("currency", string()),
                    ("unit", json!({ "type": "object" })),
                    ("base_fee", number()),
                    ("axes", json!({ "type": "object" })),
                    ("formula", string()),
                    ("multiplier_conditions", json!({ "type": "object" })),
                    ("indefinite_available", boolean()),
                    ("trial", json!({ "type": "object" })),
                    ("payment_window_minutes", integer()),
                    (
                        "observations",
                        doc(
                            array(object(
                                &[],
                                vec![
                                    ("tier", string()),
                                    ("resolution_level", nullable(integer())),
                                    ("base_dac", number()),
                                    ("surcharge_dac", number()),
                                ],
                            )),
                            "ARA observation prices by tier and resolution level (generations of anchor:pricing@1.1.0)",
                        ),
                    ),
                    ("earned_dac", json!({ "type": "object" })),
                    ("asa", json!({ "type": "object" })),
                    ("ise", json!({ "type": "object" })),
                    ("sdac", json!({ "type": "object" })),
                    ("retention_subscription", json!({ "type": "object" })),
                    ("tsl", json!({ "type": "object" })),
                ],
            ),
        ),
        op(Method::GET, "/v1/pricing/ee-presets", get(presets)).tag("Pricing").summary("EE presets with what each costs").ok(
            200,
            "Presets",
            object(
                &[],
                vec![
                    ("pricing_version", string()),
                    (
                        "presets",
                        array(object(
                            &[],
                            vec![
                                ("name", string()),
                                ("label", string()),
                                ("enabled", boolean()),
                                ("ee_retention_period", string()),
                                ("ee_integrity_verification_level", string()),
                                ("ee_disclosure_format_policy", string()),
                                ("ee_responsibility_scope", string()),
                                ("dac_amount", number()),
                                ("cost_breakdown", reference("CostBreakdown")),
                            ],
                        )),
                    ),
                ],
            ),
        ),
    ]
}

async fn current(State(state): State<AppState>) -> ApiResult<axum::Json<Value>> {
    let policy = state.pricing.policy()?;
    let mut axes = Map::new();
    let mut indefinite_available = false;
    for price in &policy.axes {
        let mut entry = json!({
            "add": price.add.to_json_number(),
            "available": price.available,
        });
        if price.monthly > MilliDac::ZERO {
            entry["monthly"] = price.monthly.to_json_number();
        }
        if let Some(note) = &price.note {
            entry["note"] = json!(note);
        }
        if price.axis == "ee_retention_period" && price.value == "indefinite" {
            indefinite_available = price.available;
        }
        axes.entry(price.axis.clone()).or_insert_with(|| json!({}))[&price.value] = entry;
    }
    let mut body = json!({
        "pricing_version": policy.version,
        "effective_from": policy.effective_from,
        "component_sha256": state.pricing.generation().sha256,
        "wit_package": state.pricing.generation().interface,
        "currency": "DAC",
        "unit": { "dac_in_usd": "0.001", "usdc_base_units_per_dac": 1000 },
        "base_fee": policy.base_fee.to_json_number(),
        "axes": axes,
        "formula": "subtotal = base_fee + every axis add; total_dac = subtotal x multiplier; premium = total_dac - base_fee",
        "multiplier_conditions": {
            "conditions": policy.multiplier_conditions.iter().map(|(axis, value)| json!({ "axis": axis, "value": value })).collect::<Vec<_>>(),
            "min_matches": policy.multiplier_min_matches,
            "multiplier": MilliDac(i64::from(policy.multiplier_permille)).to_json_number(),
            "otherwise": 1,
        },
        "indefinite_available": indefinite_available,
        "trial": {
            "amount_dac": TRIAL_DAC.to_json_number(),
            "period_days": TRIAL_DAYS,
            "covers": ["base_fee", "premium"],
            "applies_to": anchor_app::catalog::trial_routes().map(|r| r.to_string()).collect::<Vec<_>>(),
        },
        "payment_window_minutes": PAYMENT_WINDOW_SECS / 60,
    });
    if let Some(services) = state.pricing.services()? {
        let dac = |m: MilliDac| m.to_json_number();
        body["observations"] = services
            .observations
            .iter()
            .map(|o| {
                json!({
                    "tier": o.tier.as_str(),
                    "resolution_level": if o.resolution == 0 { Value::Null } else { json!(o.resolution) },
                    "base_dac": dac(o.base),
                    "surcharge_dac": dac(o.surcharge),
                })
            })
            .collect();
        body["earned_dac"] = json!({ "min_spend": dac(services.earned_threshold), "expiry_days": services.earned_expiry_days });
        body["asa"] = json!({
            "base_cost_dac": dac(services.asa_period),
            "base_period_days": services.asa_period_days,
            "grace_days": services.asa_grace_days,
            "max_periods": services.asa_max_periods,
            "earned_enabled": true,
        });
        body["ise"] =
            json!({ "fee_dac": dac(services.ise_fee), "free_seconds": services.ise_free_seconds, "max_minutes": services.ise_max_minutes });
        body["sdac"] = json!({
            "base_fee_dac": dac(services.sdac_base_fee),
            "cost_ratio": MilliDac(i64::from(services.sdac_ratio_permille)).to_json_number(),
        });
        body["retention_subscription"] =
            json!({ "monthly_dac": dac(services.retention_monthly), "grace_days": services.retention_grace_days });
        body["tsl"] = json!({ "purchase_fee_dac": dac(services.tsl_base_fee) });
    }
    Ok(axum::Json(body))
}

async fn presets(State(state): State<AppState>) -> ApiResult<axum::Json<Value>> {
    let mut out = Vec::new();
    for preset in state.pricing.presets()? {
        let quote = state.pricing.quote(preset.scope())?;
        out.push(json!({
            "name": preset.name,
            "label": preset.label,
            "enabled": preset.enabled,
            "ee_retention_period": preset.retention.as_str(),
            "ee_integrity_verification_level": preset.integrity.as_str(),
            "ee_disclosure_format_policy": preset.disclosure.as_str(),
            "ee_responsibility_scope": preset.responsibility.as_str(),
            "dac_amount": quote.total.to_json_number(),
            "cost_breakdown": {
                "base_fee": quote.base_fee.to_json_number(),
                "premium": quote.premium().to_json_number(),
                "subtotal": quote.subtotal.to_json_number(),
                "multiplier": MilliDac(i64::from(quote.multiplier_permille)).to_json_number(),
                "total_dac": quote.total.to_json_number(),
                "axes": quote.charges.iter().map(|c| json!({ "axis": c.axis, "value": c.value, "add": c.add.to_json_number() })).collect::<Vec<_>>(),
            },
        }));
    }
    Ok(axum::Json(json!({ "pricing_version": state.pricing.generation().version, "presets": out })))
}
