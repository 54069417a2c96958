//! Earned DAC, as its agent sees it: the balance with what makes it spendable,
//! and the ledger. Lots are credited by sales in the tool market; the charge
//! pipeline debits them where the interface lets Earned pay; a job on the
//! lease ends lots a fixed number of days after they were earned.

use anchor_domain::MilliDac;
use anchor_domain::records::{AgentRecord, EarnedBalance, EarnedEntry};

use crate::{AppError, AppResult, Services};

/// The terms in force: below `threshold` unexpired, Earned cannot pay; a lot
/// expires `expiry_days` after it was earned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terms {
    pub threshold: MilliDac,
    pub expiry_days: u32,
}

/// The loaded pricing generation's terms, or the interface's (30 DAC, 365
/// days) for a generation that prices declarations only.
pub fn terms(services: &Services) -> AppResult<Terms> {
    Ok(match services.pricing.services()? {
        Some(prices) => Terms { threshold: prices.earned_threshold, expiry_days: prices.earned_expiry_days },
        None => Terms { threshold: MilliDac::from_dac(30), expiry_days: 365 },
    })
}

/// An agent's Earned DAC now, and whether it may spend it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Balance {
    pub totals: EarnedBalance,
    pub terms: Terms,
    /// The unexpired balance reaches the threshold.
    pub spendable: bool,
}

/// GET /v1/earned-dac/balance.
pub async fn balance(services: &Services, agent: &AgentRecord) -> AppResult<Balance> {
    let terms = terms(services)?;
    let totals = services.store.earned_balance(agent.agent_id, services.clock.now()).await?;
    Ok(Balance { totals, terms, spendable: totals.balance >= terms.threshold && totals.balance > MilliDac::ZERO })
}

/// The most lines a ledger page holds.
pub const LEDGER_PAGE_MAX: i64 = 100;

/// One page of the Earned ledger, with the window it was read in.
#[derive(Clone, Debug)]
pub struct LedgerPage {
    pub entries: Vec<EarnedEntry>,
    pub limit: i64,
    pub offset: i64,
}

/// GET /v1/earned-dac/ledger: newest first, `limit` 1 to 100 (default 20) from `offset`.
pub async fn ledger(services: &Services, agent: &AgentRecord, limit: Option<i64>, offset: Option<i64>) -> AppResult<LedgerPage> {
    let limit = limit.unwrap_or(20);
    if !(1..=LEDGER_PAGE_MAX).contains(&limit) {
        return Err(AppError::invalid("INVALID_VALUE", format!("limit must be 1 to {LEDGER_PAGE_MAX}; got {limit}")));
    }
    let offset = offset.unwrap_or(0);
    if offset < 0 {
        return Err(AppError::invalid("INVALID_VALUE", format!("offset must not be negative; got {offset}")));
    }
    let entries = services.store.earned_ledger(agent.agent_id, limit, offset).await?;
    Ok(LedgerPage { entries, limit, offset })
}

/// The job: ends the lots due now (of up to 100 agents a run); returns how many.
pub async fn expire_due(services: &Services) -> anyhow::Result<u64> {
    Ok(services.store.expire_earned(services.clock.now(), 100).await?)
}
