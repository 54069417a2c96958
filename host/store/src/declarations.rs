//! Declarations: create (with its Trial debit or payment reservation), confirm, read, list, direct reads of the original, usage.

use anchor_domain::MilliDac;
use anchor_domain::declarations::{Declaration, dd, ee, template};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::agents;
use crate::batch;
use crate::engine::{Bind, Engine, Exec, Query, Row, Transaction, sql};
use crate::payments::{self, Key};
use crate::*;

/// A declaration to record, priced, paid from Trial or by a reserved payment.
#[derive(Clone, Debug)]
pub struct NewDeclaration {
    pub declaration: Declaration,
    pub request_id: Uuid,
    pub subtotal: MilliDac,
    pub base_fee: MilliDac,
    pub multiplier_permille: u32,
    pub monthly: MilliDac,
    pub direct_access_expires_at: DateTime<Utc>,
    /// `Some`: paid externally; `None`: paid from Trial.
    pub external: Option<NewPayment>,
    /// With `external`: the base fee is still debited from Trial and the
    /// payment covers the premium alone (`premium_payment_source: external`).
    pub base_from_trial: bool,
    /// The premium paid from Earned DAC (`premium_payment_source: earned`),
    /// debited with the record; Trial or the payment covers the rest.
    pub earned_premium: Option<EarnedPart>,
    /// A bilateral proposal: the agreement written with the record.
    pub agreement: Option<NewAgreement>,
}

/// The agreement a bilateral proposal writes with its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewAgreement {
    pub agreement_id: Uuid,
    pub counterparty_agent_id: Uuid,
    pub expires_at: DateTime<Utc>,
}

/// A recorded declaration with its payment and confirmation state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredDeclaration {
    pub declaration: Declaration,
    pub request_id: Uuid,
    pub subtotal: MilliDac,
    pub base_fee: MilliDac,
    pub multiplier_permille: u32,
    pub monthly: MilliDac,
    pub base_fee_source: PaymentSource,
    pub premium_source: PaymentSource,
    /// The Trial balance right after this declaration was paid from it.
    pub trial_remaining_after: Option<MilliDac>,
    pub settlement_status: SettlementStatus,
    pub confirmed_at: Option<DateTime<Utc>>,
    pub integrity_hash: Option<String>,
    pub direct_reads_used: i64,
    pub direct_access_expires_at: DateTime<Utc>,
    /// Externally paid: confirm before this, or the reservation is released.
    pub payment_deadline: Option<DateTime<Utc>>,
    /// When the record stops being kept; `None` while indefinite retention holds.
    pub retention_expires_at: Option<DateTime<Utc>>,
    /// When an ended indefinite-retention subscription demoted it to short.
    pub retention_demoted_at: Option<DateTime<Utc>>,
    /// The bilateral agreement it belongs to (either side's record).
    pub agreement_id: Option<Uuid>,
}

impl StoredDeclaration {
    pub fn premium(&self) -> MilliDac {
        self.declaration.dac_amount - self.base_fee
    }
}

#[derive(Clone, Debug)]
pub enum Created {
    /// Recorded now: the Trial balance after the debit, and the record as
    /// stored (returned by the insert itself: no read-back).
    New { trial_remaining: MilliDac, record: Box<StoredDeclaration> },
    /// The agent already used this request_id: the earlier record.
    Replayed(Box<StoredDeclaration>),
    /// Trial cannot pay: too little left, or expired.
    TrialCannotPay { balance: MilliDac, expired: bool },
    /// `parent_dd_id` names no declaration (or one de-identified).
    ParentNotFound,
    /// `parent_dd_id` names another agent's declaration.
    ParentForeign,
    /// The payment authorization was already used (its nonce is reserved).
    PaymentReplayed,
    /// The payment would take the agent past its DAB for the period.
    DabReached { limit: MilliDac, spent: MilliDac },
    /// Earned DAC cannot pay the premium (below the threshold, or short).
    EarnedShort { balance: MilliDac },
}

