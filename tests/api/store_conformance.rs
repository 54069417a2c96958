//! One conformance suite for the `Store` interface, run on both backends.

use std::sync::Arc;

use anchor_domain::MilliDac;
use anchor_domain::declarations::Declaration;
use anchor_domain::declarations::dd::*;
use anchor_domain::declarations::ee::*;
use anchor_ports::*;
use anchor_store::*;
use anchor_tests::*;
use chrono::{DateTime, Duration, TimeZone, Utc};
use uuid::Uuid;

anchor_tests::both_backends!(
    store_conforms,
    the_fold_counts_each_declaration_once,
    a_leaf_enqueued_late_still_enters_the_log,
    releases_of_two_windows_at_once_keep_to_the_budget,
    a_session_opens_only_with_the_password_still_in_place,
    a_session_being_paid_for_takes_no_other_close_and_a_closed_one_no_payment,
    a_stay_whose_payment_settled_is_closed_by_it_and_a_stale_reservation_holds_nothing
);

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 1, 12, 0, 0).unwrap()
}

async fn new_agent(store: &Arc<dyn Store>, trial_milli: i64) -> Uuid {
    let agent = NewAgent {
        agent_id: Uuid::new_v4(),
        token_hash: *Uuid::new_v4().as_bytes().repeat(2).first_chunk::<32>().unwrap(),
        recovery_hash: [9; 32],
        region_code: Some("KR".into()),
        registered_at: now(),
        trial_granted: MilliDac(trial_milli),
        trial_expires_at: now() + Duration::days(30),
    };
    store.insert_agent(&agent).await.unwrap();
    agent.agent_id
}

fn declaration(agent_id: Uuid, amount: i64, parent: Option<Uuid>) -> NewDeclaration {
    let dd_id = Uuid::new_v4();
    NewDeclaration {
        declaration: Declaration {
            dd_id,
            ee_id: Uuid::new_v4(),
            agent_id,
            dd: DdFields {
                unit_type: UnitType::Batch,
                declaration_mode: DeclarationMode::SelfDeclared,
                decision_type: DecisionType::SelfAttestation,
                action_type: ActionType::Hold,
                origin_context: OriginContext::Mixed,
                selection_state: SelectionState::NonDecision,
                selection_scope: Some(SelectionScope::Global),
                decision_at: Some(now() - Duration::minutes(5)),
                parent_dd_id: parent,
                excluded_option_count: Some(3),
            },
            ee: EeFields {
                preset: None,
                scope: Scope {
                    retention: Retention::Medium,
                    integrity: Integrity::Certifiable,
                    disclosure: Disclosure::Exportable,
                    responsibility: Responsibility::Standard,
                    content_scope: ContentScope::External,
                    delegation: Delegation::Partial,
                },
                direct_access_period: AccessPeriod::parse("2m").unwrap(),
                direct_access_quota: 2,
                access_class: AccessClass::InternalOnly,
            },
            content_inclusion: false,
            template: None,
            anchored_at: now(),
            lineage_group_id: dd_id,
            pricing_version: "v1.3.0".into(),
            pricing_sha256: "ab".repeat(32),
            dac_amount: MilliDac(amount),
            salt: [3; 32],
            trace_key: None,
        },
        request_id: Uuid::new_v4(),
        subtotal: MilliDac(amount),
        base_fee: MilliDac(10_000),
        multiplier_permille: 1000,
        monthly: MilliDac::ZERO,
        direct_access_expires_at: now() + Duration::days(60),
        external: None,
        base_from_trial: false,
        earned_premium: None,
        agreement: None,
        token_check: None,
    }
}

/// A verified x402 authorization of `amount_units` for `route`, made at `at`
/// (its 30-minute window runs from then), priced by the test generation.
fn new_payment(nonce: &str, amount_units: i64, route: &str, at: DateTime<Utc>) -> NewPayment {
    NewPayment {
        payment_id: Uuid::new_v4(),
        network: "eip155:8453".into(),
        asset: "0xusdc".into(),
        payer: "0xpayer".into(),
        nonce: nonce.into(),
        amount_units,
        pay_to: "0xpayto".into(),
        valid_after: 0,
        valid_before: i64::MAX / 2,
        route: route.into(),
        payload: "{}".into(),
        deadline: at + Duration::minutes(30),
        dab_default: MilliDac(1_000_000),
        period_start: now() - Duration::days(1),
        priced_by: PricedBy { version: "1.3.0-test".into(), sha256: "ab".repeat(32) },
        request: None,
    }
}

