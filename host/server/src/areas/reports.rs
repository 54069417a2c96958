//! The evidence report of one decision, as its owner (the portal) and an
//! agent paying for it (ARA) receive it.

use crate::areas::declarations::DeclaredDd;
use crate::wire::{Dac, Named, Time};
use anchor_domain::MilliDac;
use anchor_domain::declarations::{ee, template};
use anchor_domain::payments::SettlementStatus;
use schemars::JsonSchema;
use serde::Serialize;
use uuid::Uuid;

/// The evidence report of one decision, section by section.
#[derive(Serialize, JsonSchema)]
pub(crate) struct EvidenceReport {
    pub(crate) report: ReportHeader,
    pub(crate) decision: EvidenceDecision,
    pub(crate) ee_resolution: EeResolution,
    pub(crate) responsibility: Responsibility,
    pub(crate) accountability_record: AccountabilityRecord,
    pub(crate) transparency_log: TransparencyLog,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ReportHeader {
    report_type: &'static str,
    audience: &'static str,
    generated_at: Time,
    dd_id: Uuid,
    dac_charged: Dac,
    content_included: bool,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct EvidenceDecision {
    dd_id: Uuid,
    agent_id: Uuid,
    #[serde(flatten)]
    declared: DeclaredDd,
    anchored_at: Time,
    lineage_group_id: Uuid,
    parent_dd_id: Option<Uuid>,
    #[schemars(extend("enum" = [0, 1]))]
    content_inclusion_flag: u8,
    self_classification: Option<String>,
    decision_class: Option<Named<template::DecisionClass>>,
    target_class: Option<Named<template::TargetClass>>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct EeResolution {
    ee_id: Uuid,
    ee_preset: Option<String>,
    ee_retention_period: Named<ee::Retention>,
    ee_integrity_verification_level: Named<ee::Integrity>,
    ee_disclosure_format_policy: Named<ee::Disclosure>,
    access_class: Named<ee::AccessClass>,
    ee_direct_access_period: String,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Responsibility {
    ee_responsibility_scope: Named<ee::Responsibility>,
    delegation_state: Named<ee::Delegation>,
    content_disclosure_scope: Named<ee::ContentScope>,
    declared_by: Uuid,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct AccountabilityRecord {
    integrity_hash: Option<String>,
    confirmed_at: Option<Time>,
    settlement_status: Named<SettlementStatus>,
    dac_amount: Dac,
    pricing_version: String,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct TransparencyLog {
    included: bool,
    leaf_index: Option<i64>,
    checkpoint_size: Option<i64>,
    covered_by_checkpoint: bool,
    #[schemars(url)]
    receipt: String,
    #[schemars(url)]
    log_key: String,
}

impl EvidenceReport {
    pub fn of(e: &anchor_app::declarations::Evidence, audience: &'static str, charged: MilliDac, base: &str) -> EvidenceReport {
        let d = &e.stored.declaration;
        let dd_id = d.dd_id;
        let scope = &d.ee.scope;
        let t = d.template.as_ref();
        EvidenceReport {
            report: ReportHeader {
                report_type: "evidence",
                audience,
                generated_at: e.generated_at.into(),
                dd_id,
                dac_charged: charged.into(),
                content_included: false,
            },
            decision: EvidenceDecision {
                dd_id,
                agent_id: d.agent_id,
                declared: DeclaredDd::from(&d.dd),
                anchored_at: d.anchored_at.into(),
                lineage_group_id: d.lineage_group_id,
                parent_dd_id: d.dd.parent_dd_id,
                content_inclusion_flag: u8::from(d.content_inclusion),
                self_classification: t.and_then(|t| t.self_classification.clone()),
                decision_class: t.and_then(|t| t.decision_class.map(Named)),
                target_class: t.and_then(|t| t.target_class.map(Named)),
            },
            ee_resolution: EeResolution {
                ee_id: d.ee_id,
                ee_preset: d.ee.preset.clone(),
                ee_retention_period: Named(scope.retention),
                ee_integrity_verification_level: Named(scope.integrity),
                ee_disclosure_format_policy: Named(scope.disclosure),
                access_class: Named(d.ee.access_class),
                ee_direct_access_period: d.ee.direct_access_period.to_string(),
            },
            responsibility: Responsibility {
                ee_responsibility_scope: Named(scope.responsibility),
                delegation_state: Named(scope.delegation),
                content_disclosure_scope: Named(scope.content_scope),
                declared_by: d.agent_id,
            },
            accountability_record: AccountabilityRecord {
                integrity_hash: e.stored.integrity_hash.clone(),
                confirmed_at: e.stored.confirmed_at.map(Time),
                settlement_status: Named(e.stored.settlement_status),
                dac_amount: d.dac_amount.into(),
                pricing_version: d.pricing_version.clone(),
            },
            transparency_log: TransparencyLog {
                included: e.leaf_index.is_some(),
                leaf_index: e.leaf_index,
                checkpoint_size: e.checkpoint_size,
                covered_by_checkpoint: e.covered(),
                receipt: format!("{base}/v1/dd/{dd_id}/receipt"),
                log_key: format!("{base}/v1/log/key"),
            },
        }
    }
}
