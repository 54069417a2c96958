//! The component glue: WIT bindings and the conversion to and from [`crate::Table`].
//!
//! A guest crate writes one line, `export_generation!(MyGeneration);`, where
//! `MyGeneration` implements [`Generation`]. Fixtures override `quote` to misbehave.

use alloc::string::ToString;

use crate::{ContentScope, Delegation, Disclosure, Integrity, Responsibility, Retention, Scope, Table};

pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/pricing@1.0.0",
        world: "pricing",
        pub_export_macro: true,
        export_macro_name: "export_pricing",
        default_bindings_module: "anchor_pricing_core::guest::bindings",
    });
}

/// The `anchor:pricing@1.1.0` world: the same exports and shared 1.0.0
/// types, plus `services`.
#[cfg(feature = "services")]
pub mod bindings_v1_1 {
    wit_bindgen::generate!({
        path: ["../../wit/pricing@1.0.0", "../../wit/pricing@1.1.0"],
        world: "anchor:pricing/generation@1.1.0",
        with: {
            "anchor:pricing/types@1.0.0": anchor_pricing_core::guest::bindings::anchor::pricing::types,
        },
        pub_export_macro: true,
        export_macro_name: "export_pricing_v1_1",
        default_bindings_module: "anchor_pricing_core::guest::bindings_v1_1",
    });
}

use bindings::anchor::pricing::types as wit;
#[cfg(feature = "services")]
use bindings_v1_1::anchor::pricing1_1_0::services as wit_services;

/// A pricing generation: a table, and optionally a different quote function.
pub trait Generation {
    const TABLE: Table;

    fn quote(scope: Scope) -> Result<crate::Quote, String> {
        Self::TABLE.quote(&scope)
    }
}

/// The exports every world of `anchor:pricing` has, for a [`Generation`].
#[doc(hidden)]
#[macro_export]
macro_rules! generation_exports {
    ($ty:ident) => {
        fn generation() -> $crate::guest::String {
            $crate::guest::generation::<$ty>()
        }
        fn quote(
            scope: $crate::guest::bindings::Envelope,
        ) -> ::core::result::Result<$crate::guest::bindings::Quote, $crate::guest::String> {
            $crate::guest::quote::<$ty>(scope)
        }
        fn presets() -> $crate::guest::Vec<$crate::guest::bindings::Preset> {
            $crate::guest::presets::<$ty>()
        }
        fn describe() -> $crate::guest::bindings::Policy {
            $crate::guest::describe::<$ty>()
        }
    };
}

/// Implements the WIT exports for a [`Generation`].
#[macro_export]
macro_rules! export_generation {
    ($ty:ident) => {
        impl $crate::guest::bindings::Guest for $ty {
            $crate::generation_exports!($ty);
        }
        $crate::guest::bindings::export_pricing!($ty);
    };
}

/// A generation that also prices the service's other paid work
/// (`anchor:pricing@1.1.0`).
#[cfg(feature = "services")]
pub trait ServiceGeneration: Generation {
    const SERVICES: crate::Services;
}

/// Implements the `anchor:pricing@1.1.0` exports for a [`ServiceGeneration`].
#[cfg(feature = "services")]
#[macro_export]
macro_rules! export_service_generation {
    ($ty:ident) => {
        impl $crate::guest::bindings_v1_1::Guest for $ty {
            $crate::generation_exports!($ty);
            fn services() -> $crate::guest::bindings_v1_1::ServicePrices {
                $crate::guest::services::<$ty>()
            }
        }
        $crate::guest::bindings_v1_1::export_pricing_v1_1!($ty);
    };
}

#[doc(hidden)]
pub use alloc::{string::String, vec::Vec};

#[cfg(feature = "services")]
pub fn services<G: ServiceGeneration>() -> wit_services::ServicePrices {
    use crate::ObservationTier as T;
    use wit_services::ObservationTier as W;
    let s = G::SERVICES;
    wit_services::ServicePrices {
        observations: s
            .observations
            .iter()
            .map(|o| wit_services::ObservationPrice {
                tier: match o.tier {
                    T::Environment => W::Environment,
                    T::Pattern => W::Pattern,
                    T::PatternCompare => W::PatternCompare,
                    T::AgentOther => W::AgentOther,
                    T::AgentSelf => W::AgentSelf,
                    T::AnomalyCompare => W::AnomalyCompare,
                    T::EvidenceReport => W::EvidenceReport,
                    T::EnvironmentAnomaly => W::EnvironmentAnomaly,
                },
                resolution: o.resolution,
                base_milli: o.base,
                surcharge_milli: o.surcharge,
            })
            .collect(),
        ise_fee_milli: s.ise_fee,
        ise_free_seconds: s.ise_free_seconds,
        ise_max_minutes: s.ise_max_minutes,
        sdac_base_fee_milli: s.sdac_base_fee,
        sdac_ratio_permille: s.sdac_ratio_permille,
        asa_period_milli: s.asa_period,
        asa_period_days: s.asa_period_days,
        asa_grace_days: s.asa_grace_days,
        asa_max_periods: s.asa_max_periods,
        retention_monthly_milli: s.retention_monthly,
        retention_grace_days: s.retention_grace_days,
        earned_threshold_milli: s.earned_threshold,
        earned_expiry_days: s.earned_expiry_days,
        tsl_base_fee_milli: s.tsl_base_fee,
    }
}

