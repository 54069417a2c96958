//! DD and EE: create (priced by the pricing component, paid from Trial),
//! confirm (fixes the integrity hash), list, detail, lineage.
//!
//! # Direct access
//!
//! `GET /v1/dd/{dd_id}` returns the original: every declared field. Each such
//! read by the owning agent counts one against the EE's
//! `ee_direct_access_quota` and must fall within `ee_direct_access_period`,
//! which starts at the anchoring time. Only that route counts: the list, the
//! lineage routes and confirm show identity and accounting (ids, times, amount,
//! settlement, hash) and never the declared fields, so they are free to read.
//! Once the quota is spent the read answers 403 `DIRECT_ACCESS_EXHAUSTED`; after
//! the period it answers 403 `DIRECT_ACCESS_EXPIRED`; for `access_class`
//! `ara_only` it answers 403 `DIRECT_ACCESS_NOT_PERMITTED`. None of these
//! refusals counts as a read, and the record itself is never changed by them.

use std::collections::HashMap;

use crate::extract::{ApiPath, ApiQuery};
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::declarations::dd::{self, CORE_SCHEMA_VERSION, DdFields};
use anchor_domain::declarations::ee;
use anchor_domain::declarations::template::{self, Template};
use anchor_domain::integrity::ENCODING_NAME;
use anchor_store::{AgentRecord, DirectRead, ListFilter, PaymentSource, SettlementStatus, StoredDeclaration};

use super::input::{Obj, path_uuid, query_datetime};
use crate::error::{ApiError, ApiResult};
use crate::extract::{AuthAgent, JsonBody, PaymentOffer};
use crate::openapi::*;
use crate::payment;
use crate::state::AppState;
use anchor_app::declarations::{self, CreateInput, EeInput, PremiumSource};

const CREATE_FIELDS: &[&str] = &["request_id", "dd", "ee", "continuity", "premium_payment_source", "content_inclusion_flag", "template"];
const DD_FIELDS: &[&str] = &[
    "dd_unit_type",
    "dd_declaration_mode",
    "decision_type",
    "decision_action_type",
    "origin_context_type",
    "selection_state",
    "selection_scope",
    "decision_at",
    "parent_dd_id",
];
const EE_FIELDS: &[&str] = &[
    "ee_preset",
    "ee_retention_period",
    "ee_integrity_verification_level",
    "ee_disclosure_format_policy",
    "ee_responsibility_scope",
    "ee_direct_access_period",
    "ee_direct_access_quota",
    "content_disclosure_scope",
    "delegation_state",
    "access_class",
];
const TEMPLATE_FIELDS: &[&str] = &[
    "decision_class",
    "decision_scale_value",
    "target_class",
    "call_chain",
    "decision_scale_unit",
    "self_classification",
    "decision_trigger",
    "human_involvement",
];

