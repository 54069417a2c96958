//! Bilateral declarations: one agent proposes a decision both took part in;
//! the counterparty accepts (and gets its own record of it) or rejects.
//!
//! | from | event | to |
//! | --- | --- | --- |
//! | proposed | the counterparty accepts | accepted: its record is created; the proposer may confirm (and pay) |
//! | proposed | the counterparty rejects | rejected: the proposer's reservation is released |
//! | proposed | the payment window ends | expired: released likewise |

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::declarations::wire_enum;

wire_enum!(AgreementStatus { Proposed = "proposed", Accepted = "accepted", Rejected = "rejected", Expired = "expired" });

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Agreement {
    pub agreement_id: Uuid,
    pub proposer_agent_id: Uuid,
    pub counterparty_agent_id: Uuid,
    pub proposer_dd_id: Uuid,
    pub counterparty_dd_id: Option<Uuid>,
    pub status: AgreementStatus,
    pub proposed_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub responded_at: Option<DateTime<Utc>>,
}

impl Agreement {
    /// The status at `now`: a proposal past its window is expired even
    /// before the job has released it.
    pub fn status_at(&self, now: DateTime<Utc>) -> AgreementStatus {
        if self.status == AgreementStatus::Proposed && now >= self.expires_at { AgreementStatus::Expired } else { self.status }
    }
}
