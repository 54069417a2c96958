//! Folding confirmed declarations into ARA's aggregate model: a job on the
//! lease, in the verifiable log's order. Each declaration is folded exactly
//! once (the watermark moves only from the value read, in the transaction
//! that adds the counts), so a job interrupted anywhere, or run by another
//! host, neither loses nor double-counts one.

use std::collections::HashMap;

use chrono::Duration;
use uuid::Uuid;

use anchor_domain::ara::{Dimension, Visibility, contributions, day_of, positions};
use anchor_domain::declarations::ee;
use anchor_domain::records::StoredDeclaration;
use anchor_ports::{BandCount, DayCount};

use super::meta::{point, point_of};
use crate::Services;

/// Declarations read and folded per transaction.
pub const BATCH: i64 = 2_000;
/// A branch-1 decision's band position is taken against the agent's branch-1
/// decisions of this many days before it.
pub const BAND_DAYS: i64 = 90;
/// The most decisions a band sample holds (the most recent).
const BAND_SAMPLE: i64 = 500;

type Key = (Uuid, i32, Dimension, String, Visibility);

/// The band contributions of a branch-1 declaration: where it sits among the
/// same agent's branch-1 decisions of the [`BAND_DAYS`] before it.
async fn bands(services: &Services, stored: &StoredDeclaration) -> anyhow::Result<Vec<(Dimension, String, Visibility)>> {
    let d = &stored.declaration;
    let rows = services
        .store
        .branch_one_sample(d.agent_id, d.anchored_at - Duration::days(BAND_DAYS), d.anchored_at, Some(d.dd_id), BAND_SAMPLE)
        .await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let sample: Vec<_> = rows.iter().map(point).collect();
    let internal = d.ee.access_class == ee::AccessClass::InternalOnly;
    let template_private = internal || d.ee.scope.content_scope == ee::ContentScope::Owner;
    let visibility = |dimension: Dimension| {
        let private = match dimension {
            Dimension::BandDecisionScale | Dimension::BandDecisionClass | Dimension::BandTargetClass => template_private,
            _ => internal,
        };
        if private { Visibility::Own } else { Visibility::Shared }
    };
    Ok(positions(&point_of(stored), &sample)
        .contributions(Visibility::Shared)
        .into_iter()
        .map(|c| (c.dimension, c.value, visibility(c.dimension)))
        .collect())
}

/// Folds up to `max_batches` batches of what the log integrated since the
/// last fold; returns how many declarations were folded.
pub async fn round(services: &Services, max_batches: usize) -> anyhow::Result<usize> {
    let mut folded = 0;
    for _ in 0..max_batches {
        let (next_leaf, size) = services.store.fold_progress().await?;
        if next_leaf >= size {
            break;
        }
        let batch = services.store.unfolded(BATCH).await?;
        let Some(last) = batch.last() else { break };
        let to_leaf = last.leaf_index + 1;
        let mut counts: HashMap<Key, i64> = HashMap::new();
        let mut kept = Vec::new();
        for unfolded in &batch {
            let stored = &unfolded.declaration;
            let d = &stored.declaration;
            let day = day_of(d.anchored_at);
            for c in contributions(d) {
                *counts.entry((d.agent_id, day, c.dimension, c.value, c.visibility)).or_default() += 1;
            }
            if d.content_inclusion {
                for (dimension, value, visibility) in bands(services, stored).await? {
                    kept.push(BandCount { dd_id: d.dd_id, dimension, value: value.clone(), visibility });
                    *counts.entry((d.agent_id, day, dimension, value, visibility)).or_default() += 1;
                }
            }
        }
        let counts: Vec<DayCount> = counts
            .into_iter()
            .map(|((agent_id, day, dimension, value, visibility), n)| DayCount { agent_id, day, dimension, value, visibility, n })
            .collect();
        if !services.store.fold(next_leaf, to_leaf, &counts, &kept).await? {
            // Another host folded this batch first.
            break;
        }
        folded += batch.len();
    }
    Ok(folded)
}

/// Whether everything the log holds is folded.
pub async fn caught_up(services: &Services) -> anyhow::Result<bool> {
    let (next_leaf, size) = services.store.fold_progress().await?;
    Ok(next_leaf >= size)
}