async fn store_conforms(backend: Backend) {
    let (store, _cleanup) = fresh_store(backend).await;
    store.ping().await.unwrap();
    let agent = new_agent(&store, 100_000).await;

    // A declaration round-trips field for field.
    let first = declaration(agent, 95_000, None);
    assert!(matches!(store.create_declaration(&first, now()).await.unwrap(), Created::New { trial_remaining, record }
            if trial_remaining.milli() == 5_000 && record.declaration == first.declaration && record.confirmed_at.is_none()));
    let stored = store.declaration(first.declaration.dd_id).await.unwrap().unwrap();
    assert_eq!(stored.declaration, first.declaration);
    assert_eq!(stored.settlement_status.as_str(), "unreserved");
    assert_eq!(stored.trial_remaining_after, Some(MilliDac(5_000)));

    // The same request_id returns the stored record and debits nothing.
    let mut again = declaration(agent, 1_000, None);
    again.request_id = first.request_id;
    match store.create_declaration(&again, now()).await.unwrap() {
        Created::Replayed(earlier) => assert_eq!(earlier.declaration.dd_id, first.declaration.dd_id),
        other => panic!("expected a replay, got {other:?}"),
    }
    // Also when the replay's price is more than Trial holds now, or its parent is gone.
    let mut dearer = declaration(agent, 99_000, Some(Uuid::new_v4()));
    dearer.request_id = first.request_id;
    match store.create_declaration(&dearer, now()).await.unwrap() {
        Created::Replayed(earlier) => assert_eq!(earlier.declaration.dd_id, first.declaration.dd_id),
        other => panic!("expected a replay, got {other:?}"),
    }
    let mut dearer = declaration(agent, 99_000, None);
    dearer.request_id = first.request_id;
    assert!(matches!(store.create_declaration(&dearer, now()).await.unwrap(), Created::Replayed(_)));
    assert_eq!(store.agent(agent).await.unwrap().unwrap().trial_balance, MilliDac(5_000), "replays debit nothing");
    // What a create paid externally reads before its challenge, in one
    // statement: the earlier record under its request_id, beside the DAB.
    let (earlier, dab) = store.declaration_by_request_and_dab(agent, first.request_id, now() - Duration::days(1)).await.unwrap();
    assert_eq!(earlier.map(|d| d.declaration), Some(first.declaration.clone()));
    assert_eq!(dab, DabStatus { own_limit: None, spent: MilliDac::ZERO });
    let (none, dab) = store.declaration_by_request_and_dab(agent, Uuid::new_v4(), now()).await.unwrap();
    assert!(none.is_none());
    assert_eq!(dab.spent, MilliDac::ZERO);
    assert!(store.declaration_by_request_and_dab(Uuid::new_v4(), first.request_id, now()).await.is_err(), "no such agent");
    // A record paid externally: its reserved payment counts against the DAB
    // from its period on, and the record answers its request_id.
    let payer = new_agent(&store, 0).await;
    let mut paid = declaration(payer, 15_000, None);
    paid.external = Some(new_payment("0x01", 15_000, "POST /v1/dd/create", now()));
    assert!(matches!(store.create_declaration(&paid, now()).await.unwrap(), Created::New { .. }));
    let (earlier, dab) = store.declaration_by_request_and_dab(payer, paid.request_id, now() - Duration::days(1)).await.unwrap();
    assert_eq!(earlier.map(|d| d.declaration.dd_id), Some(paid.declaration.dd_id));
    assert_eq!(dab, DabStatus { own_limit: None, spent: MilliDac(15_000) });
    assert_eq!(dab, store.dab_status(payer, now() - Duration::days(1)).await.unwrap(), "the same as the DAB read alone");
    let next_month = anchor_domain::dab::period(now()).1;
    let (_, later) = store.declaration_by_request_and_dab(payer, paid.request_id, next_month).await.unwrap();
    assert_eq!(later.spent, MilliDac::ZERO, "a payment made in an earlier month counts in its own");
    // Its request_id sent again by an agent found in memory, with another
    // authorization: the earlier record while the token is still the
    // agent's, nothing written when it is not; no second payment either way.
    let mut resent = declaration(payer, 15_000, None);
    resent.request_id = paid.request_id;
    resent.external = Some(new_payment("0x02", 15_000, "POST /v1/dd/create", now()));
    resent.token_check = Some(store.agent(payer).await.unwrap().unwrap().token_hash);
    match store.create_declaration(&resent, now()).await.unwrap() {
        Created::Replayed(earlier) => assert_eq!(earlier.declaration.dd_id, paid.declaration.dd_id),
        other => panic!("expected a replay, got {other:?}"),
    }
    resent.declaration.dd_id = Uuid::new_v4();
    resent.token_check = Some([7; 32]);
    assert!(matches!(store.create_declaration(&resent, now()).await.unwrap(), Created::Unchecked), "another token");
    assert_eq!(store.dab_status(payer, now() - Duration::days(1)).await.unwrap().spent, MilliDac(15_000), "nothing reserved again");
    let payment = store.payment_for(paid.declaration.dd_id).await.unwrap().unwrap();
    assert_eq!(payment.history.iter().map(|(status, _, _)| *status).collect::<Vec<_>>(), [PaymentStatus::Reserved]);
    assert_eq!(payment.status, PaymentStatus::Reserved);
    // A confirmation reads the record and what settling its payment needs
    // together; a record Trial paid has no payment to settle.
    let (stored, settling) = store.declaration_to_confirm(paid.declaration.dd_id).await.unwrap().expect("the paid record");
    let settling = settling.expect("the paid record's payment");
    assert_eq!(
        (stored.declaration.dd_id, settling.payment_id, settling.payer.as_str(), settling.status),
        (paid.declaration.dd_id, payment.payment_id, "0xpayer", PaymentStatus::Reserved)
    );
    assert_eq!(
        (settling.network, settling.asset, settling.payload),
        (payment.network.clone(), payment.asset.clone(), payment.payload.clone())
    );
    let (trial_paid, none) = store.declaration_to_confirm(first.declaration.dd_id).await.unwrap().expect("the Trial-paid record");
    assert_eq!((trial_paid.declaration.dd_id, none.map(|s| s.payment_id)), (first.declaration.dd_id, None));
    assert!(store.declaration_to_confirm(Uuid::new_v4()).await.unwrap().is_none());
    // The same beside the agent that recorded it, found by its token hash
    // (a confirmation's authentication and record in one read): only where
    // that agent holds the hash; several at once, as reads gather.
    let owner_hash = store.agent(agent).await.unwrap().unwrap().token_hash;
    let payer_hash = store.agent(payer).await.unwrap().unwrap().token_hash;
    let (own, paid_as, foreign, unknown) = tokio::join!(
        store.declaration_to_confirm_as(&owner_hash, first.declaration.dd_id),
        store.declaration_to_confirm_as(&payer_hash, paid.declaration.dd_id),
        store.declaration_to_confirm_as(&payer_hash, first.declaration.dd_id),
        store.declaration_to_confirm_as(&owner_hash, Uuid::new_v4()),
    );
    let (as_agent, own, none) = own.unwrap().expect("the agent's own record");
    assert_eq!((as_agent.agent_id, as_agent.token_hash, as_agent.trial_balance), (agent, owner_hash, MilliDac(5_000)));
    assert_eq!(as_agent, store.agent(agent).await.unwrap().unwrap(), "the agent as its own read finds it");
    assert_eq!((own.declaration, none.map(|s| s.payment_id)), (first.declaration.clone(), None));
    let (as_payer, paid_read, settling) = paid_as.unwrap().expect("the payer's record");
    assert_eq!(
        (as_payer.agent_id, paid_read.declaration.dd_id, settling.map(|s| s.payment_id)),
        (payer, paid.declaration.dd_id, Some(payment.payment_id))
    );
    assert!(foreign.unwrap().is_none(), "another agent's record is not read beside this token");
    assert!(unknown.unwrap().is_none());
    // The month's spending follows each payment's status: one whose
    // settlement outcome is unknown still counts (its money may have moved),
    // and keeps counting once its confirmation settles it; one released or
    // failed stops counting.
    let month = anchor_domain::dab::period(now()).0;
    let spent = async |store: &Arc<dyn Store>| store.dab_status(payer, month).await.unwrap().spent;
    assert!(store.mark_settlement_unknown(paid.declaration.dd_id, "no answer", now()).await.unwrap());
    assert_eq!(spent(&store).await, MilliDac(15_000), "an unknown outcome counts");
    let settled =
        [UsageEntry { cost_component: CostComponent::BaseFee, source: PaymentSource::External, amount: MilliDac(15_000), priced_by: None }];
    assert!(store.confirm_declaration(paid.declaration.dd_id, "sha256:22", now(), &settled, b"leaf", Some("local:0x01")).await.unwrap());
    assert_eq!(spent(&store).await, MilliDac(15_000), "settled after an unknown outcome, it counts once");
    let mut released = declaration(payer, 4_000, None);
    let mut payment = paid.external.clone().unwrap();
    (payment.payment_id, payment.nonce, payment.amount_units) = (Uuid::new_v4(), "0x02".into(), 4_000);
    released.external = Some(payment);
    assert!(matches!(store.create_declaration(&released, now()).await.unwrap(), Created::New { .. }));
    assert_eq!(spent(&store).await, MilliDac(19_000), "reserved, it counts");
    let closed = store.close_payment(released.declaration.dd_id, SettlementStatus::Released, PaymentStatus::Released, "window", now());
    assert!(closed.await.unwrap());
    assert_eq!(spent(&store).await, MilliDac(15_000), "released, it no longer counts");
    assert_eq!(store.dab_status(payer, next_month).await.unwrap().spent, MilliDac::ZERO, "nor does any of it next month");
    // Trial cannot go below zero.
    match store.create_declaration(&declaration(agent, 5_001, None), now()).await.unwrap() {
        Created::TrialCannotPay { balance, expired } => assert_eq!((balance.milli(), expired), (5_000, false)),
        other => panic!("expected TrialCannotPay, got {other:?}"),
    }
    // Expired Trial cannot pay even when the balance would.
    match store.create_declaration(&declaration(agent, 1_000, None), now() + Duration::days(31)).await.unwrap() {
        Created::TrialCannotPay { expired, .. } => assert!(expired),
        other => panic!("expected an expired Trial, got {other:?}"),
    }
    // Lineage: a child joins its parent's group; other agents' parents are refused.
    let child = declaration(agent, 5_000, Some(first.declaration.dd_id));
    assert!(matches!(store.create_declaration(&child, now()).await.unwrap(), Created::New { .. }));
    let group = store.lineage_group(agent, first.declaration.dd_id).await.unwrap();
    assert_eq!(group.len(), 2);
    let stranger = new_agent(&store, 100_000).await;
    assert!(matches!(
        store.create_declaration(&declaration(stranger, 10_000, Some(first.declaration.dd_id)), now()).await.unwrap(),
        Created::ParentForeign
    ));
    assert!(matches!(
        store.create_declaration(&declaration(stranger, 10_000, Some(Uuid::new_v4())), now()).await.unwrap(),
        Created::ParentNotFound
    ));

    // Confirmation happens once and writes the usage entries once.
    let priced_by = Some(PricedBy { version: "1.3.0-test".into(), sha256: "ab".repeat(32) });
    let usage = [UsageEntry {
        cost_component: CostComponent::BaseFee,
        source: PaymentSource::Trial,
        amount: MilliDac(10_000),
        priced_by: priced_by.clone(),
    }];
    let pending = store.log_pending_count().await.unwrap();
    assert!(store.confirm_declaration(first.declaration.dd_id, "sha256:00", now(), &usage, b"leaf", None).await.unwrap());
    assert!(!store.confirm_declaration(first.declaration.dd_id, "sha256:11", now(), &usage, b"leaf", None).await.unwrap());
    let confirmed = store.declaration(first.declaration.dd_id).await.unwrap().unwrap();
    assert_eq!(confirmed.integrity_hash.as_deref(), Some("sha256:00"));
    assert_eq!(confirmed.settlement_status.as_str(), "settled");
    assert_eq!(store.usage_for(anchor_ports::Subject::declaration(first.declaration.dd_id)).await.unwrap(), usage.to_vec());
    assert_eq!(store.log_pending_count().await.unwrap(), pending + 1, "the leaf is queued with the confirmation, once");

    // Direct reads: two, then exhausted; past the period, expired.
    let id = first.declaration.dd_id;
    assert_eq!(store.consume_direct_read(id, now()).await.unwrap(), DirectRead::Granted { remaining: 1 });
    assert_eq!(store.consume_direct_read(id, now()).await.unwrap(), DirectRead::Granted { remaining: 0 });
    assert_eq!(store.consume_direct_read(id, now()).await.unwrap(), DirectRead::Exhausted);
    assert_eq!(store.consume_direct_read(child.declaration.dd_id, now() + Duration::days(61)).await.unwrap(), DirectRead::Expired);

    // Listing: newest first, filtered, paged.
    let (rows, total) = store.list_declarations(agent, ListFilter { limit: 1, offset: 0, ..ListFilter::default() }).await.unwrap();
    assert_eq!((rows.len(), total), (1, 2));
    let (rows, total) = store
        .list_declarations(agent, ListFilter { from: Some(now() + Duration::seconds(1)), limit: 10, ..ListFilter::default() })
        .await
        .unwrap();
    assert_eq!((rows.len(), total), (0, 0));

    // Credentials: rotation needs the current token; recovery counts attempts.
    let record = store.agent(agent).await.unwrap().unwrap();
    assert!(store.rotate_credentials(agent, &record.token_hash, &[1; 32], &[2; 32]).await.unwrap());
    assert!(!store.rotate_credentials(agent, &record.token_hash, &[3; 32], &[4; 32]).await.unwrap());
    assert_eq!(store.agent_by_token_hash(&[1; 32]).await.unwrap().map(|a| a.agent_id), Some(agent));
    // Two wrong keys spend a limit of two; the right key still recovers; a
    // third wrong key is refused as rate limited.
    let limit = AttemptLimit { scope: "agent_recovery", window: Duration::minutes(15), max: 2 };
    assert_eq!(store.recover_credentials(agent, &[7; 32], &[5; 32], &[6; 32], now(), limit).await.unwrap(), Recovery::Refused);
    assert_eq!(store.recover_credentials(agent, &[9; 32], &[5; 32], &[6; 32], now(), limit).await.unwrap(), Recovery::Refused);
    assert_eq!(store.recover_credentials(agent, &[2; 32], &[5; 32], &[6; 32], now(), limit).await.unwrap(), Recovery::Recovered);
    assert_eq!(store.recover_credentials(agent, &[7; 32], &[8; 32], &[8; 32], now(), limit).await.unwrap(), Recovery::RateLimited);
    assert_eq!(store.agent_by_token_hash(&[5; 32]).await.unwrap().map(|a| a.agent_id), Some(agent));

    // Classification: the operator's base categories.
    let keys = store.classifications_for_agent(agent).await.unwrap();
    assert!(keys.iter().any(|c| c.key == "routine_operation" && c.owner_id.is_none()));
}

