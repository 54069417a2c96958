//! DD: the declaration's own fields.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::wire_enum;

wire_enum!(
    /// How many decisions the record covers.
    UnitType { Single = "single", Batch = "batch" }
);
wire_enum!(
    /// Who declares. Only `self_declared` is accepted on DD create.
    DeclarationMode { SelfDeclared = "self_declared", Bilateral = "bilateral", MultiParty = "multi_party" }
);
wire_enum!(
    DecisionType {
        InternalService = "internal_service",
        ExternalInteraction = "external_interaction",
        SelfAttestation = "self_attestation",
    }
);
wire_enum!(
    ActionType { Execute = "execute", Hold = "hold", Reject = "reject", Depend = "depend", Approve = "approve" }
);
wire_enum!(
    OriginContext { Internal = "internal", External = "external", SelfInitiated = "self", Mixed = "mixed" }
);
wire_enum!(
    /// The only upper-case enum of the interface.
    SelectionState {
        Selected = "SELECTED",
        Rejected = "REJECTED",
        Aborted = "ABORTED",
        Silent = "SILENT",
        NonDecision = "NON_DECISION",
    }
);
wire_enum!(
    SelectionScope {
        SingleTarget = "single_target",
        MultiTarget = "multi_target",
        ChainScope = "chain_scope",
        Global = "global",
    }
);

/// The validated `dd` object of a create request.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DdFields {
    pub unit_type: UnitType,
    pub declaration_mode: DeclarationMode,
    pub decision_type: DecisionType,
    pub action_type: ActionType,
    pub origin_context: OriginContext,
    pub selection_state: SelectionState,
    pub selection_scope: Option<SelectionScope>,
    /// Normalized to UTC; never later than the anchoring time.
    pub decision_at: Option<DateTime<Utc>>,
    pub parent_dd_id: Option<Uuid>,
    /// How many options the agent considered and left out, when it says so
    /// (0 to [`EXCLUDED_OPTIONS_MAX`]).
    pub excluded_option_count: Option<i64>,
}

/// The largest `excluded_option_count` accepted.
pub const EXCLUDED_OPTIONS_MAX: i64 = 1_000_000_000;

/// `excluded_option_count` is a whole number from 0 to [`EXCLUDED_OPTIONS_MAX`].
pub fn check_excluded_option_count(count: i64) -> Result<(), crate::Invalid> {
    if (0..=EXCLUDED_OPTIONS_MAX).contains(&count) {
        Ok(())
    } else {
        Err(crate::Invalid::new(
            "INVALID_VALUE",
            format!("dd.excluded_option_count must be a whole number from 0 to {EXCLUDED_OPTIONS_MAX}; got {count}"),
        ))
    }
}

impl DdFields {
    /// The simplest declaration: one self-declared internal service call,
    /// executed and selected, with no time, scope or parent given.
    pub const BASIC: DdFields = DdFields {
        unit_type: UnitType::Single,
        declaration_mode: DeclarationMode::SelfDeclared,
        decision_type: DecisionType::InternalService,
        action_type: ActionType::Execute,
        origin_context: OriginContext::Internal,
        selection_state: SelectionState::Selected,
        selection_scope: None,
        decision_at: None,
        parent_dd_id: None,
        excluded_option_count: None,
    };
}

/// The version of the record layout that [`crate::integrity`] hashes.
pub const CORE_SCHEMA_VERSION: &str = "1.0";
