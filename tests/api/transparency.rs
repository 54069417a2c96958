//! The verifiable log: every confirmed declaration ends up in a signed RFC 6962
//! tree exactly once, receipts verify offline, tampering is caught by a named
//! check, checkpoints verify with code that is not ours, and consecutive
//! checkpoints are consistent.

use std::collections::BTreeSet;

use anchor_tests::*;
use anchor_verify::{ConsistencyProof, Receipt, verify_consistency, verify_receipt};
use base64::Engine;
use serde_json::json;
use sha2::{Digest, Sha256};

anchor_tests::both_backends!(
    a_thousand_receipts_verify_offline,
    tampering_is_caught_by_a_named_check,
    checkpoints_verify_with_an_independent_implementation,
    consecutive_checkpoints_are_consistent,
    a_backlog_is_checkpointed_while_it_drains,
    a_round_takes_what_was_pending_not_what_arrives_meanwhile,
    the_holder_writes_its_lease_a_third_of_its_length_apart,
);

/// A backlog of leaves is taken a checkpoint interval at a time: each round
/// of the log job publishes a checkpoint of what it took so far, rather than
/// none until everything pending is in.
async fn a_backlog_is_checkpointed_while_it_drains(backend: Backend) {
    let t = TestServer::with(backend, Options { jobs: false, ..Default::default() }).await;
    let agent = t.register().await;
    for _ in 0..6 {
        let dd = t.create(&agent, json!({ "ee_preset": "EE_basic" })).await;
        assert_eq!(t.confirm(&agent, dd["dd_id"].as_str().unwrap()).await.status.as_u16(), 200);
    }
    let clock = t.clock.clone() as std::sync::Arc<dyn anchor_domain::Clock>;
    let mut last = None;
    let mut sizes = Vec::new();
    // Batches of two leaves; a checkpoint interval of zero: due after every batch.
    while let Some(c) =
        anchor_app::log::integrate(t.store.as_ref(), &t.log_key, clock.as_ref(), 2, std::time::Duration::ZERO, &mut last).await.unwrap()
    {
        sizes.push(c.size);
    }
    assert_eq!(sizes, vec![2, 4, 6], "one checkpoint per interval while the backlog drains");
}

/// How many integration transactions the store has run: each updates the
/// log's head once.
async fn head_updates(t: &TestServer) -> f64 {
    updates_of(t, "log_state").await
}

/// How many update statements the store has run on `table`.
async fn updates_of(t: &TestServer, table: &str) -> f64 {
    t.statements_run("update", table).await
}

/// One round of the background jobs on host `host`.
async fn jobs_round(t: &TestServer, host: u128, runs: &mut anchor_app::jobs::Runs) -> bool {
    let schedule = anchor_app::jobs::Schedule::default();
    anchor_app::jobs::round(&t.state.app, &t.log_key, uuid::Uuid::from_u128(host), &schedule, runs).await
}

/// The integrator writes its lease a third of the lease's length (3 s)
/// after its last write, not every round (an idle host wrote and synced it
/// ten times a second). Until it runs out no other host takes it; once it
/// has, one does within a round.
async fn the_holder_writes_its_lease_a_third_of_its_length_apart(backend: Backend) {
    let t = TestServer::with(backend, Options { jobs: false, ..Default::default() }).await;
    let (mut holding, mut waiting) = (anchor_app::jobs::Runs::default(), anchor_app::jobs::Runs::default());
    let before = updates_of(&t, "log_lease").await;
    for _ in 0..5 {
        assert!(jobs_round(&t, 1, &mut holding).await, "the first host takes the lease and keeps it");
    }
    assert_eq!(updates_of(&t, "log_lease").await - before, 1.0, "one write of the lease for five rounds");
    assert!(!jobs_round(&t, 2, &mut waiting).await, "another host finds it held");
    t.clock.advance(chrono::Duration::milliseconds(1_100));
    assert!(jobs_round(&t, 1, &mut holding).await);
    assert_eq!(updates_of(&t, "log_lease").await - before, 3.0, "the other host's try, then the holder's renewal a second on");
    // The holder stops: once its lease has run out, the other host takes it.
    t.clock.advance(chrono::Duration::seconds(4));
    assert!(jobs_round(&t, 2, &mut waiting).await, "the lease is taken once it has run out");
}