pub fn operations() -> Vec<Operation> {
    let summary = summary_schema();
    vec![
        op(Method::POST, "/v1/dd/create", post(create))
            .tag("DD")
            .summary("Declare a decision with its accountability scope")
            .describe("Records the declaration's metadata, prices its EE with the active pricing generation and pays it from Trial while Trial lasts. Reusing a request_id returns the earlier result. When nothing can pay, answers 402 with an x402 challenge.")
            .agent()
            .request(
                object(&["request_id", "dd", "ee"], vec![
                    ("request_id", doc(uuid(), "Idempotency key, scoped to the agent")),
                    ("dd", reference("DDInput")),
                    ("ee", reference("EEInput")),
                    ("continuity", object(&[], vec![("parent_dd_id", uuid())])),
                    ("premium_payment_source", enumeration(PremiumSource::NAMES)),
                    ("content_inclusion_flag", json!({ "type": "integer", "enum": [0, 1], "default": 0 })),
                    ("template", reference("TemplateInput")),
                ]),
                json!({
                    "request_id": "00000000-0000-4000-8000-000000000000",
                    "dd": {
                        "dd_unit_type": "single", "dd_declaration_mode": "self_declared",
                        "decision_type": "internal_service", "decision_action_type": "execute",
                        "origin_context_type": "internal", "selection_state": "SELECTED",
                    },
                    "ee": { "ee_preset": "EE_basic" },
                }),
            )
            .ok(201, "Created (or the earlier result of the same request_id)", object(&[], vec![
                ("dd_id", uuid()),
                ("ee_id", uuid()),
                ("request_id", uuid()),
                ("dac_amount", number()),
                ("pricing_version", string()),
                ("pricing_component_sha256", string()),
                ("cost_breakdown", reference("CostBreakdown")),
                ("payment_deadline", nullable(datetime())),
                ("status", enumeration(&["trial_paid", "pending_payment"])),
                ("settlement_status", enumeration(SettlementStatus::NAMES)),
                ("anchored_at", datetime()),
                ("lineage_group_id", uuid()),
                ("payment", json!({ "type": "object" })),
                ("trial_payment", object(&[], vec![
                    ("payment_source", string()),
                    ("trial_remaining", number()),
                    ("trial_expires_at", datetime()),
                ])),
            ]))
            .error(400, "Validation failed.", &[
                "MISSING_FIELD", "INVALID_ENUM", "UNKNOWN_FIELD", "INVALID_UUID", "INVALID_VALUE", "INVALID_INPUT",
                "INVALID_EE_PRESET", "EE_PRESET_DISABLED", "DECLARATION_MODE_NOT_ALLOWED", "DECISION_AT_IN_FUTURE",
                "PII_DETECTED", "INSUFFICIENT_DAC", "INVALID_PAYLOAD",
            ])
            .error(400, "A PAYMENT-SIGNATURE (or X-PAYMENT) header that is not base64 JSON, or both headers with different payments.", &["INVALID_PAYLOAD"])
            .error(403, "The parent belongs to another agent, indefinite retention without a subscription, or the agent's DAB is reached.", &[
                "FORBIDDEN", "INDEFINITE_SUBSCRIPTION_REQUIRED", "DAB_LIMIT_REACHED",
            ])
            .error(404, "parent_dd_id names no declaration.", &["DD_NOT_FOUND"])
            .payment_required("Trial cannot pay (spent or expired) and no payment came with the request."),
        op(Method::POST, "/v1/dd/confirm", post(confirm))
            .tag("DD")
            .summary("Confirm a declaration after its action")
            .describe("Settles the record once, writes its usage entries and fixes its integrity hash.")
            .agent()
            .request(object(&["dd_id"], vec![("dd_id", uuid())]), json!({ "dd_id": "<dd_id from create>" }))
            .ok(200, "Confirmed", object(&[], vec![
                ("dd_id", uuid()),
                ("settlement_status", string()),
                ("anchored_at", datetime()),
                ("confirmed_at", datetime()),
                ("integrity_hash", doc(string(), "sha256: and 64 hex digits over the record's canonical encoding")),
                ("dac_ur_recorded", boolean()),
                ("payment_sources", array(enumeration(&["trial", "external", "earned"]))),
                ("settlement_currency", nullable(string())),
                ("exchange_rate_timestamp", nullable(datetime())),
                ("sync_reward", doc(object(&[], vec![
                    ("dac_amount", number()),
                    ("gap_seconds", integer()),
                    ("window_minutes", integer()),
                    ("earned_balance", number()),
                    ("expires_at", datetime()),
                ]), "Present only when a time-alignment reward was credited in Earned DAC; this service credits none until Earned DAC exists")),
            ]))
            .error(400, "Invalid request.", &["MISSING_FIELD", "INVALID_UUID", "UNKNOWN_FIELD"])
            .error(403, "The record belongs to another agent.", &["FORBIDDEN"])
            .error(404, "No such record.", &["DD_NOT_FOUND"])
            .error(409, "Already confirmed.", &["ALREADY_CONFIRMED"])
            .error(409, "The payment failed to settle earlier.", &["PAYMENT_FAILED"])
            .error(410, "The external payment window closed.", &["PAYMENT_EXPIRED"])
            .payment_required("Settlement failed: nothing was charged or anchored; PAYMENT-RESPONSE says why.")
            .error(503, "The settlement's outcome is unknown; confirm again to reconcile.", &["SETTLEMENT_PENDING"]),
        op(Method::GET, "/v1/dd/list", get(list))
            .tag("DD")
            .summary("List the agent's declarations, newest first")
            .agent()
            .query_param("from", datetime())
            .query_param("to", datetime())
            .query_param("limit", json!({ "type": "integer", "default": 50, "minimum": 1, "maximum": 200 }))
            .query_param("offset", json!({ "type": "integer", "default": 0, "minimum": 0 }))
            .ok(200, "Summaries (no declared fields; these reads are free)", object(&[], vec![
                ("dds", array(summary.clone())),
                ("total", integer()),
                ("limit", integer()),
                ("offset", integer()),
            ]))
            .error(400, "Invalid query.", &["INVALID_VALUE"]),
        op(Method::GET, "/v1/dd/{dd_id}", get(detail))
            .tag("DD")
            .summary("Read a declaration's original (counts against direct access)")
            .agent()
            .path_param("dd_id", uuid())
            .ok(200, "The declaration", detail_schema())
            .error(400, "dd_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Another agent's record, or direct access spent, expired or not permitted.", &[
                "FORBIDDEN", "DIRECT_ACCESS_EXHAUSTED", "DIRECT_ACCESS_EXPIRED", "DIRECT_ACCESS_NOT_PERMITTED",
            ])
            .error(404, "No such record.", &["DD_NOT_FOUND"]),
        op(Method::GET, "/v1/dd/{dd_id}/lineage", get(lineage))
            .tag("DD")
            .summary("The lineage tree a declaration belongs to")
            .agent()
            .path_param("dd_id", uuid())
            .ok(200, "Lineage tree", object(&[], vec![
                ("dd_id", uuid()),
                ("lineage_group_id", uuid()),
                ("root_dd_id", uuid()),
                ("ancestors", array(summary.clone())),
                ("tree", json!({ "type": "object", "description": "Nested summaries from the root; each node has children" })),
            ]))
            .error(400, "dd_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Another agent's record.", &["FORBIDDEN"])
            .error(404, "No such record.", &["DD_NOT_FOUND"]),
        op(Method::GET, "/v1/dd/lineage-group/{group_id}", get(lineage_group))
            .tag("DD")
            .summary("Every declaration of one lineage group")
            .agent()
            .path_param("group_id", uuid())
            .ok(200, "Declarations in the group, oldest first", object(&[], vec![
                ("lineage_group_id", uuid()),
                ("dds", array(summary)),
                ("count", integer()),
            ]))
            .error(400, "group_id is not a UUID.", &["INVALID_UUID"])
            .error(404, "The agent has no declaration in this group.", &["NOT_FOUND"]),
    ]
}