/// ARA's fold: the watermark moves only from the value read, in the
/// transaction that adds the counts, so a batch folded twice (a retry, or two
/// hosts at once) counts once; one all-time key counted on several days of a
/// batch adds up, with its first and last day.
async fn the_fold_counts_each_declaration_once(backend: Backend) {
    use anchor_domain::ara::{Dimension, Visibility};
    let (store, _cleanup) = fresh_store(backend).await;
    let agent = new_agent(&store, 1_000_000).await;
    for i in 0..3 {
        let new = declaration(agent, 10_000, None);
        store.create_declaration(&new, now()).await.unwrap();
        let leaf = format!("leaf {i}");
        assert!(store.confirm_declaration(new.declaration.dd_id, "sha256:00", now(), &[], leaf.as_bytes(), None).await.unwrap());
    }
    while store.integrate_log(1000, now(), &anchor_app::log::plan).await.unwrap().is_some() {}
    assert_eq!(store.fold_progress().await.unwrap(), (0, 3));

    let day = |day: i32, n: i64| DayCount {
        agent_id: agent,
        day,
        dimension: Dimension::All,
        value: "all".into(),
        visibility: Visibility::Shared,
        n,
    };
    let counts = vec![day(20_390, 2), day(20_391, 1)];
    // Two hosts fold the same batch at once: exactly one of them counts it.
    let (a, b) = tokio::join!(store.fold(0, 3, &counts, &[]), store.fold(0, 3, &counts, &[]));
    assert!(a.unwrap() ^ b.unwrap(), "one fold wins");
    // A retry of the batch after it was folded changes nothing.
    assert!(!store.fold(0, 3, &counts, &[]).await.unwrap());
    assert_eq!(store.fold_progress().await.unwrap(), (3, 3));

    let totals = store.agent_totals(agent, false).await.unwrap();
    let all: Vec<_> = totals.iter().filter(|c| c.dimension == Dimension::All).map(|c| (c.n, c.first_day, c.last_day)).collect();
    assert_eq!(all, [(3, 20_390, 20_391)]);
    let days = store.agent_days(agent, 20_390, 20_392, &[Dimension::All], false).await.unwrap();
    assert_eq!(days.iter().map(|c| (c.first_day, c.n)).collect::<Vec<_>>(), [(20_390, 2), (20_391, 1)]);
}

