//! What a client sends to declare (DD create, a bilateral proposal, an
//! sDAC trial's EE), as the use cases take it: every field the client names,
//! nothing filled in. The rules a request meets before anything is looked up,
//! and the defaults of what it leaves out, are here, once: HTTP and MCP only
//! turn their wire shapes into these.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use anchor_domain::declarations::dd::{self, DdFields};
use anchor_domain::declarations::ee;
use anchor_domain::declarations::template::{self, Template};
use anchor_domain::trace::TraceId;

use crate::{AppError, AppResult};

/// Who pays a declaration's premium, when the agent says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PremiumSource {
    External,
    Earned,
}

impl PremiumSource {
    pub const NAMES: &'static [&'static str] = &["external", "earned"];

    pub fn parse(text: &str) -> Option<PremiumSource> {
        match text {
            "external" => Some(PremiumSource::External),
            "earned" => Some(PremiumSource::Earned),
            _ => None,
        }
    }
}

/// Which of the interface's two shapes a declaration arrived in. The
/// published interface takes a declaration nested (`dd` and `ee` objects,
/// the body of POST /v1/dd/create and /v1/dd/bilateral/propose) and flat
/// (the arguments of the reference's `create_decision` and
/// `propose_bilateral` tools), and the two differ in what may be left out:
/// the flat shape's schema gives defaults where the nested one requires the
/// field. Both are read here, by the same rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Form {
    /// `dd_unit_type`, `dd_declaration_mode`, `selection_state` and, without
    /// a preset, the four EE axes are required (`MISSING_FIELD`).
    #[default]
    Nested,
    /// Left out, they default as the reference tool schema says: a single
    /// unit, SELECTED, the mode of the operation that was called, and the
    /// axes `FLAT_AXES` (when no preset is named).
    Flat,
}

/// The EE axes a flat declaration without a preset defaults to: retention
/// medium, integrity basic, disclosure internal, responsibility standard.
pub const FLAT_AXES: (ee::Retention, ee::Integrity, ee::Disclosure, ee::Responsibility) =
    (ee::Retention::Medium, ee::Integrity::Basic, ee::Disclosure::Internal, ee::Responsibility::Standard);

/// A DD create request, read and checked field by field.
#[derive(Clone, Debug)]
pub struct CreateInput {
    pub request_id: Uuid,
    pub dd: DdFields,
    pub ee: EeInput,
    pub content_inclusion: bool,
    pub template: Option<Template>,
    pub premium_source: Option<PremiumSource>,
    pub trace: Option<TraceId>,
}

/// The EE as sent: a preset, axes, or both (the preset wins).
#[derive(Clone, Debug)]
pub struct EeInput {
    pub preset: Option<String>,
    pub retention: Option<ee::Retention>,
    pub integrity: Option<ee::Integrity>,
    pub disclosure: Option<ee::Disclosure>,
    pub responsibility: Option<ee::Responsibility>,
    pub content_scope: ee::ContentScope,
    pub delegation: ee::Delegation,
    pub period: ee::AccessPeriod,
    pub quota: i64,
    pub access_class: ee::AccessClass,
}

/// A DD create as the client sends it.
#[derive(Clone, Debug)]
pub struct CreateRequest {
    /// Idempotency key, scoped to the agent.
    pub request_id: Uuid,
    pub dd: DdRequest,
    pub ee: EeRequest,
    /// `continuity.parent_dd_id`, the published SDK's place for the parent.
    pub continuity_parent: Option<Uuid>,
    /// `content_inclusion_flag` 1.
    pub content_inclusion: bool,
    pub template: Option<TemplateRequest>,
    pub premium_source: Option<PremiumSource>,
    /// The trace id of the run that made the decision, from the caller's W3C
    /// trace context: the record's salt then commits to it
    /// ([`anchor_domain::trace`]).
    pub trace: Option<TraceId>,
    /// The shape it arrived in: what may be left out.
    pub form: Form,
}

/// The DD as sent.
#[derive(Clone, Debug)]
pub struct DdRequest {
    pub unit_type: Option<dd::UnitType>,
    pub declaration_mode: Option<dd::DeclarationMode>,
    pub decision_type: dd::DecisionType,
    pub action_type: dd::ActionType,
    pub origin_context: dd::OriginContext,
    pub selection_state: Option<dd::SelectionState>,
    pub selection_scope: Option<dd::SelectionScope>,
    pub decision_at: Option<DateTime<Utc>>,
    pub parent_dd_id: Option<Uuid>,
    pub excluded_option_count: Option<i64>,
}

/// The EE as sent: a preset, axes, or both; what it leaves out defaults.
#[derive(Clone, Debug, Default)]
pub struct EeRequest {
    pub preset: Option<String>,
    pub retention: Option<ee::Retention>,
    pub integrity: Option<ee::Integrity>,
    pub disclosure: Option<ee::Disclosure>,
    pub responsibility: Option<ee::Responsibility>,
    /// `30d`, `12m`, `1y`: read here.
    pub direct_access_period: Option<String>,
    pub direct_access_quota: Option<i64>,
    pub content_scope: Option<ee::ContentScope>,
    pub delegation: Option<ee::Delegation>,
    pub access_class: Option<ee::AccessClass>,
}

