//! Bindings for `anchor:pricing@1.0.0` and their conversion to domain types.

use anchor_domain::MilliDac;
use anchor_domain::declarations::ee;
use anchor_domain::pricing::{AxisCharge, AxisPrice, Policy, Preset, Quote};

pub mod bindings {
    wasmtime::component::bindgen!({
        world: "pricing",
        path: "../../wit/pricing@1.0.0",
    });
}

use bindings::anchor::pricing::types as wit;

fn milli(value: u64) -> MilliDac {
    MilliDac(i64::try_from(value).unwrap_or(i64::MAX))
}

pub fn envelope(s: ee::Scope) -> wit::Envelope {
    wit::Envelope {
        retention: match s.retention {
            ee::Retention::Short => wit::Retention::Short,
            ee::Retention::Medium => wit::Retention::Medium,
            ee::Retention::Long => wit::Retention::Long,
            ee::Retention::ExtremeLong => wit::Retention::ExtremeLong,
            ee::Retention::Indefinite => wit::Retention::Indefinite,
        },
        integrity: match s.integrity {
            ee::Integrity::Basic => wit::Integrity::Basic,
            ee::Integrity::Enhanced => wit::Integrity::Enhanced,
            ee::Integrity::Certifiable => wit::Integrity::Certifiable,
        },
        disclosure: match s.disclosure {
            ee::Disclosure::Internal => wit::DisclosureFormat::Internal,
            ee::Disclosure::Shareable => wit::DisclosureFormat::Shareable,
            ee::Disclosure::Exportable => wit::DisclosureFormat::Exportable,
        },
        responsibility: match s.responsibility {
            ee::Responsibility::Minimal => wit::Responsibility::Minimal,
            ee::Responsibility::Standard => wit::Responsibility::Standard,
            ee::Responsibility::Extended => wit::Responsibility::Extended,
        },
        content_scope: match s.content_scope {
            ee::ContentScope::Owner => wit::ContentScope::Owner,
            ee::ContentScope::External => wit::ContentScope::External,
            ee::ContentScope::Public => wit::ContentScope::Public,
        },
        delegation: match s.delegation {
            ee::Delegation::None => wit::Delegation::None,
            ee::Delegation::Partial => wit::Delegation::Partial,
            ee::Delegation::Full => wit::Delegation::Full,
        },
    }
}

pub fn quote(q: wit::Quote) -> Quote {
    Quote {
        base_fee: milli(q.base_fee_milli),
        charges: q.charges.into_iter().map(|c| AxisCharge { axis: c.axis, value: c.value, add: milli(c.add_milli) }).collect(),
        subtotal: milli(q.subtotal_milli),
        multiplier_permille: q.multiplier_permille,
        total: milli(q.total_milli),
        monthly: milli(q.monthly_milli),
    }
}

pub fn preset(p: wit::Preset) -> Preset {
    let e = p.envelope;
    Preset {
        name: p.name,
        label: p.label,
        enabled: p.enabled,
        retention: match e.retention {
            wit::Retention::Short => ee::Retention::Short,
            wit::Retention::Medium => ee::Retention::Medium,
            wit::Retention::Long => ee::Retention::Long,
            wit::Retention::ExtremeLong => ee::Retention::ExtremeLong,
            wit::Retention::Indefinite => ee::Retention::Indefinite,
        },
        integrity: match e.integrity {
            wit::Integrity::Basic => ee::Integrity::Basic,
            wit::Integrity::Enhanced => ee::Integrity::Enhanced,
            wit::Integrity::Certifiable => ee::Integrity::Certifiable,
        },
        disclosure: match e.disclosure {
            wit::DisclosureFormat::Internal => ee::Disclosure::Internal,
            wit::DisclosureFormat::Shareable => ee::Disclosure::Shareable,
            wit::DisclosureFormat::Exportable => ee::Disclosure::Exportable,
        },
        responsibility: match e.responsibility {
            wit::Responsibility::Minimal => ee::Responsibility::Minimal,
            wit::Responsibility::Standard => ee::Responsibility::Standard,
            wit::Responsibility::Extended => ee::Responsibility::Extended,
        },
    }
}

pub fn policy(p: wit::Policy) -> Policy {
    Policy {
        version: p.version,
        effective_from: p.effective_from,
        base_fee: milli(p.base_fee_milli),
        axes: p
            .axes
            .into_iter()
            .map(|a| AxisPrice {
                axis: a.axis,
                value: a.value,
                add: milli(a.add_milli),
                monthly: milli(a.monthly_milli),
                available: a.available,
                note: a.note,
            })
            .collect(),
        multiplier_conditions: p.multiplier_conditions.into_iter().map(|c| (c.axis, c.value)).collect(),
        multiplier_min_matches: p.multiplier_min_matches,
        multiplier_permille: p.multiplier_permille,
    }
}