/// The ε ledger under parallel requests: a 7-day and a 90-day release of one
/// kind, cut at the same moment, share the 7 days before today. Each fits the
/// budget alone (20 of 30), not both (40 on those days): exactly one is
/// stored, and no day of the ledger goes past the budget.
async fn releases_of_two_windows_at_once_keep_to_the_budget(backend: Backend) {
    use anchor_domain::ara::Window;
    let (store, _cleanup) = fresh_store(backend).await;
    let (epsilon, budget) = (20_000_000, 30_000_000);
    let end = 20_400;
    for round in 0..6 {
        let kind = format!("kind-{round}");
        let (short, long) = (Window { days: 7, end }, Window { days: 90, end });
        let (a, b) = tokio::join!(
            store.save_release_within_budget(&kind, short, "{\"short\":1}", epsilon, budget, now()),
            store.save_release_within_budget(&kind, long, "{\"long\":1}", epsilon, budget, now()),
        );
        let stored = [a.unwrap(), b.unwrap()].iter().filter(|saved| matches!(saved, SavedRelease::Stored(_))).count();
        assert_eq!(stored, 1, "{kind}: one release of the two fits the budget");
        let on_shared_days = store.epsilon_spent(&kind, short).await.unwrap();
        assert_eq!(on_shared_days, epsilon, "{kind}: the days both windows cover carry one release");
        let cut = usize::from(store.release(&kind, short).await.unwrap().is_some())
            + usize::from(store.release(&kind, long).await.unwrap().is_some());
        assert_eq!(cut, 1, "{kind}: the refused release is not stored");
        // The one refused is refused again, with the ledger it found.
        let again = store.save_release_within_budget(&kind, long, "{}", epsilon, budget, now()).await.unwrap();
        let again_short = store.save_release_within_budget(&kind, short, "{}", epsilon, budget, now()).await.unwrap();
        let refused = [again, again_short]
            .into_iter()
            .filter_map(|saved| match saved {
                SavedRelease::OverBudget { spent_micro } => Some(spent_micro),
                SavedRelease::Stored(_) => None,
            })
            .collect::<Vec<_>>();
        assert_eq!(refused, [epsilon], "{kind}: the stored one is served, the other refused at 20 of 30");
    }
}

