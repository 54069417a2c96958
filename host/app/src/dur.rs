//! DUR: reports of what an agent spent and what its own decisions declared,
//! over a time range. Free: they consume no budget and no counter.
//!
//! Spending is read from one ledger, the usage entries every paid thing
//! writes (a confirmed declaration, a settled observation, …), so the summary
//! adds up by construction: its total is the sum of its kinds and the sum of
//! its sources (`Summary::check`). Retention subscriptions count under `dd_ee`.

use chrono::{DateTime, Duration, Months, Utc};
use dashu::integer::IBig;
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::payments::{PaymentSource, SubjectDomain};
use anchor_domain::records::{ObservationSpend, SpendLine, UsageLine};
use anchor_ports::Span;

use crate::paging::{self, Page};
use crate::{AppError, AppResult, Services};

/// A report's range: `[from, to)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

fn bound(name: &str, text: &str, end: bool) -> AppResult<DateTime<Utc>> {
    use anchor_domain::dates;
    if let Some(day) = dates::parse_day(text) {
        // A date is that whole UTC day: from its start, or up to its end.
        return Ok(if end { dates::day_end(day) } else { dates::day_start(day) });
    }
    dates::parse_instant(text).ok_or_else(|| {
        AppError::invalid(
            "INVALID_VALUE",
            format!(
                "{name} must be a date (2026-07-10) or an ISO 8601 time with an offset, in the years 0000 to 9999; got {}",
                anchor_domain::brief(text)
            ),
        )
    })
}

/// Reads `from` and `to`: a date (UTC; a `to` date includes that whole day)
/// or an RFC 3339 time (a `to` time is exclusive). By default, the three
/// months up to now.
pub fn range(services: &Services, from: Option<&str>, to: Option<&str>) -> AppResult<Range> {
    let now = services.clock.now();
    let to = match to {
        Some(text) => bound("to", text, true)?,
        // Up to now, included.
        None => now + Duration::microseconds(1),
    };
    let from = match from {
        Some(text) => bound("from", text, false)?,
        None => to
            .checked_sub_months(Months::new(3))
            .map_or_else(anchor_domain::dates::earliest, |from| from.max(anchor_domain::dates::earliest())),
    };
    if from > to {
        return Err(AppError::invalid("INVALID_VALUE", "from must not be after to"));
    }
    Ok(Range { from, to })
}

/// The kinds of spending a report separates.
pub const KINDS: [&str; 6] = ["dd_ee", "ara", "ise", "sdac", "tsl", "asa"];

/// The report kind a paid subject counts under.
pub fn kind_of(domain: SubjectDomain) -> &'static str {
    match domain {
        SubjectDomain::Declaration | SubjectDomain::RetentionSubscription => "dd_ee",
        SubjectDomain::AraObservation => "ara",
        SubjectDomain::IseSession => "ise",
        SubjectDomain::SdacSession => "sdac",
        SubjectDomain::TslPurchase => "tsl",
        SubjectDomain::AsaSubscription => "asa",
    }
}

fn domains_of(kind: &str) -> Vec<SubjectDomain> {
    SubjectDomain::ALL.iter().copied().filter(|d| kind_of(*d) == kind).collect()
}

/// What agents spent in a range.
#[derive(Clone, Debug)]
pub struct Summary {
    pub range: Range,
    /// Declarations anchored in the range and on record.
    pub declarations: i64,
    pub lines: Vec<SpendLine>,
    pub observations: ObservationSpend,
    /// References of external settlements on chain (local ones left out), newest first.
    pub settlements: Vec<String>,
    /// What the agents' Earned ledger received in the range, and its transactions.
    pub earned: anchor_domain::records::EarnedFlow,
}

impl Summary {
    pub fn total(&self) -> MilliDac {
        self.lines.iter().fold(MilliDac::ZERO, |sum, l| sum + l.amount)
    }

    pub fn entries(&self) -> i64 {
        self.lines.iter().map(|l| l.entries).sum()
    }

    pub fn by_kind(&self, kind: &str) -> MilliDac {
        self.lines.iter().filter(|l| kind_of(l.domain) == kind).fold(MilliDac::ZERO, |sum, l| sum + l.amount)
    }

    pub fn by_source(&self, source: PaymentSource) -> MilliDac {
        self.lines.iter().filter(|l| l.source == source).fold(MilliDac::ZERO, |sum, l| sum + l.amount)
    }

    /// External usage entries (payments in the fiat sense).
    pub fn external_entries(&self) -> i64 {
        self.lines.iter().filter(|l| l.source == PaymentSource::External).map(|l| l.entries).sum()
    }

