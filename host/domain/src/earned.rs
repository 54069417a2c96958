//! Earned DAC: cost units an agent earns (from the tool market) and may spend
//! on what the interface lets it pay for, never on base fees, never moved to
//! another agent, never converted. Each credit is a lot that expires a fixed
//! number of days after it was earned; spending draws on the lots that expire
//! first.

use crate::declarations::wire_enum;

wire_enum!(
    /// A line of an agent's Earned ledger.
    EntryKind { Credit = "credit", Debit = "debit", Expiry = "expiry", Refund = "refund" }
);
