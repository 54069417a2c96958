//! A declaration as a row: how a record is written (alone, or in a batch of
//! the group committer) and read back, and the steps of a record and of a
//! confirmation.
//! Shared by the declaration store and the group committer, below both.

use anchor_domain::MilliDac;
use anchor_domain::declarations::{Declaration, dd, ee, template};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::engine::{Bind, Exec, Query, Row, sql};
use crate::payments;
use crate::*;
use crate::{agents, earned};

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

    /// A record paid wholly over x402, with no parent: its payment pending
    /// until the confirmation settles it.
    pub(crate) fn paid_externally(new: &'a NewDeclaration) -> DeclarationRow<'a> {
        DeclarationRow {
            new,
            lineage_group_id: new.declaration.lineage_group_id,
            trial_remaining: None,
            base_source: PaymentSource::External,
            premium_source: PaymentSource::External,
            settlement: SettlementStatus::Pending,
            agreement_id: None,
        }
    }

    pub(crate) fn query(&self) -> Query<'a> {
        Query::insert("declaration", self.columns())
    }

    /// Every column with its value; `trace_key` only when the record has
    /// one, so that an unlinked record's insert names only the columns every
    /// build since 0001 has (see [`DeclarationRow::columns_with_trace_key`]).
    pub(crate) fn columns(&self) -> Vec<(&'static str, crate::engine::Value<'a>)> {
        let traced = self.new.declaration.trace_key.is_some();
        self.columns_with_trace_key(traced)
    }

    /// Every column with its value, `trace_key` (null when the record has
    /// none) when `with_trace_key`: the rows of one batched statement all name
    /// it when any of them has one.
    pub(crate) fn columns_with_trace_key(&self, with_trace_key: bool) -> Vec<(&'static str, crate::engine::Value<'a>)> {
        let (new, lineage_group_id, trial_remaining) = (self.new, self.lineage_group_id, self.trial_remaining);
        let (base_source, premium_source, settlement) = (self.base_source, self.premium_source, self.settlement);
        let d = &new.declaration;
        let t = d.template.as_ref();
        let mut columns = vec![
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
        ];
        if with_trace_key {
            columns.push(("trace_key", d.trace_key.as_ref().value()));
        }
        columns
    }

    /// Every column but `trial_remaining_after_milli`, for statements that
    /// compute the Trial left from the agent's balance as they debit it.
    pub(crate) fn columns_but_trial_left(&self) -> Vec<(&'static str, crate::engine::Value<'a>)> {
        self.columns().into_iter().filter(|(name, _)| *name != "trial_remaining_after_milli").collect()
    }

    /// [`DeclarationRow::columns_but_trial_left`], naming `trace_key` when `with_trace_key`.
    pub(crate) fn batch_columns_but_trial_left(&self, with_trace_key: bool) -> Vec<(&'static str, crate::engine::Value<'a>)> {
        self.columns_with_trace_key(with_trace_key).into_iter().filter(|(name, _)| *name != "trial_remaining_after_milli").collect()
    }

    /// A Trial-paid record as one statement (PostgreSQL): the debit and the
    /// insert, which takes the balance the debit left; no row if Trial
    /// cannot pay, a unique violation if the request_id was used.
    pub(crate) fn debit_and_insert(&self, amount: MilliDac, now: DateTime<Utc>) -> Query<'a> {
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
    // Absent from a schema before 0041 (this build playing an earlier one).
    let trace_key: Option<Vec<u8>> = if row.has_column("trace_key") { row.get("trace_key")? } else { None };
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
        trace_key: trace_key.map(|key| hash32("trace_key", key)).transpose()?,
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
pub(crate) fn confirm_in_one<'q>(
    dd_id: Uuid,
    integrity_hash: &'q str,
    now: DateTime<Utc>,
    usage: &'q [UsageEntry],
    leaf_data: &'q [u8],
) -> Query<'q> {
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
    let Some(agent_id) = confirm_record(tx, dd_id, integrity_hash, now, None).await? else { return Ok(false) };
    let mut payment_id = None;
    if let Some(reference) = settlement_ref {
        let moved =
            payments::move_payment(tx, payments::Key::Declaration(dd_id), PaymentStatus::Settled, None, Some(reference), now).await?;
        let Some(moved) = moved else { return Ok(false) };
        payment_id = Some(moved.payment_id);
    }
    confirmed_rest(tx, agent_id, dd_id, payment_id, usage, leaf_data, now).await?;
    Ok(true)
}