pub fn generation<G: Generation>() -> String {
    G::TABLE.version.to_string()
}

pub fn quote<G: Generation>(scope: wit::Envelope) -> Result<wit::Quote, String> {
    let q = G::quote(from_envelope(scope))?;
    Ok(wit::Quote {
        base_fee_milli: q.base_fee,
        charges: q
            .charges
            .into_iter()
            .map(|(axis, value, add)| wit::AxisCharge { axis: axis.to_string(), value: value.to_string(), add_milli: add })
            .collect(),
        subtotal_milli: q.subtotal,
        multiplier_permille: q.multiplier_permille,
        total_milli: q.total,
        monthly_milli: q.monthly,
    })
}

pub fn presets<G: Generation>() -> Vec<wit::Preset> {
    G::TABLE
        .presets
        .iter()
        .map(|p| wit::Preset {
            name: p.name.to_string(),
            label: p.label.to_string(),
            enabled: p.enabled,
            envelope: to_envelope(Scope {
                retention: p.retention,
                integrity: p.integrity,
                disclosure: p.disclosure,
                responsibility: p.responsibility,
                content_scope: ContentScope::Owner,
                delegation: Delegation::None,
            }),
        })
        .collect()
}

pub fn describe<G: Generation>() -> wit::Policy {
    let t = G::TABLE;
    let mut axes = Vec::new();
    let groups: [(&str, &[crate::AxisPrice]); 6] = [
        ("ee_retention_period", &t.retention),
        ("ee_integrity_verification_level", &t.integrity),
        ("ee_disclosure_format_policy", &t.disclosure),
        ("ee_responsibility_scope", &t.responsibility),
        ("content_disclosure_scope", &t.content_scope),
        ("delegation_state", &t.delegation),
    ];
    for (axis, prices) in groups {
        for p in prices {
            axes.push(wit::AxisPrice {
                axis: axis.to_string(),
                value: p.value.to_string(),
                add_milli: p.add,
                monthly_milli: p.monthly,
                available: p.available,
                note: p.note.map(|n| n.to_string()),
            });
        }
    }
    wit::Policy {
        version: t.version.to_string(),
        effective_from: t.effective_from.to_string(),
        base_fee_milli: t.base_fee,
        axes,
        multiplier_conditions: crate::MULTIPLIER_CONDITIONS
            .iter()
            .map(|(axis, value)| wit::MultiplierCondition { axis: axis.to_string(), value: value.to_string() })
            .collect(),
        multiplier_min_matches: t.multiplier_min_matches,
        multiplier_permille: t.multiplier_permille,
    }
}

fn from_envelope(e: wit::Envelope) -> Scope {
    Scope {
        retention: match e.retention {
            wit::Retention::Short => Retention::Short,
            wit::Retention::Medium => Retention::Medium,
            wit::Retention::Long => Retention::Long,
            wit::Retention::ExtremeLong => Retention::ExtremeLong,
            wit::Retention::Indefinite => Retention::Indefinite,
        },
        integrity: match e.integrity {
            wit::Integrity::Basic => Integrity::Basic,
            wit::Integrity::Enhanced => Integrity::Enhanced,
            wit::Integrity::Certifiable => Integrity::Certifiable,
        },
        disclosure: match e.disclosure {
            wit::DisclosureFormat::Internal => Disclosure::Internal,
            wit::DisclosureFormat::Shareable => Disclosure::Shareable,
            wit::DisclosureFormat::Exportable => Disclosure::Exportable,
        },
        responsibility: match e.responsibility {
            wit::Responsibility::Minimal => Responsibility::Minimal,
            wit::Responsibility::Standard => Responsibility::Standard,
            wit::Responsibility::Extended => Responsibility::Extended,
        },
        content_scope: match e.content_scope {
            wit::ContentScope::Owner => ContentScope::Owner,
            wit::ContentScope::External => ContentScope::External,
            wit::ContentScope::Public => ContentScope::Public,
        },
        delegation: match e.delegation {
            wit::Delegation::None => Delegation::None,
            wit::Delegation::Partial => Delegation::Partial,
            wit::Delegation::Full => Delegation::Full,
        },
    }
}