// ---- reading the create request ----

fn read_create(body: &Value, now: DateTime<Utc>) -> ApiResult<CreateInput> {
    let top = Obj::new(body, "", CREATE_FIELDS)?;
    let request_id = top.req_uuid("request_id")?;
    let dd = read_dd(top.get("dd").ok_or_else(|| top.missing("dd"))?, now)?;
    let ee = read_ee(top.get("ee").ok_or_else(|| top.missing("ee"))?)?;

    let mut dd = dd;
    if let Some(continuity) = top.get("continuity") {
        // Only parent_dd_id is read here; other keys are ignored by contract.
        let continuity = Obj::lenient(continuity, "continuity")?;
        if let Some(parent) = continuity.opt_uuid("parent_dd_id")? {
            match dd.parent_dd_id {
                Some(other) if other != parent => {
                    return Err(ApiError::bad(
                        "INVALID_VALUE",
                        "dd.parent_dd_id and continuity.parent_dd_id name different parents; send one",
                    ));
                }
                _ => dd.parent_dd_id = Some(parent),
            }
        }
    }

    let content_inclusion = match top.get("content_inclusion_flag") {
        None => false,
        Some(v) if v.as_i64() == Some(0) => false,
        Some(v) if v.as_i64() == Some(1) => true,
        Some(v) => {
            return Err(ApiError::bad("INVALID_ENUM", format!("content_inclusion_flag must be 0 or 1; got {}", super::input::shown(v))));
        }
    };
    let template = top.get("template").map(read_template).transpose()?;
    match (content_inclusion, &template) {
        (true, None) => {
            return Err(ApiError::bad("MISSING_FIELD", "template is required when content_inclusion_flag is 1"));
        }
        (true, Some(t)) if !t.has_any_dimension() => {
            return Err(ApiError::bad("INVALID_INPUT", "template must fill at least one of its dimensions"));
        }
        (false, Some(_)) => {
            return Err(ApiError::bad(
                "INVALID_INPUT",
                "template is only accepted with content_inclusion_flag 1; send the flag or leave the template out",
            ));
        }
        _ => {}
    }
    let premium_source = top.opt_enum("premium_payment_source", PremiumSource::parse, PremiumSource::NAMES)?;
    Ok(CreateInput { request_id, dd, ee, content_inclusion, template, premium_source })
}