/// Marks a record confirmed (and settled) if it is neither confirmed nor
/// released, and (with `token_check`) its agent still holds that token:
/// its agent, if it was.
pub(crate) async fn confirm_record<X: Exec>(
    tx: &mut X,
    dd_id: Uuid,
    integrity_hash: &str,
    now: DateTime<Utc>,
    token_check: Option<&[u8; 32]>,
) -> Result<Option<Uuid>> {
    let mut q = sql("update declaration set confirmed_at = $1, integrity_hash = $2, settlement_status = 'settled' \
         where dd_id = $3 and confirmed_at is null and settlement_status <> 'released'")
    .bind(now)
    .bind(integrity_hash)
    .bind(dd_id);
    if let Some(token_hash) = token_check {
        q.push(" and (select a.token_hash from agent a where a.agent_id = declaration.agent_id) = ").push_bind(token_hash);
    }
    q.push(" returning agent_id");
    tx.scalar_optional(q).await
}

/// What follows a confirmed record's update: its usage rows (the external
/// ones naming `payment_id`) and its log leaf queued.
pub(crate) async fn confirmed_rest<X: Exec>(
    tx: &mut X,
    agent_id: Uuid,
    dd_id: Uuid,
    payment_id: Option<Uuid>,
    usage: &[UsageEntry],
    leaf_data: &[u8],
    now: DateTime<Utc>,
) -> Result<()> {
    for entry in usage {
        let paid_by = if entry.source == PaymentSource::External { payment_id } else { None };
        payments::insert_usage(tx, agent_id, Subject::declaration(dd_id), paid_by, entry, now).await?;
    }
    tx.execute(sql("insert into log_pending (dd_id, leaf_data, enqueued_at) values ($1, $2, $3)").bind(dd_id).bind(leaf_data).bind(now))
        .await?;
    Ok(())
}

/// A declaration's writes in `tx`, its parent (if any) already looked up:
/// the payment reserved (nonce and DAB), Trial and Earned DAC debited, the
/// record inserted (a bilateral agreement is the caller's). A refusal is answered with the writes
/// before it left in `tx`, for the caller to drop (or roll back to its
/// savepoint); a used request_id fails the insert (a unique key).
pub(crate) async fn record_steps<X: Exec>(
    tx: &mut X,
    for_update: &str,
    new: &NewDeclaration,
    lineage_group_id: Uuid,
    now: DateTime<Utc>,
) -> Result<Created> {
    let d = &new.declaration;
    let trial_remaining = if let Some(payment) = &new.external {
        let subject = Subject::declaration(d.dd_id);
        match payments::reserve(tx, for_update, payment, d.agent_id, subject, now).await? {
            Reservation::Reserved => {}
            Reservation::NonceUsed => return Ok(Created::PaymentReplayed),
            Reservation::DabReached { limit, spent } => return Ok(Created::DabReached { limit, spent }),
            // `reserve` itself never debits Earned DAC nor writes a pending record (only `reserve_payment` does),
            // and a declaration is no stay or session that closes.
            Reservation::EarnedShort { .. } | Reservation::Duplicate | Reservation::SubjectClosed => {
                return Err(StoreError::Corrupt("a declaration's reservation reported what only reserve_payment does".into()));
            }
        }
        if new.base_from_trial {
            match agents::debit_trial(tx, d.agent_id, new.base_fee, now).await? {
                Some(left) => Some(left),
                None => return Ok(Created::TrialCannotPay { balance: MilliDac::ZERO, expired: false }),
            }
        } else {
            None
        }
    } else {
        let earned_part = new.earned_premium.map_or(MilliDac::ZERO, |e| e.amount);
        let Some(trial_remaining) = agents::debit_trial(tx, d.agent_id, d.dac_amount - earned_part, now).await? else {
            let (balance, expired) = agents::trial_shortfall(tx, d.agent_id, now).await?;
            return Ok(Created::TrialCannotPay { balance, expired });
        };
        Some(trial_remaining)
    };
    if let Some(part) = new.earned_premium {
        let subject = Some(Subject::declaration(d.dd_id));
        let spend = earned::debit(tx, for_update, d.agent_id, part.amount, part.threshold, "declaration premium", subject, now);
        if let Some(balance) = spend.await?.shortfall() {
            return Ok(Created::EarnedShort { balance });
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
    let stored = tx.fetch_one(insert).await?;
    let record = Box::new(decode_declaration(&stored)?);
    if let Some(payment) = &new.external {
        tx.execute(sql("update x402_payment set dd_id = $1 where payment_id = $2").bind(d.dd_id).bind(payment.payment_id)).await?;
    }
    Ok(Created::New { trial_remaining: MilliDac(trial_remaining.unwrap_or(0)), record })
}
