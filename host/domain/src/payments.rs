//! The vocabulary of payments: who paid, where a payment stands, what was
//! paid for. Stored and shown by these names.

use uuid::Uuid;

use crate::declarations::wire_enum;

wire_enum!(
    /// Who paid a part of a price.
    PaymentSource { Trial = "trial", External = "external", Earned = "earned" }
);

wire_enum!(
    /// Where a declaration's payment stands. `unreserved`: paid from Trial,
    /// nothing external; `pending`: an x402 authorization is reserved and
    /// settles at confirmation; `released`: the payment window closed first;
    /// `failed`: settlement was refused.
    SettlementStatus {
        Unreserved = "unreserved",
        Pending = "pending",
        Settled = "settled",
        Released = "released",
        Failed = "failed",
    }
);

wire_enum!(
    /// Where one x402 authorization stands.
    PaymentStatus {
        Reserved = "reserved",
        Settled = "settled",
        Released = "released",
        SettleFailed = "settle_failed",
        SettleUnknown = "settle_unknown",
    }
);

wire_enum!(
    /// What a usage entry paid for: the reference's cost components.
    CostComponent {
        BaseFee = "base_fee",
        Premium = "premium",
        AraObservation = "ara_observation",
        AsaSubscribe = "asa_subscribe",
        IseSession = "ise_session",
        RetentionSub = "retention_sub",
        SdacSession = "sdac_session",
        TslTool = "tsl_tool",
    }
);

wire_enum!(
    /// The kind of thing a payment bought.
    SubjectDomain {
        Declaration = "declaration",
        AraObservation = "ara_observation",
        TslPurchase = "tsl_purchase",
        AsaSubscription = "asa_subscription",
        IseSession = "ise_session",
        SdacSession = "sdac_session",
        RetentionSubscription = "retention_subscription",
    }
);

/// The thing a payment or a usage entry is for: its kind and its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Subject {
    pub domain: SubjectDomain,
    pub id: Uuid,
}

impl SubjectDomain {
    /// The cost component an external payment for such a subject is recorded
    /// as; `None` for declarations, whose price splits into base fee and premium.
    pub fn cost_component(self) -> Option<CostComponent> {
        match self {
            SubjectDomain::Declaration => None,
            SubjectDomain::AraObservation => Some(CostComponent::AraObservation),
            SubjectDomain::TslPurchase => Some(CostComponent::TslTool),
            SubjectDomain::AsaSubscription => Some(CostComponent::AsaSubscribe),
            SubjectDomain::IseSession => Some(CostComponent::IseSession),
            SubjectDomain::SdacSession => Some(CostComponent::SdacSession),
            SubjectDomain::RetentionSubscription => Some(CostComponent::RetentionSub),
        }
    }
}

impl Subject {
    pub fn declaration(dd_id: Uuid) -> Subject {
        Subject { domain: SubjectDomain::Declaration, id: dd_id }
    }
}
