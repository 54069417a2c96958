//! Pricing generation v1.3.0: the table in `anchor_pricing_core::V1_3_0`, unchanged.

use anchor_pricing_core::{Table, V1_3_0, export_generation, guest::Generation};

struct V130;

impl Generation for V130 {
    const TABLE: Table = V1_3_0;
}

export_generation!(V130);