/// The outcome of a read of a declaration's original through direct access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectRead {
    /// Counted; this many reads are left.
    Granted { remaining: i64 },
    /// Every read of the quota is spent.
    Exhausted,
    /// The access period is over.
    Expired,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ListFilter {
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub limit: i64,
    pub offset: i64,
}

#[async_trait]
pub trait DeclarationStore: Send + Sync {
    /// Records a declaration and debits Trial by its total, atomically; or
    /// returns the earlier record for a reused request_id.
    async fn create_declaration(&self, new: &NewDeclaration, now: DateTime<Utc>) -> Result<Created>;
    async fn declaration(&self, dd_id: Uuid) -> Result<Option<StoredDeclaration>>;
    /// The agent's declaration recorded under `request_id`, if any.
    async fn declaration_by_request(&self, agent_id: Uuid, request_id: Uuid) -> Result<Option<StoredDeclaration>>;
    /// Settles a declaration once and queues its log leaf, in one transaction:
    /// false if it was already confirmed or released. `settlement_ref`, for an
    /// externally paid declaration, marks its payment settled in the same
    /// transaction.
    async fn confirm_declaration(
        &self,
        dd_id: Uuid,
        integrity_hash: &str,
        now: DateTime<Utc>,
        usage: &[UsageEntry],
        leaf_data: &[u8],
        settlement_ref: Option<&str>,
    ) -> Result<bool>;
    /// Counts one read of the original against the EE's quota and period.
    async fn consume_direct_read(&self, dd_id: Uuid, now: DateTime<Utc>) -> Result<DirectRead>;
    /// The agent's declarations, newest first, and how many match in all.
    async fn list_declarations(&self, agent_id: Uuid, filter: ListFilter) -> Result<(Vec<StoredDeclaration>, i64)>;
    /// The agent's declarations in one lineage group, oldest first.
    async fn lineage_group(&self, agent_id: Uuid, group_id: Uuid) -> Result<Vec<StoredDeclaration>>;
}