/// A sign-in checks the password (slowly), then opens its session: the
/// session goes in only if the hash it checked is still the owner's. One
/// checked against a password changed meanwhile (whose change ended the
/// other sessions already) is refused; so is one for a deleted account.
async fn a_session_opens_only_with_the_password_still_in_place(backend: Backend) {
    let (store, _cleanup) = fresh_store(backend).await;
    let owner = NewOwner {
        owner_id: Uuid::new_v4(),
        email: Some("owner@example.com".into()),
        password_hash: Some("$argon2id$old".into()),
        owner_type: anchor_domain::owners::OwnerType::Human,
        managing_agent_id: None,
        parent_owner_id: None,
        owner_depth: 0,
        browser_language: None,
        timezone: None,
        residence_country: None,
        terms_version: "1".into(),
        privacy_version: "1".into(),
        created_at: now(),
    };
    assert!(store.insert_owner(&owner).await.unwrap());
    let later = now() + Duration::hours(12);
    let live = |hash: [u8; 32]| {
        let store = store.clone();
        async move { store.session_owner(&hash, now()).await.unwrap().is_some() }
    };
    assert!(store.insert_session(&[1; 32], owner.owner_id, Some("$argon2id$old"), now(), later).await.unwrap());
    assert!(live([1; 32]).await);
    store.set_owner_password(owner.owner_id, "$argon2id$new").await.unwrap();
    assert!(store.insert_session(&[9; 32], owner.owner_id, Some("$argon2id$new"), now(), later).await.unwrap());
    store.end_owner_sessions(owner.owner_id, Some(&[9; 32])).await.unwrap();
    assert!(!live([1; 32]).await && live([9; 32]).await, "the change ended the sessions but the one kept");
    store.end_owner_sessions(owner.owner_id, None).await.unwrap();
    assert!(!live([9; 32]).await, "none kept: every session ended");
    // A sign-in that verified the old hash before the change.
    assert!(!store.insert_session(&[2; 32], owner.owner_id, Some("$argon2id$old"), now(), later).await.unwrap());
    assert!(!live([2; 32]).await, "nothing went in");
    assert!(!store.insert_session(&[3; 32], owner.owner_id, None, now(), later).await.unwrap(), "a password is required");
    assert!(store.insert_session(&[4; 32], owner.owner_id, Some("$argon2id$new"), now(), later).await.unwrap());
    assert!(live([4; 32]).await);
    assert!(!store.insert_session(&[5; 32], Uuid::new_v4(), None, now(), later).await.unwrap(), "no such owner");

    // A category added by a request that authenticated before the owner was
    // erased finds the owner gone: the erasure deleted every category, and
    // none comes back after it.
    let category = |key: &str| OwnerClassification {
        classification_id: Uuid::new_v4(),
        key: key.into(),
        label: "label".into(),
        description: None,
        active: true,
        created_at: now(),
    };
    assert_eq!(store.insert_classification(owner.owner_id, &category("kept_until_erased"), 500).await.unwrap(), CategoryAdded::Added);
    assert!(store.set_owner_deletion(owner.owner_id, Some((now(), now() + Duration::days(1)))).await.unwrap());
    assert!(!store.set_owner_deletion(owner.owner_id, Some((now(), now() + Duration::days(3)))).await.unwrap(), "started once");
    assert_eq!(store.erase_due_owners(now() + Duration::days(2)).await.unwrap(), 1);
    assert_eq!(store.insert_classification(owner.owner_id, &category("after_erasure"), 500).await.unwrap(), CategoryAdded::OwnerGone);
    assert!(
        store.owner_classifications(owner.owner_id, true).await.unwrap().is_empty(),
        "nothing of the erased owner's categories is left"
    );
    assert_eq!(store.insert_classification(Uuid::new_v4(), &category("nobody"), 500).await.unwrap(), CategoryAdded::OwnerGone);
}