/// A round integrates what was pending as it began: confirmations that
/// arrive while it integrates wait for the next round, instead of being
/// chased in one small transaction after another (decision 0079).
/// (On SQLite the confirmations also wait behind the integration's write
/// lock, so fewer of them arrive during it; on PostgreSQL they commit
/// beside it, and the round would chase them.)
async fn a_round_takes_what_was_pending_not_what_arrives_meanwhile(backend: Backend) {
    let t = TestServer::with(backend, Options { jobs: false, ..Default::default() }).await;
    // 40 records an agent (its Trial pays 50 EE_basic), 30 confirmed now.
    let mut unconfirmed = Vec::new();
    for _ in 0..6 {
        let agent = t.register().await;
        for _ in 0..40 {
            let dd = t.create(&agent, json!({ "ee_preset": "EE_basic" })).await;
            unconfirmed.push((agent.token.clone(), dd["dd_id"].as_str().unwrap().to_string()));
        }
    }
    for (token, dd_id) in unconfirmed.drain(..30) {
        let reply = t.post("/v1/dd/confirm", Some(&token), &json!({ "dd_id": dd_id })).await;
        assert_eq!(reply.status.as_u16(), 200, "{}", reply.text);
    }
    // The other 210 are confirmed meanwhile, eight at a time.
    let queue = std::sync::Arc::new(std::sync::Mutex::new(unconfirmed));
    let confirming: Vec<_> = (0..8)
        .map(|_| {
            let (http, base, queue) = (t.http.clone(), t.base.clone(), queue.clone());
            tokio::spawn(async move {
                while let Some((token, dd_id)) = { queue.lock().unwrap().pop() } {
                    let reply = http
                        .post(format!("{base}/v1/dd/confirm"))
                        .bearer_auth(&token)
                        .json(&json!({ "dd_id": dd_id }))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(reply.status().as_u16(), 200);
                }
            })
        })
        .collect();
    while t.store.log_pending_count().await.unwrap() < 40 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let clock = t.clock.clone() as std::sync::Arc<dyn anchor_domain::Clock>;
    let mut last = None;
    let before = head_updates(&t).await;
    // A batch of 1,000 and a minute to drain: the round may go on, and does not.
    anchor_app::log::integrate(t.store.as_ref(), &t.log_key, clock.as_ref(), 1000, std::time::Duration::from_secs(60), &mut last)
        .await
        .unwrap();
    assert_eq!(head_updates(&t).await - before, 1.0, "one transaction for what was pending, none for what came after");
    for task in confirming {
        task.await.unwrap();
    }
    // The rest waits for the next rounds, and every record gets its leaf.
    while t.store.log_pending_count().await.unwrap() > 0 {
        anchor_app::log::integrate(t.store.as_ref(), &t.log_key, clock.as_ref(), 1000, std::time::Duration::ZERO, &mut last).await.unwrap();
    }
    assert_eq!(t.store.log_state().await.unwrap().size, 240);
}

