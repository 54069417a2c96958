//! De-identification of cross-agent statistics: differential privacy with
//! OpenDP's discrete Laplace mechanisms, where every decision to show a
//! figure is itself a noisy one.
//!
//! A release is a set of histograms and counts over one fixed window. In every
//! histogram each agent counts once, in one partition (the value it declared
//! most in the window), so one agent changes one partition by one: the L0, L1
//! and L∞ sensitivities are all 1. Then:
//!
//! 1. the release as a whole: discrete Laplace noise of scale 1/ε is added
//!    to the number of agents in the window, and the release shows anything
//!    only when the noisy number reaches τ ([`gate`]);
//! 2. partition selection: noise of the same scale is added to each count
//!    and only partitions whose noisy count reaches τ are released
//!    (OpenDP's `make_laplace_threshold`);
//! 3. scalar counts (agents in the window, declarations in it with each agent
//!    counted at most [`DECLARATION_CAP`] times) get discrete Laplace noise of
//!    scale sensitivity/ε (`make_laplace`).
//!
//! No figure is ever cut on its exact count first: that would make the
//! release of a value with [`K`] agents certain-or-impossible between two
//! neighbouring data sets (9 and 10 contributors), which no δ covers.
//! Instead τ ([`threshold`]) is set from K, ε and δ so that a value fewer
//! than K agents stand for passes with probability at most δ: with noise X of
//! scale b = 1/ε, P(X ≥ t) = e^(−t/b) / (1 + e^(−1/b)), so t is the least
//! integer with that ≤ δ, and τ = (K − 1) + t. At ε = 1, δ = 10⁻⁶: t = 14,
//! τ = 23. A value of one agent then passes with probability P(X ≥ 22), about
//! 2·10⁻¹⁰; one of nine with at most δ.
//!
//! Each histogram, each count and the gate spend ε of their own, and each
//! thresholded step its δ; a release spends their sum, and says so. Releases
//! are computed once per window and stored, so asking again spends nothing
//! and averages nothing away; what all the releases of one kind spent on each
//! day of data is kept in a ledger, held to a budget (`releases`).

use std::collections::HashMap;

use opendp::domains::{AtomDomain, MapDomain};
use opendp::measurements::{make_laplace, make_laplace_threshold};
use opendp::measures::{Approximate, MaxDivergence};
use opendp::metrics::{AbsoluteDistance, L0PInfDistance};

/// The number of distinct agents below which a figure is shown with
/// probability at most δ.
pub const K: i64 = 10;
/// At most this many declarations of one agent count in a window's total.
pub const DECLARATION_CAP: i64 = 100;

/// How releases are protected.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Privacy {
    /// Differential privacy: each histogram and each count spends `epsilon`;
    /// a value fewer than K agents stand for passes a noisy threshold with
    /// probability at most `delta`; what the releases of one kind spend on
    /// one day of data is held to `budget`.
    Noisy { epsilon: f64, delta: f64, budget: f64 },
    /// k-anonymity alone, exact counts (for tests of the release rules; the
    /// binary always runs `Noisy`).
    Exact,
}

/// The ε all the releases of one kind may spend on one day of data, by default.
/// It lets every scheduled release be cut (a day collects at most 762 from
/// the anomaly releases); see PRIVACY.md for what that amounts to.
pub const DEFAULT_BUDGET: f64 = 1000.0;

impl Default for Privacy {
    fn default() -> Privacy {
        Privacy::Noisy { epsilon: 1.0, delta: 1e-6, budget: DEFAULT_BUDGET }
    }
}

impl Privacy {
    /// (ε, δ) one histogram or count spends; an exact release spends no
    /// budget because it gives no differential-privacy guarantee at all.
    pub fn per_component(self) -> (f64, f64) {
        match self {
            Privacy::Noisy { epsilon, delta, .. } => (epsilon, delta),
            Privacy::Exact => (0.0, 0.0),
        }
    }