/// An sDAC session whose end is being paid inline: while the payment is
/// live no trial is counted and no other end (from Trial, or free) closes
/// it; the settled end does. A session ended meanwhile takes no payment,
/// and an end priced before a trial was counted is refused as changed.
async fn a_session_being_paid_for_takes_no_other_close_and_a_closed_one_no_payment(backend: Backend) {
    let (store, _cleanup) = fresh_store(backend).await;
    let agent = new_agent(&store, 1_000_000).await;
    let balance = |agent: Uuid| {
        let store = store.clone();
        async move { store.agent(agent).await.unwrap().unwrap().trial_balance }
    };
    let priced_by = PricedBy { version: "1.3.0-test".into(), sha256: "ab".repeat(32) };
    let scope = Scope {
        retention: Retention::Medium,
        integrity: Integrity::Certifiable,
        disclosure: Disclosure::Exportable,
        responsibility: Responsibility::Standard,
        content_scope: ContentScope::External,
        delegation: Delegation::Partial,
    };
    let payment = |nonce: &str| new_payment(nonce, 12_000, "POST /v1/sdac/session/end", now());
    let session = Uuid::new_v4();
    let subject = Subject { domain: SubjectDomain::SdacSession, id: session };
    assert!(store.start_sdac(session, agent, now()).await.unwrap());
    let one = store.add_sdac_trial(session, agent, scope, MilliDac(20_000), 1000, now()).await.unwrap().unwrap();
    assert_eq!(one.trials, 1);
    // An end priced at no trial finds one counted: nothing is written.
    let unpriced = SdacRecord { trials: 0, simulated: MilliDac::ZERO, ..one.clone() };
    assert_eq!(store.end_sdac_free(&unpriced, &priced_by, now()).await.unwrap(), SdacEnded::Changed);
    let charged = MilliDac(12_000);
    let trial_end = store.end_sdac(&unpriced, charged, SdacFunding::Trial, &priced_by, now()).await.unwrap();
    assert_eq!(trial_end, SdacEnded::Changed);
    assert_eq!(balance(agent).await, MilliDac(1_000_000), "the debit rolled back");

    let paying = payment("0x51");
    assert_eq!(store.reserve_payment(&paying, agent, subject, None, None, now()).await.unwrap(), Reservation::Reserved);
    assert!(store.add_sdac_trial(session, agent, scope, MilliDac(20_000), 1000, now()).await.unwrap().is_none(), "no trial while paid for");
    let other = store.end_sdac(&one, charged, SdacFunding::Trial, &priced_by, now()).await.unwrap();
    assert_eq!(other, SdacEnded::NotOpen, "no end from Trial while a payment for it is live");
    assert_eq!(balance(agent).await, MilliDac(1_000_000));
    assert!(store.settle_payment(paying.payment_id, "0xref", now()).await.unwrap());
    let external = SdacFunding::External { payment_id: paying.payment_id };
    let ended = store.end_sdac(&one, charged, external, &priced_by, now()).await.unwrap();
    assert!(matches!(ended, SdacEnded::Ended(ref record) if record.trials == 1 && record.charged == charged), "{ended:?}");

    // Ended (here from Trial), a session takes no payment for its end.
    let closed = Uuid::new_v4();
    assert!(store.start_sdac(closed, agent, now()).await.unwrap());
    let counted = store.add_sdac_trial(closed, agent, scope, MilliDac(20_000), 1000, now()).await.unwrap().unwrap();
    assert!(matches!(store.end_sdac(&counted, charged, SdacFunding::Trial, &priced_by, now()).await.unwrap(), SdacEnded::Ended(_)));
    let late = payment("0x52");
    let subject = Subject { domain: SubjectDomain::SdacSession, id: closed };
    assert_eq!(store.reserve_payment(&late, agent, subject, None, None, now()).await.unwrap(), Reservation::SubjectClosed);
}

