//! The one body of SQL behind both stores. `store_impl!` expands it once for
//! SQLite and once for PostgreSQL, so each engine type-checks the same queries.

/// The columns of `declaration`, in the order `decode_declaration` reads them.
macro_rules! declaration_columns {
    () => {
        "dd_id, ee_id, agent_id, request_id, lineage_group_id, parent_dd_id, \
         dd_unit_type, dd_declaration_mode, decision_type, decision_action_type, origin_context_type, \
         selection_state, selection_scope, decision_at, \
         ee_preset, ee_retention_period, ee_integrity_verification_level, ee_disclosure_format_policy, \
         ee_responsibility_scope, content_disclosure_scope, delegation_state, ee_direct_access_period, \
         ee_direct_access_quota, access_class, direct_access_expires_at, direct_reads_used, \
         content_inclusion, tpl_decision_class, tpl_decision_scale_value, tpl_decision_scale_unit, tpl_target_class, \
         tpl_call_chain, tpl_self_classification, tpl_decision_trigger, tpl_human_involvement, \
         anchored_at, salt, pricing_version, pricing_sha256, dac_amount_milli, base_fee_milli, subtotal_milli, \
         multiplier_permille, monthly_milli, base_fee_source, premium_source, trial_remaining_after_milli, \
         settlement_status, confirmed_at, integrity_hash, payment_deadline"
    };
}
pub(crate) use declaration_columns;

macro_rules! agent_columns {
    () => {
        "agent_id, token_hash, region_code, disclosure_level, registered_at, trial_granted_milli, \
         trial_balance_milli, trial_expires_at"
    };
}
pub(crate) use agent_columns;

/// An agent's external spending since a time: reserved and settled payments count.
macro_rules! dab_spent_sql {
    () => {
        "select cast(coalesce(sum(amount_units), 0) as bigint) from x402_payment \
         where agent_id = $1 and status in ('reserved', 'settled') and created_at >= $2"
    };
}
pub(crate) use dab_spent_sql;

/// Parses a stored enum, or reports the row as corrupt.
pub(crate) fn parse<T>(column: &str, value: &str, f: impl Fn(&str) -> Option<T>) -> crate::Result<T> {
    f(value).ok_or_else(|| crate::StoreError::Corrupt(format!("{column} = {value:?}")))
}

pub(crate) fn hash32(column: &str, bytes: Vec<u8>) -> crate::Result<[u8; 32]> {
    bytes.try_into().map_err(|_| crate::StoreError::Corrupt(format!("{column} is not 32 bytes")))
}

