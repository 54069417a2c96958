//! Pricing generation v1.3.0: the table in `anchor_pricing_core::V1_3_0` and
//! its service prices (`V1_3_0_SERVICES`), as an `anchor:pricing@1.1.0`
//! component.

#![no_std]

use anchor_pricing_core::guest::{Generation, ServiceGeneration};
use anchor_pricing_core::{Services, Table, V1_3_0, V1_3_0_SERVICES, export_service_generation};

struct V130;

impl Generation for V130 {
    const TABLE: Table = V1_3_0;
}

impl ServiceGeneration for V130 {
    const SERVICES: Services = V1_3_0_SERVICES;
}

export_service_generation!(V130);
anchor_pricing_core::bare_runtime!();