#[async_trait]
impl<E: Engine> DeclarationStore for SqlStore<E> {
    async fn create_declaration(&self, new: &NewDeclaration, now: DateTime<Utc>) -> Result<Created> {
        let d = &new.declaration;
        // A request_id used before is answered with its record. Paid over x402,
        // that is looked up first: a retried request carries the same
        // authorization, whose nonce would otherwise refuse it. Otherwise the
        // unique (agent, request_id) key finds it with no lookup of its own:
        // the insert fails, the transaction (and its debit) is dropped, and
        // every refusal below is checked against an earlier record first.
        if new.external.is_some()
            && let Some(earlier) = self.declaration_for_request(d.agent_id, new.request_id).await?
        {
            return Ok(Created::Replayed(Box::new(earlier)));
        }
        let refused = |outcome: Created| async move {
            Ok::<_, StoreError>(match self.declaration_for_request(d.agent_id, new.request_id).await? {
                Some(earlier) => Created::Replayed(Box::new(earlier)),
                None => outcome,
            })
        };
        let trial_only = new.external.is_none() && new.earned_premium.is_none() && new.agreement.is_none();
        // Paid wholly from Trial, with no parent: handed to the group
        // committer, which answers once its batch has committed.
        if trial_only
            && d.dd.parent_dd_id.is_none()
            && let Some(batcher) = self.batcher()
        {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let job = batch::Job::Create(Box::new(batch::CreateJob { new: new.clone(), now, reply }));
            if batcher.submit(job).await
                && let Ok(Some(record)) = answer.await
            {
                let record = Box::new(record);
                return Ok(Created::New { trial_remaining: record.trial_remaining_after.unwrap_or(MilliDac::ZERO), record });
            }
        }
        // Not taken by a batch (or none runs here), on PostgreSQL: one statement.
        if self.db.writes_in_with() && trial_only && d.dd.parent_dd_id.is_none() {
            return match self.db().fetch_optional(DeclarationRow::trial_paid(new).debit_and_insert(d.dac_amount, now)).await {
                Ok(Some(stored)) => {
                    let record = Box::new(decode_declaration(&stored)?);
                    Ok(Created::New { trial_remaining: record.trial_remaining_after.unwrap_or(MilliDac::ZERO), record })
                }
                Ok(None) => {
                    let (balance, expired) = agents::trial_shortfall(&mut self.db(), d.agent_id, now).await?;
                    refused(Created::TrialCannotPay { balance, expired }).await
                }
                Err(error) if is_unique_violation(&error) => match self.declaration_for_request(d.agent_id, new.request_id).await? {
                    Some(earlier) => Ok(Created::Replayed(Box::new(earlier))),
                    None => Err(error),
                },
                Err(error) => Err(error),
            };
        }
        let mut tx = self.begin_write().await?;
        let mut lineage_group_id = d.lineage_group_id;
        if let Some(parent) = d.dd.parent_dd_id {
            let row = tx.fetch_optional(sql("select agent_id, lineage_group_id from declaration where dd_id = $1").bind(parent)).await?;
            let Some(row) = row else {
                drop(tx);
                return refused(Created::ParentNotFound).await;
            };
            let parent_agent: Uuid = row.get("agent_id")?;
            if parent_agent != d.agent_id {
                drop(tx);
                return refused(Created::ParentForeign).await;
            }
            lineage_group_id = row.get("lineage_group_id")?;
        }
        let trial_remaining = if let Some(payment) = &new.external {
            let subject = Subject::declaration(d.dd_id);
            match payments::reserve(&mut tx, self.db.for_update(), payment, d.agent_id, subject, now).await? {
                Reservation::Reserved => {}
                Reservation::NonceUsed => return Ok(Created::PaymentReplayed),
                Reservation::DabReached { limit, spent } => return Ok(Created::DabReached { limit, spent }),
                // `reserve` itself never debits Earned DAC nor writes a pending record (only `reserve_payment` does).
                Reservation::EarnedShort { .. } | Reservation::Duplicate => {
                    return Err(StoreError::Corrupt("a declaration's reservation reported what only reserve_payment does".into()));
                }
            }
            if new.base_from_trial {
                match agents::debit_trial(&mut tx, d.agent_id, new.base_fee, now).await? {
                    Some(left) => Some(left),
                    None => return Ok(Created::TrialCannotPay { balance: MilliDac::ZERO, expired: false }),
                }
            } else {
                None
            }
        } else {
            let earned_part = new.earned_premium.map_or(MilliDac::ZERO, |e| e.amount);
            let Some(trial_remaining) = agents::debit_trial(&mut tx, d.agent_id, d.dac_amount - earned_part, now).await? else {
                let (balance, expired) = agents::trial_shortfall(&mut tx, d.agent_id, now).await?;
                drop(tx);
                return refused(Created::TrialCannotPay { balance, expired }).await;
            };
            Some(trial_remaining)
        };
        if let Some(part) = new.earned_premium {
            let subject = Some(Subject::declaration(d.dd_id));
            let spend =
                earned::debit(&mut tx, self.db.for_update(), d.agent_id, part.amount, part.threshold, "declaration premium", subject, now);
            if let Some(balance) = spend.await?.shortfall() {
                drop(tx);
                return refused(Created::EarnedShort { balance }).await;
            }
        }
        let (base_source, mut premium_source) = match (&new.external, new.base_from_trial) {
            (None, _) => (PaymentSource::Trial, PaymentSource::Trial),
            (Some(_), true) => (PaymentSource::Trial, PaymentSource::External),
            (Some(_), false) => (PaymentSource::External, PaymentSource::External),
        };
        if new.earned_premium.is_some() {
            premium_source = PaymentSource::Earned;
        }
        let settlement = if new.external.is_some() { SettlementStatus::Pending } else { SettlementStatus::Unreserved };
        let row = DeclarationRow {
            new,
            lineage_group_id,
            trial_remaining,
            base_source,
            premium_source,
            settlement,
            agreement_id: new.agreement.map(|a| a.agreement_id),
        };
        let mut insert = row.query();
        insert.push(" returning *");
        let inserted = tx.fetch_one(insert).await;
        match inserted {
            Ok(stored) => {
                let record = Box::new(decode_declaration(&stored)?);
                if let Some(agreement) = &new.agreement {
                    bilateral::insert(&mut tx, agreement, d, now).await?;
                }
                if let Some(payment) = &new.external {
                    tx.execute(sql("update x402_payment set dd_id = $1 where payment_id = $2").bind(d.dd_id).bind(payment.payment_id))
                        .await?;
                }
                tx.commit().await?;
                Ok(Created::New { trial_remaining: MilliDac(trial_remaining.unwrap_or(0)), record })
            }
            // A concurrent request with the same request_id won: drop our
            // debit with the transaction and answer with its record.
            Err(error) if is_unique_violation(&error) => {
                tx.rollback().await?;
                match self.declaration_for_request(d.agent_id, new.request_id).await? {
                    Some(earlier) => Ok(Created::Replayed(Box::new(earlier))),
                    None => Err(error),
                }
            }
            Err(error) => Err(error),
        }
    }