/// Creates and confirms `n` EE_basic declarations (50 per agent), concurrently.
async fn anchor_many(t: &TestServer, n: usize) -> Vec<(String, String)> {
    let mut tasks = Vec::new();
    for chunk in 0..n.div_ceil(50) {
        let agent = t.register().await;
        let count = (n - chunk * 50).min(50);
        let (http, base) = (t.http.clone(), t.base.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for _ in 0..count {
                let body = create_body(json!({ "ee_preset": "EE_basic" }));
                let created: serde_json::Value = http
                    .post(format!("{base}/v1/dd/create"))
                    .bearer_auth(&agent.token)
                    .json(&body)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                let dd_id = created["dd_id"].as_str().expect("created").to_string();
                let confirmed = http
                    .post(format!("{base}/v1/dd/confirm"))
                    .bearer_auth(&agent.token)
                    .json(&json!({ "dd_id": dd_id }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(confirmed.status().as_u16(), 200);
                out.push((agent.token.clone(), dd_id));
            }
            out
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

async fn receipt(t: &TestServer, token: &str, dd_id: &str) -> Receipt {
    let reply = t.get(&format!("/v1/dd/{dd_id}/receipt"), Some(token)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    serde_json::from_value(reply.json).expect("receipt shape")
}

async fn a_thousand_receipts_verify_offline(backend: Backend) {
    let t = TestServer::start(backend).await;
    let anchored = anchor_many(&t, 1000).await;
    t.wait_for_log(1000).await;
    let mut indices = BTreeSet::new();
    for (token, dd_id) in &anchored {
        let receipt = receipt(&t, token, dd_id).await;
        let verified = verify_receipt(&receipt, &t.log_key.vkey).unwrap_or_else(|e| panic!("{dd_id}: {e}"));
        assert!(indices.insert(verified.leaf_index), "leaf {} used twice", verified.leaf_index);
    }
    // Every confirmed declaration is in the log exactly once, at dense indices.
    assert_eq!(indices, (0..1000).collect::<BTreeSet<u64>>());
    assert_eq!(t.store.log_pending_count().await.unwrap(), 0);
    // Someone else's receipt is refused, and an unconfirmed declaration has none.
    let stranger = t.register().await;
    t.get(&format!("/v1/dd/{}/receipt", anchored[0].1), Some(&stranger.token)).await.assert_error(403, "FORBIDDEN");
    let pending = t.create(&stranger, basic_axes()).await;
    t.get(&format!("/v1/dd/{}/receipt", pending["dd_id"].as_str().unwrap()), Some(&stranger.token))
        .await
        .assert_error(409, "NOT_CONFIRMED");
}

async fn tampering_is_caught_by_a_named_check(backend: Backend) {
    let t = TestServer::start(backend).await;
    let anchored = anchor_many(&t, 6).await;
    let checkpoint = t.wait_for_log(6).await;
    for (token, dd_id) in &anchored {
        verify_receipt(&receipt(&t, token, dd_id).await, &t.log_key.vkey).expect("untouched receipts verify");
    }
    let check_of = |receipt: &Receipt| verify_receipt(receipt, &t.log_key.vkey).expect_err("tampering went unnoticed").check();

    // A stored record field.
    let (token, victim) = &anchored[0];
    t.tamper(&format!("update declaration set decision_action_type = 'reject' where dd_id = {}", t.uuid_sql(victim))).await;
    assert_eq!(check_of(&receipt(&t, token, victim).await), "record", "a changed field no longer hashes to integrity_hash");

    // The stored integrity hash, rewritten to match nothing the log holds.
    let (token, victim) = &anchored[1];
    let forged = format!("sha256:{}", "ab".repeat(32));
    t.tamper(&format!("update declaration set integrity_hash = '{forged}' where dd_id = {}", t.uuid_sql(victim))).await;
    assert_eq!(check_of(&receipt(&t, token, victim).await), "record");

    // A stored tree node: the level-0 hash of one leaf breaks its neighbour's proof.
    let (token, neighbour) = &anchored[3];
    let neighbour_index = receipt(&t, token, neighbour).await.leaf_index;
    let sibling = neighbour_index ^ 1;
    let node = tlog_tiles::stored_hash_index(0, sibling);
    let zero = match t.backend {
        Backend::Sqlite => format!("X'{}'", "00".repeat(32)),
        Backend::Postgres => format!("decode('{}', 'hex')", "00".repeat(32)),
    };
    t.tamper(&format!("update log_hash set hash = {zero} where hash_index = {node}")).await;
    assert_eq!(check_of(&receipt(&t, token, neighbour).await), "inclusion", "a changed node leads to another root");

    // A stored leaf: the published entries no longer hash to the signed root.
    let bundle = t.http.get(t.url(&format!("/v1/log/tile/entries/000.p/{}", checkpoint.size))).send().await.unwrap().bytes().await.unwrap();
    let leaves = anchor_verify::parse_entry_bundle(&bundle).unwrap();
    anchor_verify::verify_entries(&leaves, &checkpoint.note, &t.log_key.vkey).expect("entries match before tampering");
    t.tamper("update log_entry set leaf_data = leaf_data || leaf_data where leaf_index = 2").await;
    let bundle = t.http.get(t.url(&format!("/v1/log/tile/entries/000.p/{}", checkpoint.size))).send().await.unwrap().bytes().await.unwrap();
    let leaves = anchor_verify::parse_entry_bundle(&bundle).unwrap();
    let failure = anchor_verify::verify_entries(&leaves, &checkpoint.note, &t.log_key.vkey).unwrap_err();
    assert_eq!(failure.check(), "leaf");

    // The signed checkpoint itself.
    let (token, intact) = &anchored[5];
    let mut forged = receipt(&t, token, intact).await;
    forged.checkpoint = forged.checkpoint.replacen(&format!("\n{}\n", forged.tree_size), &format!("\n{}\n", forged.tree_size + 1), 1);
    assert_eq!(check_of(&forged), "signature");
    // Another key than the log's.
    let other = anchor_app::log::LogKey::generate("anchor.test/log").unwrap();
    let honest = receipt(&t, token, intact).await;
    assert_eq!(verify_receipt(&honest, &other.vkey).unwrap_err().check(), "signature");
}

/// Parses and verifies a checkpoint with nothing from the service's crates or
/// the note/tlog crates: the C2SP signed-note and tlog-checkpoint formats and
/// the RFC 6962 tree hash, written here from the specifications, with
/// ed25519-dalek for the signature.
async fn checkpoints_verify_with_an_independent_implementation(backend: Backend) {
    let t = TestServer::start(backend).await;
    anchor_many(&t, 37).await;
    t.wait_for_log(37).await;
    let note = t.get("/v1/log/checkpoint", None).await.text;

    // tlog-checkpoint body, a blank line, signature lines "— <name> <base64>".
    let (body, signatures) = note.split_once("\n\n").expect("a signed note has a blank line");
    let body = format!("{body}\n");
    let lines: Vec<&str> = body.lines().collect();
    let origin = lines[0];
    let size: u64 = lines[1].parse().expect("size line");
    let root = base64::engine::general_purpose::STANDARD.decode(lines[2]).expect("root line");
    assert_eq!(origin, "anchor.test/log");

    // The verifier key: <name>+<hex key id>+<base64 of 0x01 || Ed25519 public key>.
    let vkey: Vec<&str> = t.log_key.vkey.splitn(3, '+').collect();
    let key_bytes = base64::engine::general_purpose::STANDARD.decode(vkey[2]).unwrap();
    assert_eq!(key_bytes[0], 0x01, "Ed25519 algorithm byte");
    let mut id_input = vkey[0].as_bytes().to_vec();
    id_input.push(b'\n');
    id_input.extend_from_slice(&key_bytes);
    let key_id = &Sha256::digest(&id_input)[..4];
    assert_eq!(hex::encode(key_id), vkey[1]);
    let public = ed25519_dalek::VerifyingKey::from_bytes(key_bytes[1..].try_into().unwrap()).unwrap();

    let mut verified = 0;
    for line in signatures.lines() {
        let rest = line.strip_prefix("\u{2014} ").expect("signature lines start with an em dash");
        let (name, sig) = rest.split_once(' ').unwrap();
        let sig = base64::engine::general_purpose::STANDARD.decode(sig).unwrap();
        if name == origin && &sig[..4] == key_id {
            let signature = ed25519_dalek::Signature::from_bytes(sig[4..].try_into().unwrap());
            public.verify_strict(body.as_bytes(), &signature).expect("the signature verifies");
            verified += 1;
        }
    }
    assert_eq!(verified, 1);

    // RFC 6962 Merkle tree hash over the published entries, written out here.
    fn mth(leaves: &[Vec<u8>]) -> [u8; 32] {
        match leaves.len() {
            0 => Sha256::digest([]).into(),
            1 => Sha256::new().chain_update([0u8]).chain_update(&leaves[0]).finalize().into(),
            n => {
                let k = n.next_power_of_two() / 2;
                let k = if k == n { n / 2 } else { k };
                Sha256::new().chain_update([1u8]).chain_update(mth(&leaves[..k])).chain_update(mth(&leaves[k..])).finalize().into()
            }
        }
    }
    let bundle = t.http.get(t.url(&format!("/v1/log/tile/entries/000.p/{size}"))).send().await.unwrap().bytes().await.unwrap();
    let mut leaves = Vec::new();
    let mut rest = &bundle[..];
    while !rest.is_empty() {
        let len = u16::from_be_bytes([rest[0], rest[1]]) as usize;
        leaves.push(rest[2..2 + len].to_vec());
        rest = &rest[2 + len..];
    }
    assert_eq!(leaves.len() as u64, size);
    assert_eq!(mth(&leaves).to_vec(), root, "the signed root is the RFC 6962 hash of the published leaves");
    // Leaves are content-blind: an integrity hash and a time, nothing else.
    let first = String::from_utf8(leaves[0].clone()).unwrap();
    let fields: Vec<&str> = first.lines().collect();
    assert_eq!(fields.len(), 3, "{first}");
    assert_eq!(fields[0], "anchor-leaf/1");
    assert!(fields[1].starts_with("sha256:") && fields[2].ends_with('Z'));

    // The level-0 hash tile holds the RFC 6962 leaf hashes, 32 bytes each.
    let tile = t.http.get(t.url(&format!("/v1/log/tile/0/000.p/{size}"))).send().await.unwrap().bytes().await.unwrap();
    assert_eq!(tile.len() as u64, 32 * size);
    let first_leaf: [u8; 32] = Sha256::new().chain_update([0u8]).chain_update(&leaves[0]).finalize().into();
    assert_eq!(&tile[..32], &first_leaf);
    assert_eq!(t.get(&format!("/v1/log/tile/0/000.p/{}", size + 1), None).await.status, StatusCode::NOT_FOUND);
}

async fn consecutive_checkpoints_are_consistent(backend: Backend) {
    let t = TestServer::start(backend).await;
    let mut notes = Vec::new();
    for round in 1..=4 {
        anchor_many(&t, 13).await;
        let checkpoint = t.wait_for_log(13 * round).await;
        notes.push(checkpoint);
    }
    for pair in notes.windows(2) {
        let (old, new) = (&pair[0], &pair[1]);
        let proof: ConsistencyProof =
            serde_json::from_value(t.get(&format!("/v1/log/consistency?from={}&to={}", old.size, new.size), None).await.json).unwrap();
        verify_consistency(&old.note, &new.note, &proof, &t.log_key.vkey).expect("consistent");
        // The same proof does not join the later tree to a different earlier one.
        let forged =
            ConsistencyProof { from_size: old.size as u64, to_size: new.size as u64, proof: proof.proof.iter().rev().cloned().collect() };
        if proof.proof.len() > 1 {
            assert_eq!(verify_consistency(&old.note, &new.note, &forged, &t.log_key.vkey).unwrap_err().check(), "consistency");
        }
    }
    let published = t.get(&format!("/v1/log/checkpoints/{}", notes[0].size), None).await;
    assert_eq!(published.text, notes[0].note);
    let key = t.get("/v1/log/key", None).await.json;
    assert_eq!(key["public_key"], json!(t.log_key.vkey));
    t.get("/v1/log/consistency?from=5&to=1", None).await.assert_error(400, "INVALID_VALUE");
}