fn read_dd(value: &Value, now: DateTime<Utc>) -> ApiResult<DdFields> {
    let o = Obj::new(value, "dd", DD_FIELDS)?;
    let declaration_mode = o.req_enum("dd_declaration_mode", dd::DeclarationMode::parse, dd::DeclarationMode::NAMES)?;
    let fields = DdFields {
        unit_type: o.req_enum("dd_unit_type", dd::UnitType::parse, dd::UnitType::NAMES)?,
        declaration_mode,
        decision_type: o.req_enum("decision_type", dd::DecisionType::parse, dd::DecisionType::NAMES)?,
        action_type: o.req_enum("decision_action_type", dd::ActionType::parse, dd::ActionType::NAMES)?,
        origin_context: o.req_enum("origin_context_type", dd::OriginContext::parse, dd::OriginContext::NAMES)?,
        selection_state: o.req_enum("selection_state", dd::SelectionState::parse, dd::SelectionState::NAMES)?,
        selection_scope: o.opt_enum("selection_scope", dd::SelectionScope::parse, dd::SelectionScope::NAMES)?,
        decision_at: o.opt_datetime("decision_at")?,
        parent_dd_id: o.opt_uuid("parent_dd_id")?,
    };
    if declaration_mode != dd::DeclarationMode::SelfDeclared {
        return Err(ApiError::bad(
            "DECLARATION_MODE_NOT_ALLOWED",
            format!("this route records self_declared decisions only; got dd.dd_declaration_mode {declaration_mode}"),
        ));
    }
    if let Some(at) = fields.decision_at
        && at > now
    {
        return Err(ApiError::bad(
            "DECISION_AT_IN_FUTURE",
            format!("dd.decision_at {} is later than the anchoring time {}", at.to_rfc3339(), now.to_rfc3339()),
        ));
    }
    Ok(fields)
}

fn read_ee(value: &Value) -> ApiResult<EeInput> {
    let o = Obj::new(value, "ee", EE_FIELDS)?;
    let preset = o.opt_str("ee_preset")?.map(str::to_string);
    let retention = o.opt_enum("ee_retention_period", ee::Retention::parse, ee::Retention::NAMES)?;
    let integrity = o.opt_enum("ee_integrity_verification_level", ee::Integrity::parse, ee::Integrity::NAMES)?;
    let disclosure = o.opt_enum("ee_disclosure_format_policy", ee::Disclosure::parse, ee::Disclosure::NAMES)?;
    let responsibility = o.opt_enum("ee_responsibility_scope", ee::Responsibility::parse, ee::Responsibility::NAMES)?;
    if preset.is_none() {
        for axis in ["ee_retention_period", "ee_integrity_verification_level", "ee_disclosure_format_policy", "ee_responsibility_scope"] {
            if !o.has(axis) {
                return Err(ApiError::bad("MISSING_FIELD", format!("ee.{axis} is required unless ee.ee_preset is sent")));
            }
        }
    }
    let period = match o.opt_str("ee_direct_access_period")? {
        Some(text) => ee::AccessPeriod::parse(text)?,
        None => ee::DEFAULT_ACCESS_PERIOD,
    };
    let quota = match o.opt_int("ee_direct_access_quota")? {
        Some(q) if q < 0 => return Err(ApiError::bad("INVALID_VALUE", "ee.ee_direct_access_quota must be 0 or more")),
        Some(q) if q > 1_000_000 => return Err(ApiError::bad("INVALID_VALUE", "ee.ee_direct_access_quota must be at most 1000000")),
        Some(q) => q,
        None => ee::DEFAULT_ACCESS_QUOTA,
    };
    Ok(EeInput {
        preset,
        retention,
        integrity,
        disclosure,
        responsibility,
        content_scope: o
            .opt_enum("content_disclosure_scope", ee::ContentScope::parse, ee::ContentScope::NAMES)?
            .unwrap_or(ee::ContentScope::Owner),
        delegation: o.opt_enum("delegation_state", ee::Delegation::parse, ee::Delegation::NAMES)?.unwrap_or(ee::Delegation::None),
        period,
        quota,
        access_class: o.opt_enum("access_class", ee::AccessClass::parse, ee::AccessClass::NAMES)?.unwrap_or(ee::AccessClass::SelfDirect),
    })
}