    async fn declaration_by_request(&self, agent_id: Uuid, request_id: Uuid) -> Result<Option<StoredDeclaration>> {
        self.declaration_for_request(agent_id, request_id).await
    }

    async fn declaration(&self, dd_id: Uuid) -> Result<Option<StoredDeclaration>> {
        if let Some(reader) = self.reader()
            && let Some(found) = reader.declaration(dd_id).await
        {
            return Ok(found);
        }
        let query = || sql("select * from declaration where dd_id = $1 and deidentified_at is null").bind(dd_id);
        if let Some(found) = self.read_direct(query(), decode_declaration) {
            return Ok(found);
        }
        let row = self.db().fetch_optional(query()).await?;
        row.as_ref().map(decode_declaration).transpose()
    }

    async fn confirm_declaration(
        &self,
        dd_id: Uuid,
        integrity_hash: &str,
        now: DateTime<Utc>,
        usage: &[UsageEntry],
        leaf_data: &[u8],
        settlement_ref: Option<&str>,
    ) -> Result<bool> {
        // Paid from Trial or Earned DAC: handed to the group committer.
        if settlement_ref.is_none()
            && let Some(batcher) = self.batcher()
        {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let job = batch::Job::Confirm(Box::new(batch::ConfirmJob {
                dd_id,
                integrity_hash: integrity_hash.to_owned(),
                now,
                usage: usage.to_vec(),
                leaf_data: leaf_data.to_vec(),
                reply,
            }));
            if batcher.submit(job).await
                && let Ok(Some(confirmed)) = answer.await
            {
                return Ok(confirmed);
            }
        }
        // Not taken by a batch, on PostgreSQL: one statement.
        if settlement_ref.is_none() && self.db.writes_in_with() {
            let agent_id: Option<Uuid> = self.db().scalar_optional(confirm_in_one(dd_id, integrity_hash, now, usage, leaf_data)).await?;
            return Ok(agent_id.is_some());
        }
        let mut tx = self.begin_write().await?;
        let confirmed = confirm_steps(&mut tx, dd_id, integrity_hash, now, usage, leaf_data, settlement_ref).await?;
        if confirmed {
            tx.commit().await?;
        }
        Ok(confirmed)
    }

    async fn consume_direct_read(&self, dd_id: Uuid, now: DateTime<Utc>) -> Result<DirectRead> {
        let left: Option<i64> = self
            .db()
            .scalar_optional(
                sql("update declaration set direct_reads_used = direct_reads_used + 1 \
             where dd_id = $1 and direct_reads_used < ee_direct_access_quota and direct_access_expires_at > $2 \
             returning ee_direct_access_quota - direct_reads_used")
                .bind(dd_id)
                .bind(now),
            )
            .await?;
        if let Some(remaining) = left {
            return Ok(DirectRead::Granted { remaining });
        }
        let expires: DateTime<Utc> =
            self.db().scalar(sql("select direct_access_expires_at from declaration where dd_id = $1").bind(dd_id)).await?;
        Ok(if expires <= now { DirectRead::Expired } else { DirectRead::Exhausted })
    }