    /// The total equals the sum of the kinds and the sum of the sources.
    pub fn check(&self) -> bool {
        let total = self.total();
        let kinds = KINDS.iter().fold(MilliDac::ZERO, |sum, k| sum + self.by_kind(k));
        let sources = PaymentSource::ALL.iter().fold(MilliDac::ZERO, |sum, s| sum + self.by_source(*s));
        total == kinds && total == sources
    }
}

/// What `agents` spent in `range`.
pub async fn summary(services: &Services, agents: &[Uuid], range: Range) -> AppResult<Summary> {
    let span = Span { agents, from: range.from, to: range.to };
    let store = &services.store;
    let summary = Summary {
        range,
        declarations: store.anchored_count(&span).await?,
        lines: store.spend(&span).await?,
        observations: store.observation_spend(&span).await?,
        settlements: store
            .settlement_refs(&span)
            .await?
            .into_iter()
            .filter(|r| !r.starts_with("local:") && !r.starts_with("reconciled:"))
            .collect(),
        earned: store.earned_flow(&span).await?,
    };
    if !summary.check() {
        return Err(AppError::Internal(anyhow::anyhow!("the DUR summary does not add up: {summary:?}")));
    }
    Ok(summary)
}

/// The most entries an export holds.
pub const EXPORT_MAX: i64 = 100_000;

/// Usage entries of `agents` in `range`, newest first, optionally of one kind.
pub async fn transactions(
    services: &Services,
    agents: &[Uuid],
    range: Range,
    kind: Option<&str>,
    page: Option<i64>,
    limit: Option<i64>,
) -> AppResult<Page<UsageLine>> {
    let window = paging::by_page(paging::USAGE, limit, page)?;
    let domains = match kind {
        None => Vec::new(),
        Some(kind) if KINDS.contains(&kind) => domains_of(kind),
        Some(other) => {
            return Err(AppError::invalid(
                "INVALID_ENUM",
                format!("type must be one of {}; got {}", KINDS.join(", "), anchor_domain::brief(other)),
            ));
        }
    };
    let span = Span { agents, from: range.from, to: range.to };
    let (items, total) = services.store.usage_lines(&span, &domains, window.offset, window.limit).await?;
    Ok(window.holding(items, total))
}

/// Every usage line of `agents` in `range`, up to [`EXPORT_MAX`], with how
/// many there are in all: what an export holds.
pub async fn export_lines(services: &Services, agents: &[Uuid], range: Range) -> AppResult<(Vec<UsageLine>, i64)> {
    let span = Span { agents, from: range.from, to: range.to };
    Ok(services.store.usage_lines(&span, &[], 0, EXPORT_MAX).await?)
}

/// DUR's decision reports cover the asking agent only.
pub fn own_only(agent_id: Uuid, asked: Option<Uuid>) -> AppResult<()> {
    match asked {
        Some(other) if other != agent_id => Err(AppError::forbidden(
            "CROSS_AGENT_NOT_ALLOWED",
            "decision reports cover your own decisions only; leave agent_id out or send your own",
        )),
        _ => Ok(()),
    }
}

/// Template values of the agent's branch-1 decisions in a range.
#[derive(Clone, Debug)]
pub struct TemplateCounts {
    pub range: Range,
    /// Branch-1 decisions in the range.
    pub decisions: i64,
    /// (dimension, value, decisions).
    pub counts: Vec<(String, String, i64)>,
}

pub async fn template_counts(services: &Services, agent_id: Uuid, range: Range) -> AppResult<TemplateCounts> {
    let agents = [agent_id];
    let span = Span { agents: &agents, from: range.from, to: range.to };
    let (counts, decisions) = services.store.template_counts(&span).await?;
    Ok(TemplateCounts { range, decisions, counts })
}

/// A decimal read exactly from its JSON text: `mantissa × 10^-scale`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Decimal {
    mantissa: IBig,
    scale: i64,
}

impl Decimal {
    fn parse(text: &str) -> Option<Decimal> {
        let (number, exponent) = text.split_once(['e', 'E']).unwrap_or((text, "0"));
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits = format!("{whole}{fraction}");
        let mantissa: IBig = digits.parse().ok()?;
        if mantissa == IBig::ZERO {
            // Zero is zero however its exponent is written (`0e-401`).
            return Some(Decimal { mantissa, scale: 0 });
        }
        let exponent = exponent.parse::<i64>().ok()?;
        // What a float can hold, no more: values stored before that bound
        // was checked never cost an unbounded power of ten.
        if !(-400..=400).contains(&exponent) || text.len() > 64 {
            return None;
        }
        Some(Decimal { mantissa, scale: fraction.len() as i64 - exponent })
    }

    /// The mantissa at a larger (or equal) scale.
    fn at(&self, scale: i64) -> IBig {
        &self.mantissa * IBig::from(10).pow((scale - self.scale) as usize)
    }