    /// The ε budget of one kind on one day of data (infinite for exact releases).
    pub fn budget(self) -> f64 {
        match self {
            Privacy::Noisy { budget, .. } => budget,
            Privacy::Exact => f64::INFINITY,
        }
    }
}

fn dp(error: opendp::error::Error) -> anyhow::Error {
    anyhow::anyhow!("differential privacy: {error:?}")
}

/// The least t with P(X ≥ t) ≤ `delta` for discrete Laplace noise X of `scale`.
pub fn tail(scale: f64, delta: f64) -> i64 {
    let q = (-1.0 / scale).exp();
    // P(X ≥ t) = q^t / (1 + q) ≤ δ  ⇔  t ≥ ln(1 / (δ (1 + q))) · scale.
    ((1.0 / (delta * (1.0 + q))).ln() * scale).ceil().max(1.0) as i64
}

/// The noisy threshold τ for noise of `scale`: a value fewer than [`K`]
/// agents stand for (K − 1 at most) reaches it with probability at most `delta`.
pub fn threshold(scale: f64, delta: f64) -> i64 {
    (K - 1) + tail(scale, delta)
}

/// Partition selection over a histogram of agent counts.
type Selection = opendp::core::Measurement<
    MapDomain<AtomDomain<String>, AtomDomain<i64>>,
    L0PInfDistance<1, AbsoluteDistance<i64>>,
    Approximate<MaxDivergence>,
    HashMap<String, i64>,
>;

fn threshold_measurement(scale: f64, tau: i64) -> anyhow::Result<Selection> {
    make_laplace_threshold::<_, _, Approximate<MaxDivergence>>(
        MapDomain::new(AtomDomain::<String>::default(), AtomDomain::<i64>::default()),
        L0PInfDistance::<1, _>(AbsoluteDistance::<i64>::default()),
        scale,
        tau,
        None,
    )
    .map_err(dp)
}

/// Releases a histogram in which each agent counts once: the partitions whose
/// noisy count reaches τ and their noisy counts, sorted by partition. (Exact:
/// the partitions of at least [`K`] agents, exactly.)
pub fn histogram(counts: &[(String, i64)], privacy: Privacy) -> anyhow::Result<Vec<(String, i64)>> {
    let released: HashMap<String, i64> = match privacy {
        Privacy::Exact => counts.iter().filter(|(_, n)| *n >= K).cloned().collect(),
        Privacy::Noisy { epsilon, delta, .. } => {
            let scale = 1.0 / epsilon;
            let all: HashMap<String, i64> = counts.iter().cloned().collect();
            threshold_measurement(scale, threshold(scale, delta))?.invoke(&all).map_err(dp)?
        }
    };
    let mut out: Vec<(String, i64)> = released.into_iter().collect();
    out.sort();
    Ok(out)
}

/// P(X ≥ t) for discrete Laplace noise X of `scale`: q^t / (1 + q) with
/// q = e^(−1/scale), rounded up so it is never understated.
pub fn tail_probability(scale: f64, t: i64) -> f64 {
    let q = (-1.0 / scale).exp();
    ((-(t as f64) / scale).exp() / (1.0 + q)).next_up().next_up().min(1.0)
}

/// The chance that a value of one agent alone (absent from the neighbouring
/// data set) is shown: P(1 + X ≥ τ) = P(X ≥ τ − 1) = q^(τ−1) / (1 + q).
pub fn single_agent_shown(scale: f64, tau: i64) -> f64 {
    tail_probability(scale, tau - 1)
}