    async fn list_declarations(&self, agent_id: Uuid, filter: ListFilter) -> Result<(Vec<StoredDeclaration>, i64)> {
        // Bounds that compare correctly as text on SQLite as well.
        let far_past = DateTime::<Utc>::UNIX_EPOCH;
        let far_future = "9999-12-31T23:59:59Z".parse::<DateTime<Utc>>().unwrap_or(DateTime::<Utc>::MAX_UTC);
        let from = filter.from.unwrap_or(far_past);
        let to = filter.to.unwrap_or(far_future);
        let rows = self
            .db()
            .fetch_all(
                sql("select * from declaration \
             where agent_id = $1 and anchored_at >= $2 and anchored_at <= $3 \
             order by anchored_at desc, dd_id desc limit $4 offset $5")
                .bind(agent_id)
                .bind(from)
                .bind(to)
                .bind(filter.limit)
                .bind(filter.offset),
            )
            .await?;
        let total: i64 = self
            .db()
            .scalar(
                sql("select count(*) from declaration where agent_id = $1 and anchored_at >= $2 and anchored_at <= $3")
                    .bind(agent_id)
                    .bind(from)
                    .bind(to),
            )
            .await?;
        Ok((rows.iter().map(decode_declaration).collect::<Result<_>>()?, total))
    }

    async fn lineage_group(&self, agent_id: Uuid, group_id: Uuid) -> Result<Vec<StoredDeclaration>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select * from declaration \
             where agent_id = $1 and lineage_group_id = $2 order by anchored_at, dd_id")
                .bind(agent_id)
                .bind(group_id),
            )
            .await?;
        rows.iter().map(decode_declaration).collect()
    }
}

impl<E: Engine> SqlStore<E> {
    async fn declaration_for_request(&self, agent_id: Uuid, request_id: Uuid) -> Result<Option<StoredDeclaration>> {
        let row = self
            .db()
            .fetch_optional(sql("select * from declaration where agent_id = $1 and request_id = $2").bind(agent_id).bind(request_id))
            .await?;
        row.as_ref().map(decode_declaration).transpose()
    }
}

/// The declaration row of a record to insert.
pub(crate) struct DeclarationRow<'a> {
    pub new: &'a NewDeclaration,
    pub lineage_group_id: Uuid,
    pub trial_remaining: Option<i64>,
    pub base_source: PaymentSource,
    pub premium_source: PaymentSource,
    pub settlement: SettlementStatus,
    pub agreement_id: Option<Uuid>,
}

impl<'a> DeclarationRow<'a> {
    /// A record paid wholly from Trial, with no parent (its own lineage
    /// group), before the Trial it leaves is known.
    pub(crate) fn trial_paid(new: &'a NewDeclaration) -> DeclarationRow<'a> {
        DeclarationRow {
            new,
            lineage_group_id: new.declaration.lineage_group_id,
            trial_remaining: None,
            base_source: PaymentSource::Trial,
            premium_source: PaymentSource::Trial,
            settlement: SettlementStatus::Unreserved,
            agreement_id: None,
        }
    }

    pub(crate) fn query(&self) -> Query<'a> {
        Query::insert("declaration", self.columns())
    }