fn read_template(value: &Value) -> ApiResult<Template> {
    let o = Obj::new(value, "template", TEMPLATE_FIELDS)?;
    let scale_value = match o.get("decision_scale_value") {
        None => None,
        Some(Value::Number(n)) if n.as_f64().is_some_and(f64::is_finite) => Some(n.to_string()),
        Some(v) => {
            return Err(ApiError::bad(
                "INVALID_VALUE",
                format!("template.decision_scale_value must be a number; got {}", super::input::shown(v)),
            ));
        }
    };
    let scale_unit = o.opt_str("decision_scale_unit")?.map(str::to_string);
    if let Some(unit) = &scale_unit {
        template::check_scale_unit(unit)?;
    }
    let call_chain = match o.get("call_chain") {
        None => None,
        Some(Value::Array(items)) => {
            if items.len() > template::CALL_CHAIN_MAX {
                return Err(ApiError::bad(
                    "INVALID_VALUE",
                    format!("template.call_chain holds at most {} entries; got {}", template::CALL_CHAIN_MAX, items.len()),
                ));
            }
            let mut chain = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                let token = item
                    .as_str()
                    .ok_or_else(|| ApiError::bad("INVALID_VALUE", format!("template.call_chain[{index}] must be a string")))?;
                template::check_call_chain_entry(index, token)?;
                chain.push(token.to_string());
            }
            Some(chain)
        }
        Some(_) => return Err(ApiError::bad("INVALID_VALUE", "template.call_chain must be an array of tool identifiers")),
    };
    Ok(Template {
        decision_class: o.opt_enum("decision_class", template::DecisionClass::parse, template::DecisionClass::NAMES)?,
        decision_scale_value: scale_value,
        decision_scale_unit: scale_unit,
        target_class: o.opt_enum("target_class", template::TargetClass::parse, template::TargetClass::NAMES)?,
        call_chain,
        self_classification: o.opt_str("self_classification")?.map(str::to_string),
        decision_trigger: o.opt_enum("decision_trigger", template::Trigger::parse, template::Trigger::NAMES)?,
        human_involvement: o.opt_enum("human_involvement", template::HumanInvolvement::parse, template::HumanInvolvement::NAMES)?,
    })
}

// ---- handlers ----

