//! De-identification of cross-agent statistics: k-anonymity, then
//! differential privacy with OpenDP's discrete Laplace mechanisms.
//!
//! A release is a set of histograms and counts over one fixed window. In every
//! histogram each agent counts once, in one partition (the value it declared
//! most in the window), so one agent changes one partition by one: the L0, L1
//! and L∞ sensitivities are all 1. Then:
//!
//! 1. pre-thresholding: a partition with fewer than [`K`] distinct agents is
//!    dropped, exactly (k-anonymity);
//! 2. partition selection: discrete Laplace noise of scale 1/ε is added to
//!    each remaining count and only partitions whose noisy count reaches the
//!    noisy threshold τ are released (`make_laplace_threshold`); τ is chosen so
//!    that a partition one agent alone could make appear does so with
//!    probability at most δ;
//! 3. scalar counts (agents in the window, declarations in it with each agent
//!    counted at most [`DECLARATION_CAP`] times) get discrete Laplace noise of
//!    scale sensitivity/ε (`make_laplace`).
//!
//! Each histogram and each scalar spends (ε, δ) of its own; a release spends
//! their sum, and says so. Releases are computed once per window and stored,
//! so asking again spends nothing and averages nothing away.

use std::collections::HashMap;

use opendp::domains::{AtomDomain, MapDomain};
use opendp::measurements::{make_laplace, make_laplace_threshold};
use opendp::measures::{Approximate, MaxDivergence};
use opendp::metrics::{AbsoluteDistance, L0PInfDistance};

/// The least number of distinct agents any released figure stands for.
pub const K: i64 = 10;
/// At most this many declarations of one agent count in a window's total.
pub const DECLARATION_CAP: i64 = 100;

/// How releases are protected.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Privacy {
    /// Differential privacy: each histogram and each count spends `epsilon`,
    /// and a partition selection fails with probability at most `delta`.
    Noisy { epsilon: f64, delta: f64 },
    /// k-anonymity alone, exact counts (for tests of the release rules; the
    /// binary always runs `Noisy`).
    Exact,
}

impl Default for Privacy {
    fn default() -> Privacy {
        Privacy::Noisy { epsilon: 1.0, delta: 1e-6 }
    }
}

impl Privacy {
    /// (ε, δ) one histogram or count spends; an exact release spends no
    /// budget because it gives no differential-privacy guarantee at all.
    pub fn per_component(self) -> (f64, f64) {
        match self {
            Privacy::Noisy { epsilon, delta } => (epsilon, delta),
            Privacy::Exact => (0.0, 0.0),
        }
    }
}

fn dp(error: opendp::error::Error) -> anyhow::Error {
    anyhow::anyhow!("differential privacy: {error:?}")
}

/// The noisy threshold for noise of `scale`: a partition of one agent passes
/// it with probability at most `delta`.
pub fn threshold(scale: f64, delta: f64) -> i64 {
    ((1.0 / (2.0 * delta)).ln() * scale + 1.0).ceil() as i64
}

/// Releases a histogram in which each agent counts once: the partitions kept
/// and their (noisy) counts, sorted by partition.
pub fn histogram(counts: &[(String, i64)], privacy: Privacy) -> anyhow::Result<Vec<(String, i64)>> {
    let kept: HashMap<String, i64> = counts.iter().filter(|(_, n)| *n >= K).cloned().collect();
    let released = match privacy {
        Privacy::Exact => kept,
        Privacy::Noisy { epsilon, delta } => {
            let scale = 1.0 / epsilon;
            let measurement = make_laplace_threshold::<_, _, Approximate<MaxDivergence>>(
                MapDomain::new(AtomDomain::<String>::default(), AtomDomain::<i64>::default()),
                L0PInfDistance::<1, _>(AbsoluteDistance::<i64>::default()),
                scale,
                threshold(scale, delta),
                None,
            )
            .map_err(dp)?;
            measurement.invoke(&kept).map_err(dp)?
        }
    };
    let mut out: Vec<(String, i64)> = released.into_iter().collect();
    out.sort();
    Ok(out)
}

/// Releases a count that one agent changes by at most `sensitivity`.
pub fn count(value: i64, sensitivity: i64, privacy: Privacy) -> anyhow::Result<i64> {
    match privacy {
        Privacy::Exact => Ok(value),
        Privacy::Noisy { epsilon, .. } => {
            let measurement = make_laplace::<_, _, MaxDivergence>(
                AtomDomain::<i64>::default(),
                AbsoluteDistance::<i64>::default(),
                sensitivity as f64 / epsilon,
                None,
            )
            .map_err(dp)?;
            Ok(measurement.invoke(&value).map_err(dp)?.max(0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram_of(n: i64) -> Vec<(String, i64)> {
        vec![("big".into(), n), ("nine".into(), 9)]
    }

    #[test]
    fn groups_under_k_agents_are_never_released() {
        for privacy in [Privacy::Exact, Privacy::default()] {
            for _ in 0..50 {
                let released = histogram(&histogram_of(1_000), privacy).unwrap();
                assert!(released.iter().all(|(p, _)| p != "nine"), "{released:?}");
                assert!(released.iter().any(|(p, _)| p == "big"));
            }
        }
        assert_eq!(histogram(&histogram_of(10), Privacy::Exact).unwrap(), vec![("big".to_string(), 10)]);
    }

    #[test]
    fn the_threshold_bounds_delta_and_epsilon_is_what_was_asked() {
        let (epsilon, delta) = (1.0, 1e-6);
        let scale = 1.0 / epsilon;
        let tau = threshold(scale, delta);
        assert_eq!(tau, 15);
        let measurement = make_laplace_threshold::<_, _, Approximate<MaxDivergence>>(
            MapDomain::new(AtomDomain::<String>::default(), AtomDomain::<i64>::default()),
            L0PInfDistance::<1, _>(AbsoluteDistance::<i64>::default()),
            scale,
            tau,
            None,
        )
        .unwrap();
        // One agent: one partition, by one.
        let (spent, failure) = measurement.map(&(1, 1, 1)).unwrap();
        assert!(spent <= epsilon + 1e-9, "epsilon {spent}");
        assert!(failure <= delta, "delta {failure}");
    }

    #[test]
    fn noise_is_centred_and_small_groups_near_the_threshold_are_uncertain() {
        let privacy = Privacy::default();
        // 2,000 draws of a count of 1,000 at scale 1: the mean stays within 0.2.
        let draws: Vec<i64> = (0..2_000).map(|_| count(1_000, 1, privacy).unwrap()).collect();
        let mean = draws.iter().sum::<i64>() as f64 / draws.len() as f64;
        assert!((mean - 1_000.0).abs() < 0.2, "mean {mean}");
        assert!(draws.iter().any(|d| *d != 1_000), "noise was added");
        // Twelve agents sit below τ = 15: nearly always suppressed, as DP requires.
        let released = (0..200).filter(|_| !histogram(&[("small".into(), 12)], privacy).unwrap().is_empty()).count();
        assert!(released < 40, "{released} of 200 releases showed a group of 12");
    }
}