    /// Every column with its value.
    fn columns(&self) -> Vec<(&'static str, crate::engine::Value<'a>)> {
        let (new, lineage_group_id, trial_remaining) = (self.new, self.lineage_group_id, self.trial_remaining);
        let (base_source, premium_source, settlement) = (self.base_source, self.premium_source, self.settlement);
        let d = &new.declaration;
        let t = d.template.as_ref();
        vec![
            ("dd_id", d.dd_id.value()),
            ("ee_id", d.ee_id.value()),
            ("agent_id", d.agent_id.value()),
            ("request_id", new.request_id.value()),
            ("lineage_group_id", lineage_group_id.value()),
            ("parent_dd_id", d.dd.parent_dd_id.value()),
            ("excluded_option_count", d.dd.excluded_option_count.value()),
            ("dd_unit_type", d.dd.unit_type.as_str().value()),
            ("dd_declaration_mode", d.dd.declaration_mode.as_str().value()),
            ("decision_type", d.dd.decision_type.as_str().value()),
            ("decision_action_type", d.dd.action_type.as_str().value()),
            ("origin_context_type", d.dd.origin_context.as_str().value()),
            ("selection_state", d.dd.selection_state.as_str().value()),
            ("selection_scope", d.dd.selection_scope.map(|s| s.as_str()).value()),
            ("decision_at", d.dd.decision_at.value()),
            ("ee_preset", d.ee.preset.as_deref().value()),
            ("ee_retention_period", d.ee.scope.retention.as_str().value()),
            ("ee_integrity_verification_level", d.ee.scope.integrity.as_str().value()),
            ("ee_disclosure_format_policy", d.ee.scope.disclosure.as_str().value()),
            ("ee_responsibility_scope", d.ee.scope.responsibility.as_str().value()),
            ("content_disclosure_scope", d.ee.scope.content_scope.as_str().value()),
            ("delegation_state", d.ee.scope.delegation.as_str().value()),
            ("ee_direct_access_period", d.ee.direct_access_period.to_string().value()),
            ("ee_direct_access_quota", d.ee.direct_access_quota.value()),
            ("access_class", d.ee.access_class.as_str().value()),
            ("direct_access_expires_at", new.direct_access_expires_at.value()),
            ("direct_reads_used", 0i64.value()),
            ("content_inclusion", d.content_inclusion.value()),
            ("tpl_decision_class", t.and_then(|t| t.decision_class).map(|v| v.as_str()).value()),
            ("tpl_decision_scale_value", t.and_then(|t| t.decision_scale_value.as_deref()).value()),
            ("tpl_decision_scale_unit", t.and_then(|t| t.decision_scale_unit.as_deref()).value()),
            ("tpl_target_class", t.and_then(|t| t.target_class).map(|v| v.as_str()).value()),
            ("tpl_call_chain", t.and_then(|t| t.call_chain.as_ref()).map(|c| c.join(",")).value()),
            ("tpl_self_classification", t.and_then(|t| t.self_classification.as_deref()).value()),
            ("tpl_decision_trigger", t.and_then(|t| t.decision_trigger).map(|v| v.as_str()).value()),
            ("tpl_human_involvement", t.and_then(|t| t.human_involvement).map(|v| v.as_str()).value()),
            ("anchored_at", d.anchored_at.value()),
            ("retention_expires_at", anchor_domain::retention::retention_end(d.ee.scope.retention, d.anchored_at).value()),
            ("salt", d.salt.as_slice().value()),
            ("pricing_version", d.pricing_version.as_str().value()),
            ("pricing_sha256", d.pricing_sha256.as_str().value()),
            ("dac_amount_milli", d.dac_amount.milli().value()),
            ("base_fee_milli", new.base_fee.milli().value()),
            ("subtotal_milli", new.subtotal.milli().value()),
            ("multiplier_permille", i64::from(new.multiplier_permille).value()),
            ("monthly_milli", new.monthly.milli().value()),
            ("base_fee_source", base_source.as_str().value()),
            ("premium_source", premium_source.as_str().value()),
            ("trial_remaining_after_milli", trial_remaining.value()),
            ("settlement_status", settlement.as_str().value()),
            ("payment_deadline", new.external.as_ref().map(|p| p.deadline).value()),
            ("agreement_id", self.agreement_id.value()),
        ]
    }

    /// Every column but `trial_remaining_after_milli`, for statements that
    /// compute the Trial left from the agent's balance as they debit it.
    pub(crate) fn columns_but_trial_left(&self) -> Vec<(&'static str, crate::engine::Value<'a>)> {
        self.columns().into_iter().filter(|(name, _)| *name != "trial_remaining_after_milli").collect()
    }