async fn create(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, axum::Json<Value>)> {
    let input = read_create(&body, state.clock.now())?;
    let stored = declarations::create(&state.app, &agent, input, offered).await?;
    Ok((StatusCode::CREATED, axum::Json(create_response(&stored, &agent, &state.settings.pay_to))))
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn cost_breakdown(s: &StoredDeclaration) -> Value {
    json!({
        "base_fee": s.base_fee.to_json_number(),
        "base_fee_source": s.base_fee_source.as_str(),
        "premium": s.premium().to_json_number(),
        "premium_source": s.premium_source.as_str(),
        "subtotal": s.subtotal.to_json_number(),
        "multiplier": MilliDac(i64::from(s.multiplier_permille)).to_json_number(),
        "total_dac": s.declaration.dac_amount.to_json_number(),
    })
}

fn create_response(s: &StoredDeclaration, agent: &AgentRecord, pay_to: &str) -> Value {
    let d = &s.declaration;
    let external = declarations::paid_externally(s);
    let mut body = json!({
        "dd_id": d.dd_id,
        "ee_id": d.ee_id,
        "request_id": s.request_id,
        "dac_amount": d.dac_amount.to_json_number(),
        "pricing_version": d.pricing_version,
        "pricing_component_sha256": d.pricing_sha256,
        "cost_breakdown": cost_breakdown(s),
        "status": if external { "pending_payment" } else { "trial_paid" },
        "settlement_status": s.settlement_status,
        "anchored_at": time(d.anchored_at),
        "lineage_group_id": d.lineage_group_id,
    });
    if s.base_fee_source == PaymentSource::Trial {
        body["trial_payment"] = json!({
            "payment_source": "trial",
            "trial_remaining": s.trial_remaining_after.unwrap_or(MilliDac::ZERO).to_json_number(),
            "trial_expires_at": time(agent.trial_expires_at),
        });
        if external {
            body["trial_payment"]["covers"] = json!("base_fee");
        }
    }
    if external {
        // 1 DAC = 0.001 USDC, so milli-DAC count USDC base units.
        let usdc = if s.base_fee_source == PaymentSource::External { d.dac_amount } else { s.premium() };
        body["payment_deadline"] = json!(s.payment_deadline.map(time));
        body["payment"] = json!({
            "payment_address": pay_to,
            "network": anchor_x402::NETWORK,
            "asset": anchor_x402::USDC_BASE,
            "amount_usdc": payment::usdc_json(usdc.usdc_base_units()),
            "amount_units": usdc.usdc_base_units().to_string(),
            "approx_krw": payment::approx_krw(usdc),
            "expires_at": s.payment_deadline.map(time),
            "note": "the authorization is reserved, not settled: confirm before expires_at to settle it; after that it is released and nothing is charged",
        });
    }
    body
}

async fn confirm(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    JsonBody(body): JsonBody,
) -> ApiResult<axum::response::Response> {
    let input = Obj::new(&body, "", &["dd_id"])?;
    let dd_id = input.req_uuid("dd_id")?;
    let confirmed = declarations::confirm(&state.app, agent.agent_id, dd_id).await?;
    let mut sources: Vec<&str> = confirmed.usage.iter().map(|u| u.source.as_str()).collect();
    sources.dedup();
    let external = confirmed.settlement.is_some();
    let body = json!({
        "dd_id": dd_id,
        "settlement_status": "settled",
        "anchored_at": time(confirmed.anchored_at),
        "confirmed_at": time(confirmed.confirmed_at),
        "integrity_hash": confirmed.integrity_hash,
        "dac_ur_recorded": true,
        "payment_sources": sources,
        "settlement_currency": if external { json!("USDC") } else { Value::Null },
        "exchange_rate_timestamp": if external { json!(time(confirmed.confirmed_at)) } else { Value::Null },
    });
    Ok(crate::payment::with_settlement(axum::Json(body).into_response(), confirmed.settlement.as_ref()))
}

/// The declaration, if it exists and belongs to `agent`.
pub(crate) async fn owned(state: &AppState, agent: &AgentRecord, dd_id: Uuid) -> ApiResult<StoredDeclaration> {
    Ok(declarations::owned(&state.app, agent.agent_id, dd_id).await?)
}

fn summary_schema() -> Value {
    object(
        &[],
        vec![
            ("dd_id", uuid()),
            ("ee_id", uuid()),
            ("anchored_at", datetime()),
            ("confirmed_at", nullable(datetime())),
            ("settlement_status", string()),
            ("dac_amount", number()),
            ("pricing_version", string()),
            ("integrity_hash", nullable(string())),
            ("parent_dd_id", nullable(uuid())),
            ("lineage_group_id", uuid()),
        ],
    )
}

fn summary(s: &StoredDeclaration) -> Value {
    let d = &s.declaration;
    json!({
        "dd_id": d.dd_id,
        "ee_id": d.ee_id,
        "anchored_at": time(d.anchored_at),
        "confirmed_at": s.confirmed_at.map(time),
        "settlement_status": s.settlement_status,
        "dac_amount": d.dac_amount.to_json_number(),
        "pricing_version": d.pricing_version,
        "integrity_hash": s.integrity_hash,
        "parent_dd_id": d.dd.parent_dd_id,
        "lineage_group_id": d.lineage_group_id,
    })
}

async fn list(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiQuery(query): ApiQuery<HashMap<String, String>>,
) -> ApiResult<axum::Json<Value>> {
    let known = ["from", "to", "limit", "offset"];
    if let Some(unknown) = query.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ApiError::bad(
            "INVALID_VALUE",
            format!("unknown query parameter {}; accepted: from, to, limit, offset", anchor_domain::brief(unknown)),
        ));
    }
    let param = |name: &str| query.get(name).map(String::as_str);
    let number = |name: &str, value: Option<&str>, default: i64, min: i64, max: i64| -> ApiResult<i64> {
        match value {
            None => Ok(default),
            Some(text) => text.parse::<i64>().ok().filter(|n| (min..=max).contains(n)).ok_or_else(|| {
                ApiError::bad(
                    "INVALID_VALUE",
                    format!("{name} must be a whole number from {min} to {max}; got {}", anchor_domain::brief(text)),
                )
            }),
        }
    };
    let filter = ListFilter {
        from: query_datetime("from", param("from"))?,
        to: query_datetime("to", param("to"))?,
        limit: number("limit", param("limit"), 50, 1, 200)?,
        offset: number("offset", param("offset"), 0, 0, i64::from(i32::MAX))?,
    };
    let (rows, total) = state.store.list_declarations(agent.agent_id, filter).await?;
    Ok(axum::Json(json!({
        "dds": rows.iter().map(summary).collect::<Vec<_>>(),
        "total": total,
        "limit": filter.limit,
        "offset": filter.offset,
    })))
}