/// Implements `Store` for `$store` (a struct with a `pool: Pool<$db>` field).
/// `$begin` is the statement that opens a write transaction.
macro_rules! store_impl {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $for_update:literal) => {
        use anchor_domain::MilliDac;
        use anchor_domain::agents::DisclosureLevel;
        use anchor_domain::declarations::{dd, ee, template, Declaration};
        use async_trait::async_trait;
        use chrono::{DateTime, Duration, Utc};
        use sqlx::Row;
        use uuid::Uuid;

        use crate::imp::{agent_columns, dab_spent_sql, declaration_columns, hash32, parse};
        use crate::*;

        type DbRow = <$db as sqlx::Database>::Row;

        fn decode_agent(row: &DbRow) -> Result<AgentRecord> {
            let level: String = row.try_get("disclosure_level")?;
            Ok(AgentRecord {
                agent_id: row.try_get("agent_id")?,
                token_hash: hash32("token_hash", row.try_get("token_hash")?)?,
                region_code: row.try_get("region_code")?,
                disclosure_level: parse("disclosure_level", &level, DisclosureLevel::parse)?,
                registered_at: row.try_get("registered_at")?,
                trial_granted: MilliDac(row.try_get("trial_granted_milli")?),
                trial_balance: MilliDac(row.try_get("trial_balance_milli")?),
                trial_expires_at: row.try_get("trial_expires_at")?,
            })
        }

        fn opt_enum<T>(row: &DbRow, column: &str, f: impl Fn(&str) -> Option<T>) -> Result<Option<T>> {
            let value: Option<String> = row.try_get(column)?;
            value.map(|v| parse(column, &v, f)).transpose()
        }

        fn req_enum<T>(row: &DbRow, column: &str, f: impl Fn(&str) -> Option<T>) -> Result<T> {
            let value: String = row.try_get(column)?;
            parse(column, &value, f)
        }

        fn decode_declaration(row: &DbRow) -> Result<StoredDeclaration> {
            let content_inclusion: bool = row.try_get("content_inclusion")?;
            let template = if content_inclusion {
                let call_chain: Option<String> = row.try_get("tpl_call_chain")?;
                Some(template::Template {
                    decision_class: opt_enum(row, "tpl_decision_class", template::DecisionClass::parse)?,
                    decision_scale_value: row.try_get("tpl_decision_scale_value")?,
                    decision_scale_unit: row.try_get("tpl_decision_scale_unit")?,
                    target_class: opt_enum(row, "tpl_target_class", template::TargetClass::parse)?,
                    call_chain: call_chain.map(|c| {
                        if c.is_empty() { Vec::new() } else { c.split(',').map(str::to_owned).collect() }
                    }),
                    self_classification: row.try_get("tpl_self_classification")?,
                    decision_trigger: opt_enum(row, "tpl_decision_trigger", template::Trigger::parse)?,
                    human_involvement: opt_enum(row, "tpl_human_involvement", template::HumanInvolvement::parse)?,
                })
            } else {
                None
            };
            let period: String = row.try_get("ee_direct_access_period")?;
            let salt: Vec<u8> = row.try_get("salt")?;
            let multiplier: i64 = row.try_get("multiplier_permille")?;
            let declaration = Declaration {
                dd_id: row.try_get("dd_id")?,
                ee_id: row.try_get("ee_id")?,
                agent_id: row.try_get("agent_id")?,
                dd: dd::DdFields {
                    unit_type: req_enum(row, "dd_unit_type", dd::UnitType::parse)?,
                    declaration_mode: req_enum(row, "dd_declaration_mode", dd::DeclarationMode::parse)?,
                    decision_type: req_enum(row, "decision_type", dd::DecisionType::parse)?,
                    action_type: req_enum(row, "decision_action_type", dd::ActionType::parse)?,
                    origin_context: req_enum(row, "origin_context_type", dd::OriginContext::parse)?,
                    selection_state: req_enum(row, "selection_state", dd::SelectionState::parse)?,
                    selection_scope: opt_enum(row, "selection_scope", dd::SelectionScope::parse)?,
                    decision_at: row.try_get("decision_at")?,
                    parent_dd_id: row.try_get("parent_dd_id")?,
                },
                ee: ee::EeFields {
                    preset: row.try_get("ee_preset")?,
                    scope: ee::Scope {
                        retention: req_enum(row, "ee_retention_period", ee::Retention::parse)?,
                        integrity: req_enum(row, "ee_integrity_verification_level", ee::Integrity::parse)?,
                        disclosure: req_enum(row, "ee_disclosure_format_policy", ee::Disclosure::parse)?,
                        responsibility: req_enum(row, "ee_responsibility_scope", ee::Responsibility::parse)?,
                        content_scope: req_enum(row, "content_disclosure_scope", ee::ContentScope::parse)?,
                        delegation: req_enum(row, "delegation_state", ee::Delegation::parse)?,
                    },
                    direct_access_period: ee::AccessPeriod::parse(&period)
                        .map_err(|_| StoreError::Corrupt(format!("ee_direct_access_period = {period:?}")))?,
                    direct_access_quota: row.try_get("ee_direct_access_quota")?,
                    access_class: req_enum(row, "access_class", ee::AccessClass::parse)?,
                },
                content_inclusion,
                template,
                anchored_at: row.try_get("anchored_at")?,
                lineage_group_id: row.try_get("lineage_group_id")?,
                pricing_version: row.try_get("pricing_version")?,
                pricing_sha256: row.try_get("pricing_sha256")?,
                dac_amount: MilliDac(row.try_get("dac_amount_milli")?),
                salt: hash32("salt", salt)?,
            };
            let trial_after: Option<i64> = row.try_get("trial_remaining_after_milli")?;
            Ok(StoredDeclaration {
                declaration,
                request_id: row.try_get("request_id")?,
                subtotal: MilliDac(row.try_get("subtotal_milli")?),
                base_fee: MilliDac(row.try_get("base_fee_milli")?),
                multiplier_permille: u32::try_from(multiplier)
                    .map_err(|_| StoreError::Corrupt(format!("multiplier_permille = {multiplier}")))?,
                monthly: MilliDac(row.try_get("monthly_milli")?),
                base_fee_source: req_enum(row, "base_fee_source", PaymentSource::parse)?,
                premium_source: req_enum(row, "premium_source", PaymentSource::parse)?,
                trial_remaining_after: trial_after.map(MilliDac),
                settlement_status: row.try_get("settlement_status")?,
                confirmed_at: row.try_get("confirmed_at")?,
                integrity_hash: row.try_get("integrity_hash")?,
                direct_reads_used: row.try_get("direct_reads_used")?,
                direct_access_expires_at: row.try_get("direct_access_expires_at")?,
                payment_deadline: row.try_get("payment_deadline")?,
            })
        }

        fn is_unique_violation(error: &sqlx::Error) -> bool {
            matches!(error, sqlx::Error::Database(db) if db.is_unique_violation())
        }

        impl $store {
            async fn begin_write(&self) -> Result<sqlx::Transaction<'static, $db>> {
                Ok(self.pool.begin_with($begin).await?)
            }

            async fn declaration_for_request(&self, agent_id: Uuid, request_id: Uuid) -> Result<Option<StoredDeclaration>> {
                let row = sqlx::query(concat!(
                    "select ", declaration_columns!(), " from declaration where agent_id = $1 and request_id = $2"
                ))
                .bind(agent_id)
                .bind(request_id)
                .fetch_optional(&self.pool)
                .await?;
                row.as_ref().map(decode_declaration).transpose()
            }
        }

        #[async_trait]
        impl Store for $store {
            fn backend(&self) -> &'static str {
                $backend
            }

            async fn ping(&self) -> Result<()> {
                sqlx::query("select 1").execute(&self.pool).await?;
                Ok(())
            }

            async fn insert_agent(&self, agent: &NewAgent) -> Result<()> {
                sqlx::query(
                    "insert into agent (agent_id, token_hash, recovery_hash, region_code, registered_at, \
                     trial_granted_milli, trial_balance_milli, trial_expires_at) values ($1, $2, $3, $4, $5, $6, $6, $7)",
                )
                .bind(agent.agent_id)
                .bind(agent.token_hash.to_vec())
                .bind(agent.recovery_hash.to_vec())
                .bind(agent.region_code.as_deref())
                .bind(agent.registered_at)
                .bind(agent.trial_granted.milli())
                .bind(agent.trial_expires_at)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn agent(&self, agent_id: Uuid) -> Result<Option<AgentRecord>> {
                let row = sqlx::query(concat!("select ", agent_columns!(), " from agent where agent_id = $1"))
                    .bind(agent_id)
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(decode_agent).transpose()
            }

            async fn agent_by_token_hash(&self, token_hash: &[u8; 32]) -> Result<Option<AgentRecord>> {
                let row = sqlx::query(concat!("select ", agent_columns!(), " from agent where token_hash = $1"))
                    .bind(token_hash.to_vec())
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(decode_agent).transpose()
            }

            async fn rotate_credentials(
                &self,
                agent_id: Uuid,
                current_token_hash: &[u8; 32],
                new_token_hash: &[u8; 32],
                new_recovery_hash: &[u8; 32],
            ) -> Result<bool> {
                let done = sqlx::query(
                    "update agent set token_hash = $1, recovery_hash = $2 where agent_id = $3 and token_hash = $4",
                )
                .bind(new_token_hash.to_vec())
                .bind(new_recovery_hash.to_vec())
                .bind(agent_id)
                .bind(current_token_hash.to_vec())
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn recover_credentials(
                &self,
                agent_id: Uuid,
                recovery_hash: &[u8; 32],
                new_token_hash: &[u8; 32],
                new_recovery_hash: &[u8; 32],
                now: DateTime<Utc>,
                limit: AttemptLimit,
            ) -> Result<Recovery> {
                // The right key is tried first and is never limited: the
                // limit only counts wrong keys, so nobody can lock an agent's
                // holder out by guessing at its (public) agent_id.
                let done = sqlx::query(
                    "update agent set token_hash = $1, recovery_hash = $2 where agent_id = $3 and recovery_hash = $4",
                )
                .bind(new_token_hash.to_vec())
                .bind(new_recovery_hash.to_vec())
                .bind(agent_id)
                .bind(recovery_hash.to_vec())
                .execute(&self.pool)
                .await?;
                if done.rows_affected() == 1 {
                    return Ok(Recovery::Recovered);
                }
                Ok(match self.reserve_attempt(limit, &agent_id.to_string(), now).await? {
                    Attempt::Reserved => Recovery::Refused,
                    Attempt::Spent { .. } => Recovery::RateLimited,
                })
            }

            async fn reserve_attempt(&self, limit: AttemptLimit, subject: &str, now: DateTime<Utc>) -> Result<Attempt> {
                // One statement: a row whose window ended starts a new one at
                // one attempt; otherwise the count rises only while it is
                // under the limit. PostgreSQL locks the conflicting row and
                // re-checks the condition, SQLite has one writer: either way
                // concurrent attempts count one after another.
                let window_open_after = now - limit.window;
                let used: Option<i64> = sqlx::query_scalar(
                    "insert into attempt_window (scope, subject, window_start, used) values ($1, $2, $3, 1) \
                     on conflict (scope, subject) do update set \
                     window_start = case when attempt_window.window_start <= $4 then excluded.window_start else attempt_window.window_start end, \
                     used = case when attempt_window.window_start <= $4 then 1 else attempt_window.used + 1 end \
                     where attempt_window.window_start <= $4 or attempt_window.used < $5 \
                     returning cast(used as bigint)",
                )
                .bind(limit.scope)
                .bind(subject)
                .bind(now)
                .bind(window_open_after)
                .bind(limit.max)
                .fetch_optional(&self.pool)
                .await?;
                if used.is_some() {
                    return Ok(Attempt::Reserved);
                }
                let start: Option<DateTime<Utc>> =
                    sqlx::query_scalar("select window_start from attempt_window where scope = $1 and subject = $2")
                        .bind(limit.scope)
                        .bind(subject)
                        .fetch_optional(&self.pool)
                        .await?;
                Ok(Attempt::Spent { retry_at: start.unwrap_or(now) + limit.window })
            }

            async fn release_attempt(&self, limit: AttemptLimit, subject: &str, now: DateTime<Utc>) -> Result<()> {
                sqlx::query(
                    "update attempt_window set used = used - 1 \
                     where scope = $1 and subject = $2 and used > 0 and window_start > $3",
                )
                .bind(limit.scope)
                .bind(subject)
                .bind(now - limit.window)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn set_disclosure_level(&self, agent_id: Uuid, level: DisclosureLevel) -> Result<()> {
                sqlx::query("update agent set disclosure_level = $1 where agent_id = $2")
                    .bind(level.as_str())
                    .bind(agent_id)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn classifications_for_agent(&self, agent_id: Uuid) -> Result<Vec<Classification>> {
                let rows = sqlx::query(
                    "select classification_id, owner_id, classification_key, classification_label, description \
                     from classification c where active = $1 and (owner_id is null \
                     or owner_id = (select owner_id from agent where agent_id = $2)) \
                     order by owner_id is not null, classification_key",
                )
                .bind(true)
                .bind(agent_id)
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        Ok(Classification {
                            classification_id: row.try_get("classification_id")?,
                            owner_id: row.try_get("owner_id")?,
                            key: row.try_get("classification_key")?,
                            label: row.try_get("classification_label")?,
                            description: row.try_get("description")?,
                        })
                    })
                    .collect()
            }

            async fn create_declaration(&self, new: &NewDeclaration, now: DateTime<Utc>) -> Result<Created> {
                let d = &new.declaration;
                if let Some(earlier) = self.declaration_for_request(d.agent_id, new.request_id).await? {
                    return Ok(Created::Replayed(Box::new(earlier)));
                }
                let mut tx = self.begin_write().await?;
                let mut lineage_group_id = d.lineage_group_id;
                if let Some(parent) = d.dd.parent_dd_id {
                    let row = sqlx::query("select agent_id, lineage_group_id from declaration where dd_id = $1")
                        .bind(parent)
                        .fetch_optional(&mut *tx)
                        .await?;
                    let Some(row) = row else { return Ok(Created::ParentNotFound) };
                    let parent_agent: Uuid = row.try_get("agent_id")?;
                    if parent_agent != d.agent_id {
                        return Ok(Created::ParentForeign);
                    }
                    lineage_group_id = row.try_get("lineage_group_id")?;
                }
                let trial_remaining = if let Some(payment) = &new.external {
                    // The budget check and the reservation share this transaction;
                    // on PostgreSQL the agent row's lock makes concurrent payments
                    // of one agent count one after another.
                    let row = sqlx::query(concat!("select dab_limit_milli from agent where agent_id = $1", $for_update))
                        .bind(d.agent_id)
                        .fetch_one(&mut *tx)
                        .await?;
                    let own: Option<i64> = row.try_get("dab_limit_milli")?;
                    let limit = own.unwrap_or(payment.dab_default.milli());
                    let spent: i64 = sqlx::query_scalar(
                        dab_spent_sql!(),
                    )
                    .bind(d.agent_id)
                    .bind(payment.period_start)
                    .fetch_one(&mut *tx)
                    .await?;
                    if spent + payment.amount_units > limit {
                        return Ok(Created::DabReached { limit: MilliDac(limit), spent: MilliDac(spent) });
                    }
                    // The nonce's unique constraint is the replay guard, on every host.
                    let reserved = sqlx::query(
                        "insert into x402_payment (payment_id, network, asset, payer, nonce, amount_units, pay_to, \
                         valid_after, valid_before, route, agent_id, dd_id, payload, status, created_at, updated_at) \
                         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, null, $12, 'reserved', $13, $13)",
                    )
                    .bind(payment.payment_id)
                    .bind(payment.network.as_str())
                    .bind(payment.asset.as_str())
                    .bind(payment.payer.as_str())
                    .bind(payment.nonce.as_str())
                    .bind(payment.amount_units)
                    .bind(payment.pay_to.as_str())
                    .bind(payment.valid_after)
                    .bind(payment.valid_before)
                    .bind(payment.route.as_str())
                    .bind(d.agent_id)
                    .bind(payment.payload.as_str())
                    .bind(now)
                    .execute(&mut *tx)
                    .await;
                    match reserved {
                        Ok(_) => {}
                        Err(error) if is_unique_violation(&error) => return Ok(Created::PaymentReplayed),
                        Err(error) => return Err(error.into()),
                    }
                    sqlx::query("insert into x402_payment_event (payment_id, status, reason, at) values ($1, 'reserved', null, $2)")
                        .bind(payment.payment_id)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                    if new.base_from_trial {
                        let debited: Option<i64> = sqlx::query_scalar(
                            "update agent set trial_balance_milli = trial_balance_milli - $1 \
                             where agent_id = $2 and trial_balance_milli >= $1 and trial_expires_at > $3 \
                             returning trial_balance_milli",
                        )
                        .bind(new.base_fee.milli())
                        .bind(d.agent_id)
                        .bind(now)
                        .fetch_optional(&mut *tx)
                        .await?;
                        match debited {
                            Some(left) => Some(left),
                            None => return Ok(Created::TrialCannotPay { balance: MilliDac::ZERO, expired: false }),
                        }
                    } else {
                        None
                    }
                } else {
                // The debit and its condition are one statement: it cannot race.
                let debited: Option<i64> = sqlx::query_scalar(
                    "update agent set trial_balance_milli = trial_balance_milli - $1 \
                     where agent_id = $2 and trial_balance_milli >= $1 and trial_expires_at > $3 \
                     returning trial_balance_milli",
                )
                .bind(d.dac_amount.milli())
                .bind(d.agent_id)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(trial_remaining) = debited else {
                    let row = sqlx::query("select trial_balance_milli, trial_expires_at from agent where agent_id = $1")
                        .bind(d.agent_id)
                        .fetch_one(&mut *tx)
                        .await?;
                    let expires: DateTime<Utc> = row.try_get("trial_expires_at")?;
                    return Ok(Created::TrialCannotPay {
                        balance: MilliDac(row.try_get("trial_balance_milli")?),
                        expired: expires <= now,
                    });
                };
                Some(trial_remaining)
                };
                let (base_source, premium_source) = match (&new.external, new.base_from_trial) {
                    (None, _) => (PaymentSource::Trial, PaymentSource::Trial),
                    (Some(_), true) => (PaymentSource::Trial, PaymentSource::External),
                    (Some(_), false) => (PaymentSource::External, PaymentSource::External),
                };
                let settlement = if new.external.is_some() { "pending" } else { "unreserved" };
                let t = d.template.as_ref();
                let inserted = sqlx::query(concat!(
                    "insert into declaration (", declaration_columns!(), ") values (",
                    "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, ",
                    "$21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35, $36, $37, $38, $39, $40, ",
                    "$41, $42, $43, $44, $45, $46, $47, $48, $49, $50, $51)"
                ))
                .bind(d.dd_id)
                .bind(d.ee_id)
                .bind(d.agent_id)
                .bind(new.request_id)
                .bind(lineage_group_id)
                .bind(d.dd.parent_dd_id)
                .bind(d.dd.unit_type.as_str())
                .bind(d.dd.declaration_mode.as_str())
                .bind(d.dd.decision_type.as_str())
                .bind(d.dd.action_type.as_str())
                .bind(d.dd.origin_context.as_str())
                .bind(d.dd.selection_state.as_str())
                .bind(d.dd.selection_scope.map(|s| s.as_str()))
                .bind(d.dd.decision_at)
                .bind(d.ee.preset.as_deref())
                .bind(d.ee.scope.retention.as_str())
                .bind(d.ee.scope.integrity.as_str())
                .bind(d.ee.scope.disclosure.as_str())
                .bind(d.ee.scope.responsibility.as_str())
                .bind(d.ee.scope.content_scope.as_str())
                .bind(d.ee.scope.delegation.as_str())
                .bind(d.ee.direct_access_period.to_string())
                .bind(d.ee.direct_access_quota)
                .bind(d.ee.access_class.as_str())
                .bind(new.direct_access_expires_at)
                .bind(0i64)
                .bind(d.content_inclusion)
                .bind(t.and_then(|t| t.decision_class).map(|v| v.as_str()))
                .bind(t.and_then(|t| t.decision_scale_value.clone()))
                .bind(t.and_then(|t| t.decision_scale_unit.clone()))
                .bind(t.and_then(|t| t.target_class).map(|v| v.as_str()))
                .bind(t.and_then(|t| t.call_chain.as_ref()).map(|c| c.join(",")))
                .bind(t.and_then(|t| t.self_classification.clone()))
                .bind(t.and_then(|t| t.decision_trigger).map(|v| v.as_str()))
                .bind(t.and_then(|t| t.human_involvement).map(|v| v.as_str()))
                .bind(d.anchored_at)
                .bind(d.salt.to_vec())
                .bind(d.pricing_version.as_str())
                .bind(d.pricing_sha256.as_str())
                .bind(d.dac_amount.milli())
                .bind(new.base_fee.milli())
                .bind(new.subtotal.milli())
                .bind(i64::from(new.multiplier_permille))
                .bind(new.monthly.milli())
                .bind(base_source.as_str())
                .bind(premium_source.as_str())
                .bind(trial_remaining)
                .bind(settlement)
                .bind(None::<DateTime<Utc>>)
                .bind(None::<String>)
                .bind(new.external.as_ref().map(|p| p.deadline))
                .execute(&mut *tx)
                .await;
                match inserted {
                    Ok(_) => {
                        if let Some(payment) = &new.external {
                            sqlx::query("update x402_payment set dd_id = $1 where payment_id = $2")
                                .bind(d.dd_id)
                                .bind(payment.payment_id)
                                .execute(&mut *tx)
                                .await?;
                        }
                        tx.commit().await?;
                        Ok(Created::New { trial_remaining: MilliDac(trial_remaining.unwrap_or(0)) })
                    }
                    // A concurrent request with the same request_id won: drop our
                    // debit with the transaction and answer with its record.
                    Err(error) if is_unique_violation(&error) => {
                        tx.rollback().await?;
                        match self.declaration_for_request(d.agent_id, new.request_id).await? {
                            Some(earlier) => Ok(Created::Replayed(Box::new(earlier))),
                            None => Err(error.into()),
                        }
                    }
                    Err(error) => Err(error.into()),
                }
            }

            async fn declaration(&self, dd_id: Uuid) -> Result<Option<StoredDeclaration>> {
                let row = sqlx::query(concat!("select ", declaration_columns!(), " from declaration where dd_id = $1"))
                    .bind(dd_id)
                    .fetch_optional(&self.pool)
                    .await?;
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
                let mut tx = self.begin_write().await?;
                let agent_id: Option<Uuid> = sqlx::query_scalar(
                    "update declaration set confirmed_at = $1, integrity_hash = $2, settlement_status = 'settled' \
                     where dd_id = $3 and confirmed_at is null and settlement_status <> 'released' returning agent_id",
                )
                .bind(now)
                .bind(integrity_hash)
                .bind(dd_id)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(agent_id) = agent_id else { return Ok(false) };
                if let Some(reference) = settlement_ref {
                    let payment: Option<Uuid> = sqlx::query_scalar(
                        "update x402_payment set status = 'settled', settlement_ref = $1, updated_at = $2 \
                         where dd_id = $3 and status in ('reserved', 'settle_unknown') returning payment_id",
                    )
                    .bind(reference)
                    .bind(now)
                    .bind(dd_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                    let Some(payment) = payment else { return Ok(false) };
                    sqlx::query("insert into x402_payment_event (payment_id, status, reason, at) values ($1, 'settled', null, $2)")
                        .bind(payment)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                }
                for entry in usage {
                    sqlx::query(
                        "insert into usage_entry (usage_id, agent_id, dd_id, cost_component, payment_source, amount_milli, recorded_at) \
                         values ($1, $2, $3, $4, $5, $6, $7)",
                    )
                    .bind(Uuid::new_v4())
                    .bind(agent_id)
                    .bind(dd_id)
                    .bind(entry.cost_component)
                    .bind(entry.source.as_str())
                    .bind(entry.amount.milli())
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                }
                sqlx::query("insert into log_pending (dd_id, leaf_data, enqueued_at) values ($1, $2, $3)")
                    .bind(dd_id)
                    .bind(leaf_data)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn consume_direct_read(&self, dd_id: Uuid, now: DateTime<Utc>) -> Result<DirectRead> {
                let left: Option<i64> = sqlx::query_scalar(
                    "update declaration set direct_reads_used = direct_reads_used + 1 \
                     where dd_id = $1 and direct_reads_used < ee_direct_access_quota and direct_access_expires_at > $2 \
                     returning ee_direct_access_quota - direct_reads_used",
                )
                .bind(dd_id)
                .bind(now)
                .fetch_optional(&self.pool)
                .await?;
                if let Some(remaining) = left {
                    return Ok(DirectRead::Granted { remaining });
                }
                let expires: DateTime<Utc> =
                    sqlx::query_scalar("select direct_access_expires_at from declaration where dd_id = $1")
                        .bind(dd_id)
                        .fetch_one(&self.pool)
                        .await?;
                Ok(if expires <= now { DirectRead::Expired } else { DirectRead::Exhausted })
            }

            async fn list_declarations(&self, agent_id: Uuid, filter: ListFilter) -> Result<(Vec<StoredDeclaration>, i64)> {
                // Bounds that compare correctly as text on SQLite as well.
                let far_past = DateTime::<Utc>::UNIX_EPOCH;
                let far_future = "9999-12-31T23:59:59Z".parse::<DateTime<Utc>>().unwrap_or(DateTime::<Utc>::MAX_UTC);
                let from = filter.from.unwrap_or(far_past);
                let to = filter.to.unwrap_or(far_future);
                let rows = sqlx::query(concat!(
                    "select ", declaration_columns!(), " from declaration \
                     where agent_id = $1 and anchored_at >= $2 and anchored_at <= $3 \
                     order by anchored_at desc, dd_id desc limit $4 offset $5"
                ))
                .bind(agent_id)
                .bind(from)
                .bind(to)
                .bind(filter.limit)
                .bind(filter.offset)
                .fetch_all(&self.pool)
                .await?;
                let total: i64 = sqlx::query_scalar(
                    "select count(*) from declaration where agent_id = $1 and anchored_at >= $2 and anchored_at <= $3",
                )
                .bind(agent_id)
                .bind(from)
                .bind(to)
                .fetch_one(&self.pool)
                .await?;
                Ok((rows.iter().map(decode_declaration).collect::<Result<_>>()?, total))
            }

            async fn lineage_group(&self, agent_id: Uuid, group_id: Uuid) -> Result<Vec<StoredDeclaration>> {
                let rows = sqlx::query(concat!(
                    "select ", declaration_columns!(), " from declaration \
                     where agent_id = $1 and lineage_group_id = $2 order by anchored_at, dd_id"
                ))
                .bind(agent_id)
                .bind(group_id)
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(decode_declaration).collect()
            }

            async fn usage_for_declaration(&self, dd_id: Uuid) -> Result<Vec<UsageEntry>> {
                let rows = sqlx::query(
                    "select cost_component, payment_source, amount_milli from usage_entry where dd_id = $1 order by cost_component",
                )
                .bind(dd_id)
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        let component: String = row.try_get("cost_component")?;
                        Ok(UsageEntry {
                            cost_component: match component.as_str() {
                                "base_fee" => "base_fee",
                                "premium" => "premium",
                                other => return Err(StoreError::Corrupt(format!("cost_component = {other:?}"))),
                            },
                            source: req_enum(row, "payment_source", PaymentSource::parse)?,
                            amount: MilliDac(row.try_get("amount_milli")?),
                        })
                    })
                    .collect()
            }

            async fn close_payment(
                &self,
                dd_id: Uuid,
                declaration_status: &str,
                payment_status: &str,
                reason: &str,
                now: DateTime<Utc>,
            ) -> Result<bool> {
                let mut tx = self.begin_write().await?;
                let released = sqlx::query(
                    "update declaration set settlement_status = $1 where dd_id = $2 and settlement_status = 'pending' and confirmed_at is null",
                )
                .bind(declaration_status)
                .bind(dd_id)
                .execute(&mut *tx)
                .await?;
                if released.rows_affected() == 0 {
                    return Ok(false);
                }
                let payment: Option<Uuid> = sqlx::query_scalar(
                    "update x402_payment set status = $1, error_reason = $2, updated_at = $3 \
                     where dd_id = $4 and status in ('reserved', 'settle_unknown') returning payment_id",
                )
                .bind(payment_status)
                .bind(reason)
                .bind(now)
                .bind(dd_id)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some(payment) = payment {
                    sqlx::query("insert into x402_payment_event (payment_id, status, reason, at) values ($1, $2, $3, $4)")
                        .bind(payment)
                        .bind(payment_status)
                        .bind(reason)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(true)
            }

            async fn unknown_settlements(&self, limit: i64) -> Result<Vec<Uuid>> {
                let rows = sqlx::query("select dd_id from x402_payment where status = 'settle_unknown' and dd_id is not null order by updated_at limit $1")
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(|r| Ok(r.try_get("dd_id")?)).collect()
            }

            async fn mark_settlement_unknown(&self, dd_id: Uuid, detail: &str, now: DateTime<Utc>) -> Result<bool> {
                let mut tx = self.begin_write().await?;
                let payment: Option<Uuid> = sqlx::query_scalar(
                    "update x402_payment set status = 'settle_unknown', error_reason = $1, updated_at = $2 \
                     where dd_id = $3 and status in ('reserved', 'settle_unknown') returning payment_id",
                )
                .bind(detail)
                .bind(now)
                .bind(dd_id)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(payment) = payment else { return Ok(false) };
                sqlx::query("insert into x402_payment_event (payment_id, status, reason, at) values ($1, 'settle_unknown', $2, $3)")
                    .bind(payment)
                    .bind(detail)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn payment_for(&self, dd_id: Uuid) -> Result<Option<PaymentRecord>> {
                let row = sqlx::query(
                    "select payment_id, network, asset, payer, amount_units, pay_to, status, error_reason, settlement_ref, \
                     payload, created_at, updated_at from x402_payment where dd_id = $1",
                )
                .bind(dd_id)
                .fetch_optional(&self.pool)
                .await?;
                let Some(row) = row else { return Ok(None) };
                let payment_id: Uuid = row.try_get("payment_id")?;
                let events = sqlx::query("select status, reason, at from x402_payment_event where payment_id = $1 \
                     order by at, case status when 'reserved' then 0 when 'settle_unknown' then 1 else 2 end")
                    .bind(payment_id)
                    .fetch_all(&self.pool)
                    .await?;
                Ok(Some(PaymentRecord {
                    payment_id,
                    network: row.try_get("network")?,
                    asset: row.try_get("asset")?,
                    payer: row.try_get("payer")?,
                    amount_units: row.try_get("amount_units")?,
                    pay_to: row.try_get("pay_to")?,
                    status: row.try_get("status")?,
                    error_reason: row.try_get("error_reason")?,
                    settlement_ref: row.try_get("settlement_ref")?,
                    payload: row.try_get("payload")?,
                    created_at: row.try_get("created_at")?,
                    updated_at: row.try_get("updated_at")?,
                    history: events
                        .iter()
                        .map(|e| Ok((e.try_get("status")?, e.try_get("reason")?, e.try_get("at")?)))
                        .collect::<Result<_>>()?,
                }))
            }

            async fn dab_status(&self, agent_id: Uuid, period_start: DateTime<Utc>) -> Result<DabStatus> {
                let own: Option<i64> = sqlx::query_scalar("select dab_limit_milli from agent where agent_id = $1")
                    .bind(agent_id)
                    .fetch_one(&self.pool)
                    .await?;
                let spent: i64 = sqlx::query_scalar(
                    dab_spent_sql!(),
                )
                .bind(agent_id)
                .bind(period_start)
                .fetch_one(&self.pool)
                .await?;
                Ok(DabStatus { own_limit: own.map(MilliDac), spent: MilliDac(spent) })
            }

            async fn acquire_log_lease(&self, holder: Uuid, now: DateTime<Utc>, ttl: Duration) -> Result<bool> {
                let done = sqlx::query(
                    "update log_lease set holder = $1, expires_at = $2 \
                     where log_lease_id = 0 and (holder = $1 or holder is null or expires_at < $3)",
                )
                .bind(holder)
                .bind(now + ttl)
                .bind(now)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn integrate_log(&self, max: i64, now: DateTime<Utc>, planner: Planner<'_>) -> Result<Option<LogState>> {
                let mut tx = self.begin_write().await?;
                // The head's row lock serializes integrators: whoever holds it
                // plans from the head as stored, so two integrators cannot fork.
                let row = sqlx::query(concat!("select size, root, edge from log_state where log_state_id = 0", $for_update))
                    .fetch_one(&mut *tx)
                    .await?;
                let state = decode_state(&row)?;
                let rows = sqlx::query("select dd_id, leaf_data from log_pending order by enqueued_at, dd_id limit $1")
                    .bind(max)
                    .fetch_all(&mut *tx)
                    .await?;
                if rows.is_empty() {
                    return Ok(None);
                }
                let batch = rows
                    .iter()
                    .map(|r| Ok(PendingLeaf { dd_id: r.try_get("dd_id")?, leaf_data: r.try_get("leaf_data")? }))
                    .collect::<Result<Vec<_>>>()?;
                let plan = planner(&state, &batch).map_err(StoreError::Corrupt)?;
                for chunk in plan.entries.chunks(500) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new("insert into log_entry (leaf_index, dd_id, leaf_data, integrated_at) ");
                    insert.push_values(chunk, |mut row, (index, dd_id, leaf)| {
                        row.push_bind(*index).push_bind(*dd_id).push_bind(leaf.clone()).push_bind(now);
                    });
                    insert.build().execute(&mut *tx).await?;
                }
                for chunk in plan.hashes.chunks(500) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new("insert into log_hash (hash_index, hash) ");
                    insert.push_values(chunk, |mut row, (index, hash)| {
                        row.push_bind(*index).push_bind(hash.to_vec());
                    });
                    insert.build().execute(&mut *tx).await?;
                }
                for chunk in batch.chunks(500) {
                    let mut delete = sqlx::QueryBuilder::<$db>::new("delete from log_pending where dd_id in (");
                    let mut ids = delete.separated(", ");
                    for leaf in chunk {
                        ids.push_bind(leaf.dd_id);
                    }
                    delete.push(")");
                    delete.build().execute(&mut *tx).await?;
                }
                let edge: Vec<u8> = plan.state.edge.iter().flatten().copied().collect();
                sqlx::query("update log_state set size = $1, root = $2, edge = $3, updated_at = $4 where log_state_id = 0 and size = $5")
                    .bind(plan.state.size)
                    .bind(plan.state.root.to_vec())
                    .bind(edge)
                    .bind(now)
                    .bind(state.size)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(Some(plan.state))
            }

            async fn log_state(&self) -> Result<LogState> {
                let row = sqlx::query("select size, root, edge from log_state where log_state_id = 0").fetch_one(&self.pool).await?;
                decode_state(&row)
            }

            async fn log_hashes(&self, indexes: &[i64]) -> Result<Vec<(i64, [u8; 32])>> {
                let mut out = Vec::with_capacity(indexes.len());
                for chunk in indexes.chunks(500) {
                    let mut select = sqlx::QueryBuilder::<$db>::new("select hash_index, hash from log_hash where hash_index in (");
                    let mut ids = select.separated(", ");
                    for index in chunk {
                        ids.push_bind(*index);
                    }
                    select.push(")");
                    for row in select.build().fetch_all(&self.pool).await? {
                        out.push((row.try_get("hash_index")?, hash32("hash", row.try_get("hash")?)?));
                    }
                }
                Ok(out)
            }

            async fn log_entry_for(&self, dd_id: Uuid) -> Result<Option<(i64, Vec<u8>)>> {
                let row = sqlx::query("select leaf_index, leaf_data from log_entry where dd_id = $1")
                    .bind(dd_id)
                    .fetch_optional(&self.pool)
                    .await?;
                row.map(|r| Ok((r.try_get("leaf_index")?, r.try_get("leaf_data")?))).transpose()
            }

            async fn log_entries(&self, from: i64, count: i64) -> Result<Vec<Vec<u8>>> {
                let rows = sqlx::query("select leaf_data from log_entry where leaf_index >= $1 and leaf_index < $2 order by leaf_index")
                    .bind(from)
                    .bind(from + count)
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(|r| Ok(r.try_get("leaf_data")?)).collect()
            }

            async fn log_pending_count(&self) -> Result<i64> {
                Ok(sqlx::query_scalar("select count(*) from log_pending").fetch_one(&self.pool).await?)
            }

            async fn insert_checkpoint(&self, c: &CheckpointRecord) -> Result<()> {
                sqlx::query("insert into log_checkpoint (size, root, note, published_at) values ($1, $2, $3, $4) on conflict (size) do nothing")
                    .bind(c.size)
                    .bind(c.root.to_vec())
                    .bind(c.note.as_str())
                    .bind(c.published_at)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn latest_checkpoint(&self) -> Result<Option<CheckpointRecord>> {
                let row = sqlx::query("select size, root, note, published_at from log_checkpoint order by size desc limit 1")
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(decode_checkpoint).transpose()
            }

            async fn checkpoint(&self, size: i64) -> Result<Option<CheckpointRecord>> {
                let row = sqlx::query("select size, root, note, published_at from log_checkpoint where size = $1")
                    .bind(size)
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(decode_checkpoint).transpose()
            }
        }

        fn decode_state(row: &DbRow) -> Result<LogState> {
            let edge: Vec<u8> = row.try_get("edge")?;
            if edge.len() % 32 != 0 {
                return Err(StoreError::Corrupt("log_state.edge is not a list of hashes".into()));
            }
            Ok(LogState {
                size: row.try_get("size")?,
                root: hash32("root", row.try_get("root")?)?,
                edge: edge.chunks(32).map(|c| c.try_into().expect("32-byte chunks")).collect(),
            })
        }

        fn decode_checkpoint(row: &DbRow) -> Result<CheckpointRecord> {
            Ok(CheckpointRecord {
                size: row.try_get("size")?,
                root: hash32("root", row.try_get("root")?)?,
                note: row.try_get("note")?,
                published_at: row.try_get("published_at")?,
            })
        }
    };
}
pub(crate) use store_impl;