/// An ISE stay whose inline payment settled but was not closed with it (an
/// unknown outcome reconciled later, or a host that stopped in between):
/// no close paid otherwise takes it, and the job's sweep closes it as paid
/// by that payment once the settlement is a minute old. A reservation left
/// unsettled for ten minutes holds its stay no longer.
async fn a_stay_whose_payment_settled_is_closed_by_it_and_a_stale_reservation_holds_nothing(backend: Backend) {
    use anchor_domain::ise::IseMode;
    let (store, _cleanup) = fresh_store(backend).await;
    let agent = new_agent(&store, 1_000_000).await;
    let priced_by = PricedBy { version: "1.3.0-test".into(), sha256: "ab".repeat(32) };
    let payment = |nonce: &str, at: DateTime<Utc>| new_payment(nonce, 10_000, "POST /v1/ise/exit", at);
    let close = |session_id: Uuid, funding: IseFunding| IseClose {
        session_id,
        agent_id: agent,
        exited_at: now(),
        charged: MilliDac(10_000),
        funding,
        closed_by: "agent",
        now: now(),
        priced_by: priced_by.clone(),
    };
    let stay = Uuid::new_v4();
    assert!(store.enter_ise(stay, agent, IseMode::External, now() - Duration::hours(1)).await.unwrap());
    let paid = NewPayment { request: Some([7; 32]), ..payment("0x61", now() - Duration::seconds(5)) };
    let subject = Subject { domain: SubjectDomain::IseSession, id: stay };
    let reserved = store.reserve_payment(&paid, agent, subject, None, None, now() - Duration::seconds(5)).await.unwrap();
    assert_eq!(reserved, Reservation::Reserved);
    // The request it paid for is kept, to tell a retry of it from another request.
    let kept = store.payment_with_nonce(&paid.network, &paid.asset, &paid.payer, &paid.nonce).await.unwrap().unwrap();
    assert_eq!(kept.request.as_deref(), Some(&[7u8; 32][..]));
    assert!(store.settle_payment(paid.payment_id, "0xref", now() - Duration::seconds(5)).await.unwrap());
    assert!(matches!(store.close_ise(&close(stay, IseFunding::Trial)).await.unwrap(), IseClosed::NotOpen), "paid already");
    let unpaid = IseUnpaid {
        session_id: stay,
        agent_id: agent,
        exited_at: now(),
        unpaid: true,
        closed_by: "service",
        now: now(),
        priced_by: priced_by.clone(),
    };
    assert!(matches!(store.close_ise_unpaid(&unpaid).await.unwrap(), IseClosed::NotOpen), "nor closed unpaid by the job");
    // Settled five seconds ago: the request that settled it may still close it.
    assert_eq!(store.close_settled_subjects(now() - Duration::minutes(1), now(), 100).await.unwrap(), 0);
    assert_eq!(store.close_settled_subjects(now(), now(), 100).await.unwrap(), 1);
    let closed = store.open_ise(agent).await.unwrap();
    assert!(closed.is_none(), "closed");
    let usage = store.usage_for(subject).await.unwrap();
    assert_eq!(usage.iter().map(|u| (u.source, u.amount)).collect::<Vec<_>>(), [(PaymentSource::External, MilliDac(10_000))]);
    assert_eq!(store.close_settled_subjects(now(), now(), 100).await.unwrap(), 0, "once");

    // A reservation a stopped host left eleven minutes ago holds nothing.
    let next = Uuid::new_v4();
    assert!(store.enter_ise(next, agent, IseMode::External, now() - Duration::hours(1)).await.unwrap());
    let left = payment("0x62", now() - Duration::minutes(11));
    let subject = Subject { domain: SubjectDomain::IseSession, id: next };
    let reserved = store.reserve_payment(&left, agent, subject, None, None, now() - Duration::minutes(11)).await.unwrap();
    assert_eq!(reserved, Reservation::Reserved);
    let by_trial = store.close_ise(&close(next, IseFunding::Trial)).await.unwrap();
    assert!(matches!(by_trial, IseClosed::Closed(ref record) if record.source == Some(PaymentSource::Trial)), "{by_trial:?}");
}

/// The integrator reads `log_pending` from a little before where it last
/// ended (past the entries it deleted): a leaf whose enqueuing time is older
/// than that (a transaction that committed long after it read its clock, or
/// another host's slow clock) still enters the log, once the newer ones
/// are in.
async fn a_leaf_enqueued_late_still_enters_the_log(backend: Backend) {
    let (store, _cleanup) = fresh_store(backend).await;
    let agent = new_agent(&store, 1_000_000).await;
    let anchor = |at: DateTime<Utc>| {
        let store = &store;
        async move {
            let new = declaration(agent, 10_000, None);
            store.create_declaration(&new, at).await.unwrap();
            let leaf = new.declaration.dd_id.to_string();
            assert!(store.confirm_declaration(new.declaration.dd_id, "sha256:00", at, &[], leaf.as_bytes(), None).await.unwrap());
        }
    };
    let drain = || async {
        let mut rounds = 0;
        while store.integrate_log(2, now(), &anchor_app::log::plan).await.unwrap().is_some() {
            rounds += 1;
        }
        rounds
    };
    for _ in 0..3 {
        anchor(now()).await;
    }
    assert_eq!(drain().await, 2);
    // A backlog drains: one full batch is taken, then a leaf arrives whose
    // enqueuing time is two hours before everything pending.
    for _ in 0..5 {
        anchor(now() + Duration::minutes(5)).await;
    }
    assert!(store.integrate_log(2, now(), &anchor_app::log::plan).await.unwrap().is_some());
    anchor(now() - Duration::hours(2)).await;
    assert_eq!(store.log_pending_count().await.unwrap(), 4);
    drain().await;
    assert_eq!(store.log_pending_count().await.unwrap(), 0);
    assert_eq!(store.log_state().await.unwrap().size, 9);
}