fn detail_schema() -> Value {
    object(
        &[],
        vec![
            (
                "dd",
                object(
                    &[],
                    vec![
                        ("dd_id", uuid()),
                        ("agent_id", uuid()),
                        ("dd_unit_type", enumeration(dd::UnitType::NAMES)),
                        ("dd_declaration_mode", enumeration(dd::DeclarationMode::NAMES)),
                        ("decision_type", enumeration(dd::DecisionType::NAMES)),
                        ("decision_action_type", enumeration(dd::ActionType::NAMES)),
                        ("origin_context_type", enumeration(dd::OriginContext::NAMES)),
                        ("selection_state", enumeration(dd::SelectionState::NAMES)),
                        ("selection_scope", nullable(enumeration(dd::SelectionScope::NAMES))),
                        ("content_inclusion_flag", json!({ "type": "integer", "enum": [0, 1] })),
                        ("decision_at", nullable(datetime())),
                        ("anchored_at", datetime()),
                        ("integrity_hash", nullable(string())),
                        ("core_schema_version", string()),
                        ("parent_dd_id", nullable(uuid())),
                        ("lineage_group_id", uuid()),
                        ("template", nullable(reference("TemplateInput"))),
                    ],
                ),
            ),
            (
                "ee",
                nullable(object(
                    &[],
                    vec![
                        ("ee_id", uuid()),
                        ("ee_preset", nullable(string())),
                        ("ee_retention_period", string()),
                        ("ee_integrity_verification_level", string()),
                        ("ee_disclosure_format_policy", string()),
                        ("ee_responsibility_scope", string()),
                        ("ee_direct_access_period", string()),
                        ("ee_direct_access_quota", integer()),
                        ("access_class", enumeration(ee::AccessClass::NAMES)),
                        ("content_disclosure_scope", enumeration(ee::ContentScope::NAMES)),
                        ("delegation_state", enumeration(ee::Delegation::NAMES)),
                    ],
                )),
            ),
            (
                "dac",
                nullable(object(
                    &[],
                    vec![
                        ("dac_amount", number()),
                        ("dac_unit_type", string()),
                        ("cost_context_type", string()),
                        ("pricing_version", nullable(string())),
                        ("pricing_component_sha256", string()),
                        ("cost_breakdown", reference("CostBreakdown")),
                    ],
                )),
            ),
            (
                "payment",
                nullable(object(
                    &[],
                    vec![
                        ("settlement_status", enumeration(SettlementStatus::NAMES)),
                        ("payment_sources", array(enumeration(&["trial", "external", "earned"]))),
                        ("payment_method", nullable(string())),
                        ("paid_at", nullable(datetime())),
                    ],
                )),
            ),
            (
                "direct_access",
                nullable(object(
                    &[],
                    vec![("access_class", string()), ("direct_access_remaining", integer()), ("direct_access_expires_at", datetime())],
                )),
            ),
            (
                "integrity",
                object(
                    &[],
                    vec![
                        ("encoding", doc(string(), "The canonical encoding hashed into integrity_hash")),
                        ("salt", doc(string(), "The record's private salt, hex; with the fields above it recomputes integrity_hash")),
                    ],
                ),
            ),
        ],
    )
}

async fn detail(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(dd_id): ApiPath<String>,
) -> ApiResult<axum::Json<Value>> {
    let dd_id = path_uuid("dd_id", &dd_id)?;
    let stored = owned(&state, &agent, dd_id).await?;
    let d = &stored.declaration;
    if d.ee.access_class == ee::AccessClass::AraOnly {
        return Err(ApiError::forbidden(
            "DIRECT_ACCESS_NOT_PERMITTED",
            "this declaration's access_class is ara_only: its original is not readable directly",
        ));
    }
    let remaining = match state.store.consume_direct_read(dd_id, state.clock.now()).await? {
        DirectRead::Granted { remaining } => remaining,
        DirectRead::Exhausted => {
            return Err(ApiError::forbidden(
                "DIRECT_ACCESS_EXHAUSTED",
                format!(
                    "all {} direct reads of this declaration are spent; GET /v1/dd/list still shows its summary",
                    d.ee.direct_access_quota
                ),
            ));
        }
        DirectRead::Expired => {
            return Err(ApiError::forbidden(
                "DIRECT_ACCESS_EXPIRED",
                format!(
                    "the direct access period ({}) of this declaration ended at {}",
                    d.ee.direct_access_period,
                    time(stored.direct_access_expires_at)
                ),
            ));
        }
    };
    let t = d.template.as_ref();
    let template = t.map(|t| {
        json!({
            "decision_class": t.decision_class.map(|v| v.as_str()),
            "decision_scale_value": t.decision_scale_value.as_ref().and_then(|v| serde_json::from_str::<Value>(v).ok()),
            "decision_scale_unit": t.decision_scale_unit,
            "target_class": t.target_class.map(|v| v.as_str()),
            "call_chain": t.call_chain,
            "self_classification": t.self_classification,
            "decision_trigger": t.decision_trigger.map(|v| v.as_str()),
            "human_involvement": t.human_involvement.map(|v| v.as_str()),
        })
    });
    let mut sources = vec![stored.base_fee_source.as_str()];
    if stored.premium() > MilliDac::ZERO && stored.premium_source != stored.base_fee_source {
        sources.push(stored.premium_source.as_str());
    }
    Ok(axum::Json(json!({
        "dd": {
            "dd_id": d.dd_id,
            "agent_id": d.agent_id,
            "dd_unit_type": d.dd.unit_type.as_str(),
            "dd_declaration_mode": d.dd.declaration_mode.as_str(),
            "decision_type": d.dd.decision_type.as_str(),
            "decision_action_type": d.dd.action_type.as_str(),
            "origin_context_type": d.dd.origin_context.as_str(),
            "selection_state": d.dd.selection_state.as_str(),
            "selection_scope": d.dd.selection_scope.map(|v| v.as_str()),
            "content_inclusion_flag": i32::from(d.content_inclusion),
            "decision_at": d.dd.decision_at.map(time),
            "anchored_at": time(d.anchored_at),
            "integrity_hash": stored.integrity_hash,
            "core_schema_version": CORE_SCHEMA_VERSION,
            "parent_dd_id": d.dd.parent_dd_id,
            "lineage_group_id": d.lineage_group_id,
            "template": template,
        },
        "ee": {
            "ee_id": d.ee_id,
            "ee_preset": d.ee.preset,
            "ee_retention_period": d.ee.scope.retention.as_str(),
            "ee_integrity_verification_level": d.ee.scope.integrity.as_str(),
            "ee_disclosure_format_policy": d.ee.scope.disclosure.as_str(),
            "ee_responsibility_scope": d.ee.scope.responsibility.as_str(),
            "ee_direct_access_period": d.ee.direct_access_period.to_string(),
            "ee_direct_access_quota": d.ee.direct_access_quota,
            "access_class": d.ee.access_class.as_str(),
            "content_disclosure_scope": d.ee.scope.content_scope.as_str(),
            "delegation_state": d.ee.scope.delegation.as_str(),
        },
        "dac": {
            "dac_amount": d.dac_amount.to_json_number(),
            "dac_unit_type": "DAC",
            "cost_context_type": "dd_ee",
            "pricing_version": d.pricing_version,
            "pricing_component_sha256": d.pricing_sha256,
            "cost_breakdown": cost_breakdown(&stored),
        },
        "payment": {
            "settlement_status": stored.settlement_status,
            "payment_sources": sources,
            "payment_method": Value::Null,
            "paid_at": stored.confirmed_at.map(time),
        },
        "direct_access": {
            "access_class": d.ee.access_class.as_str(),
            "direct_access_remaining": remaining,
            "direct_access_expires_at": time(stored.direct_access_expires_at),
        },
        "integrity": {
            "encoding": ENCODING_NAME,
            "salt": hex::encode(d.salt),
        },
    })))
}