    /// `mantissa × 10^-scale` as plain decimal text, trailing zeros dropped.
    fn text(mantissa: &IBig, scale: i64) -> String {
        let negative = *mantissa < IBig::ZERO;
        let digits = if negative { (-mantissa).to_string() } else { mantissa.to_string() };
        let mut out = if scale <= 0 {
            format!("{digits}{}", "0".repeat((-scale) as usize))
        } else {
            let scale = scale as usize;
            let padded = format!("{digits:0>width$}", width = scale + 1);
            let (whole, fraction) = padded.split_at(padded.len() - scale);
            let fraction = fraction.trim_end_matches('0');
            if fraction.is_empty() { whole.to_string() } else { format!("{whole}.{fraction}") }
        };
        if negative && out != "0" {
            out.insert(0, '-');
        }
        out
    }
}

/// Decision scales of one unit: how many, the smallest, the largest and the
/// mean, as exact decimal text (the mean to six places, rounded half away from zero).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleStats {
    pub unit: String,
    pub count: i64,
    pub min: String,
    pub max: String,
    pub avg: String,
}

/// The mean's extra decimal places.
const MEAN_PLACES: i64 = 6;

pub async fn decision_scale(services: &Services, agent_id: Uuid, range: Range) -> AppResult<(Range, Vec<ScaleStats>)> {
    let agents = [agent_id];
    let span = Span { agents: &agents, from: range.from, to: range.to };
    let mut by_unit: std::collections::BTreeMap<String, Vec<(Decimal, String)>> = Default::default();
    for (unit, text) in services.store.scale_values(&span).await? {
        if let Some(value) = Decimal::parse(&text) {
            by_unit.entry(unit).or_default().push((value, text));
        }
    }
    let stats = by_unit
        .into_iter()
        .map(|(unit, values)| {
            let scale = values.iter().map(|(v, _)| v.scale).max().unwrap_or(0).max(0);
            let aligned: Vec<(IBig, &str)> = values.iter().map(|(v, t)| (v.at(scale), t.as_str())).collect();
            let min = aligned.iter().min_by(|a, b| a.0.cmp(&b.0)).map(|(_, t)| t.to_string()).unwrap_or_default();
            let max = aligned.iter().max_by(|a, b| a.0.cmp(&b.0)).map(|(_, t)| t.to_string()).unwrap_or_default();
            let sum = aligned.iter().fold(IBig::ZERO, |sum, (v, _)| sum + v);
            // The mean is sum / (count × 10^scale); at six places, sum × 10^6 / that.
            let divisor = IBig::from(values.len()) * IBig::from(10).pow(scale as usize);
            let scaled = sum * IBig::from(10).pow(MEAN_PLACES as usize) * 2;
            // Round half away from zero: (2x ± d) / 2d, truncated.
            let rounded = if scaled >= IBig::ZERO { (scaled + &divisor) / (&divisor * 2) } else { (scaled - &divisor) / (&divisor * 2) };
            ScaleStats { unit, count: values.len() as i64, min, max, avg: Decimal::text(&rounded, MEAN_PLACES) }
        })
        .collect();
    Ok((range, stats))
}

/// GET /v1/dur/tsl: the agent's tool-market money in `range`, newest first:
/// `buyer` what it paid for purchases, `seller` what sales and revenue
/// shares credited it (Earned DAC), `all` both.
pub async fn tsl(
    services: &Services,
    agent_id: Uuid,
    range: Range,
    role: &str,
    page: Option<i64>,
    limit: Option<i64>,
) -> AppResult<Page<anchor_domain::records::TslLine>> {
    let window = paging::by_page(paging::USAGE, limit, page)?;
    let direction = match role {
        "buyer" => "paid",
        "seller" => "received",
        _ => "all",
    };
    let (items, total) = services.store.tsl_lines(agent_id, range.from, range.to, Some(direction), window.offset, window.limit).await?;
    Ok(window.holding(items, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact() {
        let d = Decimal::parse("18446744073709551616.5").unwrap();
        assert_eq!(Decimal::text(&d.mantissa, d.scale), "18446744073709551616.5");
        let e = Decimal::parse("1.5E3").unwrap();
        assert_eq!(Decimal::text(&e.at(0), 0), "1500");
        let small = Decimal::parse("-0.000125").unwrap();
        assert_eq!(Decimal::text(&small.mantissa, small.scale), "-0.000125");
        assert_eq!(Decimal::text(&IBig::from(5), 3), "0.005");
        let zero = Decimal::parse("-0e-401").unwrap();
        assert_eq!((Decimal::text(&zero.mantissa, zero.scale), zero.scale), ("0".to_string(), 0));
    }
}