/// What one thresholded histogram spends for one agent changing one
/// partition by one: ε by OpenDP's privacy map; δ, the chance a value of one
/// agent alone is shown. OpenDP 0.16's map gives P(X > τ − 1) = P(X ≥ τ)
/// there (its measurement keeps noisy counts at or above τ, its proof
/// bounds those above τ; opendp/opendp#2922), e^(1/scale) times too small:
/// the larger of the two is stated, so the figure stays true once the
/// library is mended.
pub fn histogram_cost(privacy: Privacy) -> anyhow::Result<(f64, f64)> {
    match privacy {
        Privacy::Exact => Ok((0.0, 0.0)),
        Privacy::Noisy { epsilon, delta, .. } => {
            let scale = 1.0 / epsilon;
            let tau = threshold(scale, delta);
            let (spent, library) = threshold_measurement(scale, tau)?.map(&(1, 1, 1)).map_err(dp)?;
            Ok((spent, library.max(single_agent_shown(scale, tau))))
        }
    }
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

/// Whether a release shows anything, decided on a noisy count of its
/// `agents` (sensitivity 1): the noisy count when it reaches τ, else
/// `None`. Fewer than [`K`] agents pass with probability at most δ. (Exact:
/// at least K agents, and the exact count.)
pub fn gate(agents: i64, privacy: Privacy) -> anyhow::Result<Option<i64>> {
    match privacy {
        Privacy::Exact => Ok((agents >= K).then_some(agents)),
        Privacy::Noisy { epsilon, delta, .. } => {
            let noisy = count(agents, 1, privacy)?;
            Ok((noisy >= threshold(1.0 / epsilon, delta)).then_some(noisy))
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
        assert_eq!((tail(scale, delta), tau), (14, 23));
        // Nine agents pass with probability P(X ≥ 14) ≤ δ.
        let q = (-1.0f64 / scale).exp();
        assert!(q.powi(14) / (1.0 + q) <= delta && q.powi(13) / (1.0 + q) > delta);
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

    /// The δ a histogram states is the chance that one agent's value alone
    /// is shown, q^(τ−1) / (1 + q): 2.04·10⁻¹⁰ at the defaults (OpenDP 0.16's
    /// own map says e times less).
    #[test]
    fn a_histograms_delta_is_the_chance_one_agent_alone_is_shown() {
        let (spent, stated) = histogram_cost(Privacy::default()).unwrap();
        assert!((spent - 1.0).abs() < 1e-9, "epsilon {spent}");
        let shown = (-22.0f64).exp() / (1.0 + (-1.0f64).exp());
        assert!(shown <= stated && stated <= shown * (1.0 + 1e-9), "stated {stated}, one agent shown with {shown}");
        assert!((stated - 2.04e-10).abs() < 0.01e-10, "{stated}");
    }

    /// At a threshold low enough to measure (scale 1, τ = 2), one agent's
    /// value is shown about q / (1 + q) = 0.269 of the time: the stated δ
    /// covers what is observed, within a Bernstein margin at 1 − 10⁻⁹.
    #[test]
    fn the_stated_delta_covers_the_observed_release_of_one_agent() {
        const N: usize = 40_000;
        let margin = |p: f64| (2.0 * p * (1e9f64).ln() / N as f64).sqrt() + (1e9f64).ln() / (3.0 * N as f64);
        let measurement = threshold_measurement(1.0, 2).unwrap();
        let one: HashMap<String, i64> = [("v".to_string(), 1)].into();
        let observed = (0..N).filter(|_| !measurement.invoke(&one).unwrap().is_empty()).count() as f64 / N as f64;
        let stated = single_agent_shown(1.0, 2);
        assert!(observed <= stated + margin(stated), "shown {observed} of the time, past the stated {stated}");
        assert!((observed - stated).abs() <= margin(stated), "{observed} against the computed {stated}");
    }

    #[test]
    fn noise_is_centred_and_small_groups_near_the_threshold_are_uncertain() {
        let privacy = Privacy::default();
        // 2,000 draws of a count of 1,000 at scale 1: the mean stays within 0.2.
        let draws: Vec<i64> = (0..2_000).map(|_| count(1_000, 1, privacy).unwrap()).collect();
        let mean = draws.iter().sum::<i64>() as f64 / draws.len() as f64;
        assert!((mean - 1_000.0).abs() < 0.2, "mean {mean}");
        assert!(draws.iter().any(|d| *d != 1_000), "noise was added");
        // Nineteen agents sit below τ = 23: nearly always suppressed, as DP requires.
        let released = (0..200).filter(|_| !histogram(&[("small".into(), 19)], privacy).unwrap().is_empty()).count();
        assert!(released < 40, "{released} of 200 releases showed a group of 19");
    }

    /// The guarantee, checked by sampling: at ε = 1 and δ = 0.01 (a δ large
    /// enough to measure), 40,000 releases of each of two neighbouring data
    /// sets through the functions the releases use. A value of 9 agents (one
    /// fewer than K) is shown at most δ of the time, one of 10 at most e^ε
    /// times as often plus δ, one of a single agent (against none) at most δ;
    /// the same for a whole release's gate (whose noisy count of nobody may
    /// pass, at its own tiny probability). Each observed frequency is
    /// compared with its bound plus a Bernstein margin at confidence
    /// 1 − 10⁻⁹, so the test fails by chance about once in a billion runs.
    #[test]
    fn neighbouring_data_sets_are_released_within_the_stated_bound() {
        let (epsilon, delta) = (1.0f64, 0.01f64);
        let privacy = Privacy::Noisy { epsilon, delta, budget: DEFAULT_BUDGET };
        const N: usize = 40_000;
        let margin = |p: f64| (2.0 * p.max(1e-4) * (1e9f64).ln() / N as f64).sqrt() + (1e9f64).ln() / (3.0 * N as f64);
        let histogram_frequency = |agents: i64| {
            let input = if agents == 0 { Vec::new() } else { vec![("v".to_string(), agents)] };
            (0..N).filter(|_| !histogram(&input, privacy).unwrap().is_empty()).count() as f64 / N as f64
        };
        let gate_frequency = |agents: i64| (0..N).filter(|_| gate(agents, privacy).unwrap().is_some()).count() as f64 / N as f64;
        // The arithmetic: nine agents pass with probability q^t / (1 + q).
        let q = (-epsilon).exp();
        let t = tail(1.0 / epsilon, delta);
        let exact_nine = q.powi(t as i32) / (1.0 + q);
        assert!(exact_nine <= delta, "{exact_nine}");
        let exact_nobody = tail_probability(1.0 / epsilon, threshold(1.0 / epsilon, delta));
        assert!(exact_nobody < exact_nine, "{exact_nobody}");
        for (what, frequency) in [("histogram", &histogram_frequency as &dyn Fn(i64) -> f64), ("gate", &gate_frequency)] {
            let (p0, p1, p9, p10) = (frequency(0), frequency(1), frequency(9), frequency(10));
            // Of nobody: a histogram has no value to show; the gate's noisy
            // count of zero reaches τ with probability q^τ / (1 + q) (about
            // 6·10⁻⁷ here, so once in some forty runs of 40,000 draws).
            match what {
                "histogram" => assert_eq!(p0, 0.0, "{what}: nothing is shown of nobody"),
                _ => assert!(p0 <= exact_nobody + margin(exact_nobody), "{what}: nobody shown {p0} of the time, past {exact_nobody}"),
            }
            assert!(p1 <= delta + margin(delta), "{what}: one agent shown {p1} of the time");
            assert!(p9 <= delta + margin(delta), "{what}: nine agents shown {p9} of the time, past δ = {delta}");
            assert!((p9 - exact_nine).abs() <= margin(exact_nine), "{what}: {p9} against the computed {exact_nine}");
            let bound = epsilon.exp() * (p9 + margin(p9)) + delta;
            assert!(p10 <= bound + margin(p10), "{what}: ten agents shown {p10} of the time, nine {p9}: past e^ε·p9 + δ");
            assert!(p10 > p9, "{what}: the tenth agent makes a difference, as it should ({p10} against {p9})");
        }
    }
}