/// A template as sent (read only with `content_inclusion`).
#[derive(Clone, Debug, Default)]
pub struct TemplateRequest {
    pub decision_class: Option<template::DecisionClass>,
    /// The number's JSON text, kept exactly as sent (the integrity hash covers it).
    pub decision_scale_value: Option<String>,
    pub decision_scale_unit: Option<String>,
    pub target_class: Option<template::TargetClass>,
    pub call_chain: Option<Vec<String>>,
    pub self_classification: Option<String>,
    pub decision_trigger: Option<template::Trigger>,
    pub human_involvement: Option<template::HumanInvolvement>,
}

/// A bilateral proposal as the proposer sends it.
#[derive(Clone, Debug)]
pub struct ProposeRequest {
    /// Idempotency key; a new one when the client sends none.
    pub request_id: Option<Uuid>,
    pub counterparty_agent_id: Uuid,
    pub dd: DdRequest,
    pub ee: EeRequest,
    pub continuity_parent: Option<Uuid>,
    /// The shape it arrived in: what may be left out.
    pub form: Form,
}

impl CreateRequest {
    /// The rules a create meets before anything is looked up, and its defaults.
    pub fn into_input(self, now: DateTime<Utc>) -> AppResult<CreateInput> {
        let dd = self.dd.into_fields(now, dd::DeclarationMode::SelfDeclared, self.continuity_parent, self.form)?;
        // Branch 0 records the decision fact only: a template sent with it is
        // not read, checked or stored (the spec requires one with flag 1 and
        // says nothing of one with flag 0).
        let template = match (self.content_inclusion, self.template) {
            (false, _) => None,
            (true, None) => return Err(AppError::invalid("MISSING_FIELD", "template is required when content_inclusion_flag is 1")),
            (true, Some(t)) => {
                let t = t.into_template()?;
                if !t.has_any_dimension() {
                    return Err(AppError::invalid("INVALID_INPUT", "template must fill at least one of its dimensions"));
                }
                Some(t)
            }
        };
        Ok(CreateInput {
            request_id: self.request_id,
            dd,
            ee: self.ee.into_input(self.form)?,
            content_inclusion: self.content_inclusion,
            template,
            premium_source: self.premium_source,
            trace: self.trace,
        })
    }
}

impl ProposeRequest {
    /// The rules a proposal meets before anything is looked up: a bilateral
    /// DD, and the four EE axes (no preset).
    pub fn into_input(self, now: DateTime<Utc>) -> AppResult<CreateInput> {
        if self.ee.preset.is_some() {
            return Err(AppError::invalid("UNKNOWN_FIELD", "ee.ee_preset is not accepted on a bilateral proposal; send the four EE axes"));
        }
        Ok(CreateInput {
            request_id: self.request_id.unwrap_or_else(Uuid::new_v4),
            dd: self.dd.into_fields(now, dd::DeclarationMode::Bilateral, self.continuity_parent, self.form)?,
            ee: self.ee.into_input(self.form)?,
            content_inclusion: false,
            template: None,
            premium_source: None,
            trace: None,
        })
    }
}

impl DdRequest {
    /// The fields, if the declaration mode is the one the route records
    /// (DD create: self_declared, else `DECLARATION_MODE_NOT_ALLOWED`; a
    /// bilateral proposal: bilateral, else `DECLARATION_MODE_MISMATCH`), the
    /// decision is not dated after `now`, and the parent is named once; what
    /// `form` lets a client leave out takes its default.
    pub fn into_fields(
        self,
        now: DateTime<Utc>,
        expected: dd::DeclarationMode,
        continuity_parent: Option<Uuid>,
        form: Form,
    ) -> AppResult<DdFields> {
        fn given<T>(value: Option<T>, form: Form, default: T, name: &str) -> AppResult<T> {
            match (value, form) {
                (Some(value), _) => Ok(value),
                (None, Form::Flat) => Ok(default),
                (None, Form::Nested) => Err(AppError::invalid("MISSING_FIELD", format!("dd.{name} is required"))),
            }
        }
        let unit_type = given(self.unit_type, form, dd::UnitType::Single, "dd_unit_type")?;
        let mode = given(self.declaration_mode, form, expected, "dd_declaration_mode")?;
        let selection_state = given(self.selection_state, form, dd::SelectionState::Selected, "selection_state")?;
        if mode != expected {
            let code =
                if expected == dd::DeclarationMode::SelfDeclared { "DECLARATION_MODE_NOT_ALLOWED" } else { "DECLARATION_MODE_MISMATCH" };
            return Err(AppError::invalid(
                code,
                format!("this route records {expected} decisions only; got dd.dd_declaration_mode {mode}"),
            ));
        }
        if let Some(at) = self.decision_at
            && at > now
        {
            return Err(AppError::invalid(
                "DECISION_AT_IN_FUTURE",
                format!("dd.decision_at {} is later than the anchoring time {}", at.to_rfc3339(), now.to_rfc3339()),
            ));
        }
        if let Some(count) = self.excluded_option_count {
            dd::check_excluded_option_count(count)?;
        }
        let parent_dd_id = match (self.parent_dd_id, continuity_parent) {
            (Some(one), Some(other)) if one != other => {
                return Err(AppError::invalid(
                    "INVALID_VALUE",
                    "dd.parent_dd_id and continuity.parent_dd_id name different parents; send one",
                ));
            }
            (one, other) => one.or(other),
        };
        Ok(DdFields {
            unit_type,
            declaration_mode: mode,
            decision_type: self.decision_type,
            action_type: self.action_type,
            origin_context: self.origin_context,
            selection_state,
            selection_scope: self.selection_scope,
            decision_at: self.decision_at,
            parent_dd_id,
            excluded_option_count: self.excluded_option_count,
        })
    }
}