async fn lineage(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(dd_id): ApiPath<String>,
) -> ApiResult<axum::Json<Value>> {
    let dd_id = path_uuid("dd_id", &dd_id)?;
    let stored = owned(&state, &agent, dd_id).await?;
    let group = state.store.lineage_group(agent.agent_id, stored.declaration.lineage_group_id).await?;
    let by_id: HashMap<Uuid, &StoredDeclaration> = group.iter().map(|s| (s.declaration.dd_id, s)).collect();
    let mut ancestors = Vec::new();
    let mut cursor = stored.declaration.dd.parent_dd_id;
    while let Some(parent) = cursor.and_then(|id| by_id.get(&id)) {
        ancestors.push(*parent);
        cursor = parent.declaration.dd.parent_dd_id;
        if ancestors.len() > group.len() {
            break;
        }
    }
    ancestors.reverse();
    let root = ancestors.first().copied().unwrap_or(&stored);
    Ok(axum::Json(json!({
        "dd_id": dd_id,
        "lineage_group_id": stored.declaration.lineage_group_id,
        "root_dd_id": root.declaration.dd_id,
        "ancestors": ancestors.iter().map(|s| summary(s)).collect::<Vec<_>>(),
        "tree": tree(root, &group, 0),
    })))
}

fn tree(node: &StoredDeclaration, group: &[StoredDeclaration], depth: usize) -> Value {
    let mut value = summary(node);
    let children: Vec<Value> = if depth > 1_000 {
        Vec::new()
    } else {
        group
            .iter()
            .filter(|s| s.declaration.dd.parent_dd_id == Some(node.declaration.dd_id))
            .map(|child| tree(child, group, depth + 1))
            .collect()
    };
    value["children"] = Value::Array(children);
    value
}

async fn lineage_group(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(group_id): ApiPath<String>,
) -> ApiResult<axum::Json<Value>> {
    let group_id = path_uuid("group_id", &group_id)?;
    let group = state.store.lineage_group(agent.agent_id, group_id).await?;
    if group.is_empty() {
        return Err(ApiError::not_found("NOT_FOUND", format!("you have no declaration in lineage group {group_id}")));
    }
    Ok(axum::Json(json!({
        "lineage_group_id": group_id,
        "dds": group.iter().map(summary).collect::<Vec<_>>(),
        "count": group.len(),
    })))
}