    /// A Trial-paid record as one statement (PostgreSQL): the debit and the
    /// insert, which takes the balance the debit left; no row if Trial
    /// cannot pay, a unique violation if the request_id was used.
    fn debit_and_insert(&self, amount: MilliDac, now: DateTime<Utc>) -> Query<'a> {
        let d = &self.new.declaration;
        let mut q = sql("with t as (update agent set trial_balance_milli = trial_balance_milli - ");
        let amount_p = q.placeholder(amount.milli());
        q.push(&amount_p).push(" where agent_id = ").push_bind(d.agent_id);
        q.push(" and trial_balance_milli >= ").push(&amount_p).push(" and trial_expires_at > ").push_bind(now);
        q.push(" returning trial_balance_milli) insert into declaration (");
        let columns = self.columns_but_trial_left();
        q.push(&columns.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ")).push(", trial_remaining_after_milli) select ");
        for (n, (_, value)) in columns.into_iter().enumerate() {
            if n > 0 {
                q.push(", ");
            }
            q.push_value(value);
        }
        q.push(", t.trial_balance_milli from t returning *");
        q
    }
}

pub(crate) fn decode_declaration(row: &impl Row) -> Result<StoredDeclaration> {
    let content_inclusion: bool = row.get("content_inclusion")?;
    let template = if content_inclusion {
        let call_chain: Option<String> = row.get("tpl_call_chain")?;
        Some(template::Template {
            decision_class: row.opt_named("tpl_decision_class")?,
            decision_scale_value: row.get("tpl_decision_scale_value")?,
            decision_scale_unit: row.get("tpl_decision_scale_unit")?,
            target_class: row.opt_named("tpl_target_class")?,
            call_chain: call_chain.map(|c| if c.is_empty() { Vec::new() } else { c.split(',').map(str::to_owned).collect() }),
            self_classification: row.get("tpl_self_classification")?,
            decision_trigger: row.opt_named("tpl_decision_trigger")?,
            human_involvement: row.opt_named("tpl_human_involvement")?,
        })
    } else {
        None
    };
    let period: String = row.get("ee_direct_access_period")?;
    let salt: Vec<u8> = row.get("salt")?;
    let multiplier: i64 = row.get("multiplier_permille")?;
    let declaration = Declaration {
        dd_id: row.get("dd_id")?,
        ee_id: row.get("ee_id")?,
        agent_id: row.get("agent_id")?,
        dd: dd::DdFields {
            unit_type: row.named("dd_unit_type")?,
            declaration_mode: row.named("dd_declaration_mode")?,
            decision_type: row.named("decision_type")?,
            action_type: row.named("decision_action_type")?,
            origin_context: row.named("origin_context_type")?,
            selection_state: row.named("selection_state")?,
            selection_scope: row.opt_named("selection_scope")?,
            decision_at: row.get("decision_at")?,
            parent_dd_id: row.get("parent_dd_id")?,
            excluded_option_count: row.get("excluded_option_count")?,
        },
        ee: ee::EeFields {
            preset: row.get("ee_preset")?,
            scope: ee::Scope {
                retention: row.named("ee_retention_period")?,
                integrity: row.named("ee_integrity_verification_level")?,
                disclosure: row.named("ee_disclosure_format_policy")?,
                responsibility: row.named("ee_responsibility_scope")?,
                content_scope: row.named("content_disclosure_scope")?,
                delegation: row.named("delegation_state")?,
            },
            direct_access_period: ee::AccessPeriod::parse(&period)
                .map_err(|_| StoreError::Corrupt(format!("ee_direct_access_period = {period:?}")))?,
            direct_access_quota: row.get("ee_direct_access_quota")?,
            access_class: row.named("access_class")?,
        },
        content_inclusion,
        template,
        anchored_at: row.get("anchored_at")?,
        lineage_group_id: row.get("lineage_group_id")?,
        pricing_version: row.get("pricing_version")?,
        pricing_sha256: row.get("pricing_sha256")?,
        dac_amount: MilliDac(row.get("dac_amount_milli")?),
        salt: hash32("salt", salt)?,
    };
    let trial_after: Option<i64> = row.get("trial_remaining_after_milli")?;
    Ok(StoredDeclaration {
        declaration,
        request_id: row.get("request_id")?,
        subtotal: MilliDac(row.get("subtotal_milli")?),
        base_fee: MilliDac(row.get("base_fee_milli")?),
        multiplier_permille: u32::try_from(multiplier).map_err(|_| StoreError::Corrupt(format!("multiplier_permille = {multiplier}")))?,
        monthly: MilliDac(row.get("monthly_milli")?),
        base_fee_source: row.named("base_fee_source")?,
        premium_source: row.named("premium_source")?,
        trial_remaining_after: trial_after.map(MilliDac),
        settlement_status: row.named("settlement_status")?,
        confirmed_at: row.get("confirmed_at")?,
        integrity_hash: row.get("integrity_hash")?,
        direct_reads_used: row.get("direct_reads_used")?,
        direct_access_expires_at: row.get("direct_access_expires_at")?,
        payment_deadline: row.get("payment_deadline")?,
        retention_expires_at: row.get("retention_expires_at")?,
        retention_demoted_at: row.get("retention_demoted_at")?,
        agreement_id: row.get("agreement_id")?,
    })
}