fn to_envelope(s: Scope) -> wit::Envelope {
    wit::Envelope {
        retention: match s.retention {
            Retention::Short => wit::Retention::Short,
            Retention::Medium => wit::Retention::Medium,
            Retention::Long => wit::Retention::Long,
            Retention::ExtremeLong => wit::Retention::ExtremeLong,
            Retention::Indefinite => wit::Retention::Indefinite,
        },
        integrity: match s.integrity {
            Integrity::Basic => wit::Integrity::Basic,
            Integrity::Enhanced => wit::Integrity::Enhanced,
            Integrity::Certifiable => wit::Integrity::Certifiable,
        },
        disclosure: match s.disclosure {
            Disclosure::Internal => wit::DisclosureFormat::Internal,
            Disclosure::Shareable => wit::DisclosureFormat::Shareable,
            Disclosure::Exportable => wit::DisclosureFormat::Exportable,
        },
        responsibility: match s.responsibility {
            Responsibility::Minimal => wit::Responsibility::Minimal,
            Responsibility::Standard => wit::Responsibility::Standard,
            Responsibility::Extended => wit::Responsibility::Extended,
        },
        content_scope: match s.content_scope {
            ContentScope::Owner => wit::ContentScope::Owner,
            ContentScope::External => wit::ContentScope::External,
            ContentScope::Public => wit::ContentScope::Public,
        },
        delegation: match s.delegation {
            Delegation::None => wit::Delegation::None,
            Delegation::Partial => wit::Delegation::Partial,
            Delegation::Full => wit::Delegation::Full,
        },
    }
}

/// What a generation built without the standard library (`#![no_std]`)
/// needs: an allocator and a panic handler. Without `std` a component
/// imports nothing at all (no WASI interfaces bound to traps), is a single
/// core module with a small memory, and so costs little to instantiate,
/// which the host does for every call. Write `anchor_pricing_core::bare_runtime!();`
/// once in the generation's crate.
#[macro_export]
macro_rules! bare_runtime {
    () => {
        #[global_allocator]
        static ALLOCATOR: $crate::guest::Bump = $crate::guest::Bump;

        #[panic_handler]
        fn panic(_: &::core::panic::PanicInfo) -> ! {
            ::core::arch::wasm32::unreachable()
        }
    };
}

/// A bump allocator. An instance of a pricing component lives for one call
/// (the host makes a fresh one each time), so its memory is dropped with it;
/// the allocator only counts the blocks alive, and when none is (between
/// calls of an instance kept warm, as the benchmarks do) it starts over at
/// the arena's beginning. It hands out a static arena first (part of the
/// instance's initial memory: no growth, no host call), then memory grown
/// for it.
#[cfg(target_arch = "wasm32")]
pub struct Bump;

#[cfg(target_arch = "wasm32")]
const ARENA_BYTES: usize = 32 * 1024;

#[cfg(target_arch = "wasm32")]
#[repr(C, align(16))]
struct Arena(core::cell::UnsafeCell<[u8; ARENA_BYTES]>);

// SAFETY: a component instance runs on one thread; the arena's bytes are
// only reached through blocks `Bump` hands out, which never overlap.
#[cfg(target_arch = "wasm32")]
unsafe impl Sync for Arena {}

#[cfg(target_arch = "wasm32")]
static ARENA: Arena = Arena(core::cell::UnsafeCell::new([0; ARENA_BYTES]));

/// Blocks handed out and not freed yet.
#[cfg(target_arch = "wasm32")]
static LIVE: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// The next free byte and the end of the current region (0: not started).
#[cfg(target_arch = "wasm32")]
static NEXT: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
#[cfg(target_arch = "wasm32")]
static END: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

#[cfg(target_arch = "wasm32")]
const PAGE: usize = 65_536;

// SAFETY: `alloc` returns a block of at least `layout.size()` bytes aligned
// to `layout.align()` that no other block overlaps (the bump pointer only
// moves forward, over the arena and then over memory grown for it), or null
// when memory cannot grow. A block is reused only once every block was
// freed (`LIVE` back to 0), when no block can overlap it any more.
#[cfg(target_arch = "wasm32")]
unsafe impl core::alloc::GlobalAlloc for Bump {
    unsafe fn alloc(&self, layout: core::alloc::Layout) -> *mut u8 {
        use core::sync::atomic::Ordering::Relaxed;
        let (size, align) = (layout.size(), layout.align());
        let (mut next, mut end) = (NEXT.load(Relaxed), END.load(Relaxed));
        if next == 0 {
            next = ARENA.0.get() as usize;
            end = next + ARENA_BYTES;
        }
        let mut start = next.wrapping_add(align - 1) & !(align - 1);
        if start.checked_add(size).is_none_or(|last| last > end) {
            let pages = size.saturating_add(align).div_ceil(PAGE).max(1);
            let previous = core::arch::wasm32::memory_grow(0, pages);
            if previous == usize::MAX {
                return core::ptr::null_mut();
            }
            end = (previous + pages) * PAGE;
            start = (previous * PAGE).wrapping_add(align - 1) & !(align - 1);
        }
        NEXT.store(start + size, Relaxed);
        END.store(end, Relaxed);
        LIVE.fetch_add(1, Relaxed);
        start as *mut u8
    }

    unsafe fn dealloc(&self, _block: *mut u8, _layout: core::alloc::Layout) {
        use core::sync::atomic::Ordering::Relaxed;
        if LIVE.fetch_sub(1, Relaxed) == 1 {
            // Nothing is alive: start over (memory grown beyond the arena
            // is left behind; a quote never needs any).
            NEXT.store(0, Relaxed);
        }
    }
}
