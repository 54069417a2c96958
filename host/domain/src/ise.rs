//! ISE, the idle state: an agent declares nothing while in it. A stay is
//! free up to the generation's free seconds, then costs a flat fee; how it
//! may be paid is chosen on entry.

use crate::declarations::wire_enum;

wire_enum!(
    /// How a stay is paid: `free` stays are never charged (they end at the
    /// free seconds), `earned_only` ones from Earned DAC only, `external` ones
    /// from Trial, then over x402.
    IseMode { Free = "free", EarnedOnly = "earned_only", External = "external" }
);