/// A confirmation as one statement (PostgreSQL, no payment to settle): the
/// record's update, its usage rows and its log leaf, each written only if the
/// update matched; the agent's id if it did.
fn confirm_in_one<'q>(dd_id: Uuid, integrity_hash: &'q str, now: DateTime<Utc>, usage: &'q [UsageEntry], leaf_data: &'q [u8]) -> Query<'q> {
    let mut q = sql("with d as (update declaration set confirmed_at = ");
    let (now_p, id_p) = (q.placeholder(now), q.placeholder(dd_id));
    q.push(&now_p).push(", integrity_hash = ").push_bind(integrity_hash);
    q.push(", settlement_status = 'settled' where dd_id = ").push(&id_p);
    q.push(" and confirmed_at is null and settlement_status <> 'released' returning agent_id)");
    for (n, entry) in usage.iter().enumerate() {
        let columns = payments::usage_columns(Subject::declaration(dd_id), None, entry, now);
        let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
        q.push(&format!(", u{n} as (insert into usage_entry (agent_id, {}) select d.agent_id", names.join(", ")));
        for (_, value) in columns {
            q.push(", ").push_value(value);
        }
        q.push(" from d)");
    }
    q.push(", l as (insert into log_pending (dd_id, leaf_data, enqueued_at) select ").push(&id_p).push(", ").push_bind(leaf_data);
    q.push(", ").push(&now_p).push(" from d) select agent_id from d");
    q
}

/// A confirmation's writes in a transaction: the record's update, the
/// payment's settlement (when `settlement_ref` names one), the usage rows and
/// the log leaf; `false`, with nothing written worth keeping, if the record
/// was not open to confirmation (the caller then drops the transaction).
pub(crate) async fn confirm_steps<X: Exec>(
    tx: &mut X,
    dd_id: Uuid,
    integrity_hash: &str,
    now: DateTime<Utc>,
    usage: &[UsageEntry],
    leaf_data: &[u8],
    settlement_ref: Option<&str>,
) -> Result<bool> {
    let agent_id: Option<Uuid> = tx
        .scalar_optional(
            sql("update declaration set confirmed_at = $1, integrity_hash = $2, settlement_status = 'settled' \
             where dd_id = $3 and confirmed_at is null and settlement_status <> 'released' returning agent_id")
            .bind(now)
            .bind(integrity_hash)
            .bind(dd_id),
        )
        .await?;
    let Some(agent_id) = agent_id else { return Ok(false) };
    let mut payment_id = None;
    if let Some(reference) = settlement_ref {
        let moved = payments::move_payment(tx, Key::Declaration(dd_id), PaymentStatus::Settled, None, Some(reference), now).await?;
        let Some(moved) = moved else { return Ok(false) };
        payment_id = Some(moved.payment_id);
    }
    for entry in usage {
        let paid_by = if entry.source == PaymentSource::External { payment_id } else { None };
        payments::insert_usage(tx, agent_id, Subject::declaration(dd_id), paid_by, entry, now).await?;
    }
    tx.execute(sql("insert into log_pending (dd_id, leaf_data, enqueued_at) values ($1, $2, $3)").bind(dd_id).bind(leaf_data).bind(now))
        .await?;
    Ok(true)
}