/// The largest direct-access quota an EE may ask for.
pub const ACCESS_QUOTA_MAX: i64 = 1_000_000;

impl EeRequest {
    /// The four axes unless a preset is named, the access period read, the
    /// quota in range, and the defaults: content scope owner, no
    /// delegation, self-direct access, the default period and quota. A flat
    /// request without a preset takes [`FLAT_AXES`] for the axes it leaves out.
    pub fn into_input(mut self, form: Form) -> AppResult<EeInput> {
        if self.preset.is_none() && form == Form::Flat {
            let (retention, integrity, disclosure, responsibility) = FLAT_AXES;
            self.retention = self.retention.or(Some(retention));
            self.integrity = self.integrity.or(Some(integrity));
            self.disclosure = self.disclosure.or(Some(disclosure));
            self.responsibility = self.responsibility.or(Some(responsibility));
        }
        if self.preset.is_none() {
            let axes = [
                ("ee_retention_period", self.retention.is_some()),
                ("ee_integrity_verification_level", self.integrity.is_some()),
                ("ee_disclosure_format_policy", self.disclosure.is_some()),
                ("ee_responsibility_scope", self.responsibility.is_some()),
            ];
            if let Some((axis, _)) = axes.iter().find(|(_, sent)| !sent) {
                return Err(AppError::invalid("MISSING_FIELD", format!("ee.{axis} is required unless ee.ee_preset is sent")));
            }
        }
        let period = match &self.direct_access_period {
            Some(text) => ee::AccessPeriod::parse(text)?,
            None => ee::DEFAULT_ACCESS_PERIOD,
        };
        let quota = match self.direct_access_quota {
            Some(q) if q < 0 => return Err(AppError::invalid("INVALID_VALUE", "ee.ee_direct_access_quota must be 0 or more")),
            Some(q) if q > ACCESS_QUOTA_MAX => {
                return Err(AppError::invalid("INVALID_VALUE", format!("ee.ee_direct_access_quota must be at most {ACCESS_QUOTA_MAX}")));
            }
            Some(q) => q,
            None => ee::DEFAULT_ACCESS_QUOTA,
        };
        Ok(EeInput {
            preset: self.preset,
            retention: self.retention,
            integrity: self.integrity,
            disclosure: self.disclosure,
            responsibility: self.responsibility,
            content_scope: self.content_scope.unwrap_or(ee::ContentScope::Owner),
            delegation: self.delegation.unwrap_or(ee::Delegation::None),
            period,
            quota,
            access_class: self.access_class.unwrap_or(ee::AccessClass::SelfDirect),
        })
    }
}

impl TemplateRequest {
    /// Each dimension checked as the domain bounds it.
    pub fn into_template(self) -> AppResult<Template> {
        if let Some(unit) = &self.decision_scale_unit {
            template::check_scale_unit(unit)?;
        }
        if let Some(value) = &self.decision_scale_value {
            template::check_scale_value(value)?;
        }
        if let Some(chain) = &self.call_chain {
            if chain.len() > template::CALL_CHAIN_MAX {
                return Err(AppError::invalid(
                    "INVALID_VALUE",
                    format!("template.call_chain holds at most {} entries; got {}", template::CALL_CHAIN_MAX, chain.len()),
                ));
            }
            for (index, token) in chain.iter().enumerate() {
                template::check_call_chain_entry(index, token)?;
            }
        }
        Ok(Template {
            decision_class: self.decision_class,
            decision_scale_value: self.decision_scale_value,
            decision_scale_unit: self.decision_scale_unit,
            target_class: self.target_class,
            call_chain: self.call_chain,
            self_classification: self.self_classification,
            decision_trigger: self.decision_trigger,
            human_involvement: self.human_involvement,
        })
    }
}