/// Migration 0008 rebuilds SQLite's `usage_entry`: rows written before it
/// keep their amounts and become declaration subjects.
#[tokio::test]
async fn the_payment_subject_migration_keeps_existing_usage_rows() {
    let (dir, path, pool) = sqlite_migrated_to(7).await;

    let (agent_id, dd_id, at) = (Uuid::new_v4(), Uuid::new_v4(), now());
    insert_agent_row(&pool, agent_id, at, 490_000).await;
    sqlx::query(
        "insert into declaration (dd_id, ee_id, agent_id, request_id, lineage_group_id, dd_unit_type, dd_declaration_mode, \
         decision_type, decision_action_type, origin_context_type, selection_state, ee_retention_period, \
         ee_integrity_verification_level, ee_disclosure_format_policy, ee_responsibility_scope, content_disclosure_scope, \
         delegation_state, ee_direct_access_period, ee_direct_access_quota, access_class, direct_access_expires_at, \
         content_inclusion, anchored_at, salt, pricing_version, pricing_sha256, dac_amount_milli, base_fee_milli, subtotal_milli, \
         multiplier_permille, monthly_milli, base_fee_source, premium_source, settlement_status, confirmed_at) \
         values ($1, $2, $3, $4, $1, 'single', 'self_declared', 'internal_service', 'execute', 'internal', 'SELECTED', 'short', \
         'basic', 'internal', 'minimal', 'owner', 'none', '30d', 10, 'self_direct', $5, 0, $6, $7, 'v1.3.0', 'sha', \
         10000, 10000, 10000, 1000, 0, 'trial', 'trial', 'settled', $6)",
    )
    .bind(dd_id)
    .bind(Uuid::new_v4())
    .bind(agent_id)
    .bind(Uuid::new_v4())
    .bind(at + Duration::days(30))
    .bind(at)
    .bind(vec![3u8; 32])
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "insert into usage_entry (usage_id, agent_id, dd_id, cost_component, payment_source, amount_milli, recorded_at) \
         values ($1, $2, $3, 'base_fee', 'trial', 10000, $4)",
    )
    .bind(Uuid::new_v4())
    .bind(agent_id)
    .bind(dd_id)
    .bind(at)
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;

    // Opening the store runs the rest of the migrations.
    let store = SqliteStore::open(&path).await.unwrap();
    let usage = store.usage_for(Subject::declaration(dd_id)).await.unwrap();
    assert_eq!(
        usage,
        // Recorded before charges named their generation.
        vec![UsageEntry {
            cost_component: CostComponent::BaseFee,
            source: PaymentSource::Trial,
            amount: MilliDac(10_000),
            priced_by: None
        }]
    );
    assert_eq!(store.declaration(dd_id).await.unwrap().unwrap().settlement_status, SettlementStatus::Settled);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Migration 0011 rebuilds SQLite's `ara_agent_day` with a new key: the daily
/// counts folded before it stay, and are read the same way after.
#[tokio::test]
async fn the_agent_day_key_migration_keeps_folded_counts() {
    use anchor_domain::ara::Dimension;
    let (dir, path, pool) = sqlite_migrated_to(10).await;

    let (agent_id, at) = (Uuid::new_v4(), now());
    insert_agent_row(&pool, agent_id, at, 500_000).await;
    // Two days of the `all` dimension, one shared and one only the agent sees.
    for (day, visibility, n) in [(20_390, 0, 2), (20_391, 0, 1), (20_391, 1, 4)] {
        sqlx::query("insert into ara_agent_day (agent_id, day, dimension, value, visibility, n) values ($1, $2, 'all', 'all', $3, $4)")
            .bind(agent_id)
            .bind(day)
            .bind(visibility)
            .bind(n)
            .execute(&pool)
            .await
            .unwrap();
    }
    pool.close().await;

    // Opening the store runs 0011 and what follows it.
    let store = SqliteStore::open(&path).await.unwrap();
    let shared = store.agent_days(agent_id, 20_390, 20_392, &[Dimension::All], false).await.unwrap();
    assert_eq!(shared.iter().map(|c| (c.first_day, c.n)).collect::<Vec<_>>(), [(20_390, 2), (20_391, 1)]);
    let own = store.agent_days(agent_id, 20_390, 20_392, &[Dimension::All], true).await.unwrap();
    assert_eq!(own.iter().map(|c| (c.first_day, c.n)).collect::<Vec<_>>(), [(20_390, 2), (20_391, 5)]);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A SQLite database in a directory of its own, migrated up to `version`
/// (included), for tests of what a later migration does to existing rows.
async fn sqlite_migrated_to(version: i64) -> (std::path::PathBuf, std::path::PathBuf, sqlx::SqlitePool) {
    let dir = std::env::temp_dir().join(format!("anchor-migration-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("anchor.db");
    let pool = sqlx::SqlitePool::connect_with(
        sqlx::sqlite::SqliteConnectOptions::new().filename(&path).create_if_missing(true).foreign_keys(true),
    )
    .await
    .unwrap();
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/sqlite");
    let mut before = sqlx::migrate::Migrator::new(folder).await.unwrap();
    before.migrations = before.migrations.iter().filter(|m| m.version <= version).cloned().collect::<Vec<_>>().into();
    before.run(&pool).await.unwrap();
    (dir, path, pool)
}

/// An agent row as the first migrations define it, with `trial_balance_milli` left of 500 DAC granted.
async fn insert_agent_row(pool: &sqlx::SqlitePool, agent_id: Uuid, at: DateTime<Utc>, trial_balance_milli: i64) {
    sqlx::query(
        "insert into agent (agent_id, token_hash, recovery_hash, registered_at, trial_granted_milli, trial_balance_milli, trial_expires_at) \
         values ($1, $2, $3, $4, 500000, $5, $6)",
    )
    .bind(agent_id)
    .bind(vec![1u8; 32])
    .bind(vec![2u8; 32])
    .bind(at)
    .bind(trial_balance_milli)
    .bind(at + Duration::days(30))
    .execute(pool)
    .await
    .unwrap();
}
