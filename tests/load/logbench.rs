//! Integration throughput of the log: how many pending leaves per second the
//! integrator turns into tree entries (indices, stored hashes, new head), on
//! SQLite and PostgreSQL, measured on the `Store` directly.
//!
//!     logbench [LEAVES]
//!
//! PostgreSQL is measured when ANCHOR_TEST_POSTGRES_URL is set (a schema of
//! its own, dropped afterwards). Bounded: it integrates exactly LEAVES leaves.

use std::time::Instant;

use anchor_domain::MilliDac;
use anchor_domain::declarations::Declaration;
use anchor_domain::declarations::dd::*;
use anchor_domain::declarations::ee::*;
use anchor_ports::*;
use anchor_tests::{Backend, fresh_store, postgres_url};
use chrono::{Duration, Utc};
use uuid::Uuid;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let leaves: usize = std::env::args().nth(1).map(|n| n.parse().expect("LEAVES is a number")).unwrap_or(20_000);
    let mut backends = vec![Backend::Sqlite];
    if postgres_url().is_some() {
        backends.push(Backend::Postgres);
    }
    for backend in backends {
        let (store, _cleanup) = fresh_store(backend).await;
        let now = Utc::now();
        let agent = NewAgent {
            agent_id: Uuid::new_v4(),
            token_hash: [1; 32],
            recovery_hash: [2; 32],
            region_code: None,
            registered_at: now,
            trial_granted: MilliDac(i64::MAX / 4),
            trial_expires_at: now + Duration::days(30),
        };
        store.insert_agent(&agent).await?;
        for _ in 0..leaves {
            let declaration = declaration(agent.agent_id, now);
            let dd_id = declaration.declaration.dd_id;
            store.create_declaration(&declaration, now).await?;
            let hash = anchor_domain::integrity::integrity_hash(&declaration.declaration);
            let leaf = anchor_verify::leaf_data(&hash, &now.to_rfc3339());
            store.confirm_declaration(dd_id, &hash, now, &[], &leaf, None).await?;
        }
        let started = Instant::now();
        let mut integrated = 0;
        while let Some(state) = store.integrate_log(1000, now, &anchor_app::log::plan).await? {
            integrated = state.size;
        }
        let elapsed = started.elapsed();
        println!(
            "{:<9} integrated {integrated} leaves in {:.3} s: {:.0} leaves/s (batches of 1000)",
            store.backend(),
            elapsed.as_secs_f64(),
            integrated as f64 / elapsed.as_secs_f64()
        );
    }
    Ok(())
}

fn declaration(agent_id: Uuid, now: chrono::DateTime<Utc>) -> NewDeclaration {
    let dd_id = Uuid::new_v4();
    NewDeclaration {
        declaration: Declaration {
            dd_id,
            ee_id: Uuid::new_v4(),
            agent_id,
            dd: DdFields::BASIC,
            ee: EeFields::basic(),
            content_inclusion: false,
            template: None,
            anchored_at: now,
            lineage_group_id: dd_id,
            pricing_version: "v1.3.0".into(),
            pricing_sha256: "00".repeat(32),
            dac_amount: MilliDac(10_000),
            salt: [5; 32],
            trace_key: None,
        },
        request_id: Uuid::new_v4(),
        subtotal: MilliDac(10_000),
        base_fee: MilliDac(10_000),
        multiplier_permille: 1000,
        monthly: MilliDac::ZERO,
        direct_access_expires_at: now + Duration::days(30),
        external: None,
        base_from_trial: false,
        earned_premium: None,
        agreement: None,
        token_check: None,
    }
}
