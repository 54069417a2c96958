//! De-identification past the retention end: the record answers 410, its
//! identifiers are gone from every table, ARA keeps counting it (id-free),
//! a receipt saved earlier still verifies offline, an interrupted batch
//! leaves nothing behind and the next run finishes it, and two hosts running
//! the job at once take each record once.

use anchor_domain::Clock;
use anchor_tests::*;
use anchor_verify::{ConsistencyProof, Receipt, verify_consistency, verify_receipt};
use chrono::Duration;
use serde_json::{Value, json};

both_backends!(
    records_past_their_retention_become_id_free_statistics,
    an_interrupted_batch_leaves_nothing_and_the_next_run_finishes,
    two_hosts_at_once_take_each_record_once
);

/// The jobs run only when the test says (one round: integrate, fold, de-identify).
async fn server(backend: Backend) -> TestServer {
    TestServer::with(backend, Options { jobs: false, ..Default::default() }).await
}

async fn round(t: &TestServer) {
    let schedule = anchor_app::jobs::Schedule::default();
    let mut runs = anchor_app::jobs::Runs::default();
    assert!(anchor_app::jobs::round(&t.state.app, &t.log_key, uuid::Uuid::from_u128(1), &schedule, &mut runs).await);
}

/// Creates (and confirms, unless told not to) a record; its create answer.
async fn record(t: &TestServer, agent: &Agent, ee: Value, template: bool, parent: Option<&str>, confirm: bool) -> Value {
    let mut body = create_body(ee);
    if template {
        body["content_inclusion_flag"] = json!(1);
        body["template"] = json!({ "decision_class": "payment", "decision_scale_value": 12.5, "decision_scale_unit": "USDC" });
    }
    if let Some(parent) = parent {
        body["dd"]["parent_dd_id"] = json!(parent);
    }
    let reply = t.post("/v1/dd/create", Some(&agent.token), &body).await;
    assert_eq!(reply.status.as_u16(), 201, "{}", reply.text);
    let mut created = reply.json;
    created["request_id"] = body["request_id"].clone();
    if confirm {
        let confirmed = t.confirm(agent, created["dd_id"].as_str().unwrap()).await;
        assert_eq!(confirmed.status.as_u16(), 200, "{}", confirmed.text);
    }
    created
}

fn medium() -> Value {
    let mut ee = basic_axes();
    ee["ee_retention_period"] = json!("medium");
    ee
}

fn id(created: &Value) -> &str {
    created["dd_id"].as_str().unwrap()
}

/// The shared ARA counts, per dimension and value: the agents' rows plus the
/// id-free buckets.
async fn shared_counts(t: &TestServer) -> Vec<String> {
    t.strings(
        "select dimension || '=' || value || '=' || cast(sum(n) as text) from (\
           select dimension, value, n from ara_agent_day where visibility = 0 \
           union all select dimension, value, n from ara_deidentified_month) counted \
         group by dimension, value order by dimension, value",
    )
    .await
}

/// Every table of the database, with the columns where `id` (a UUID) occurs.
async fn where_is(t: &TestServer, id: &str) -> Vec<String> {
    let hex = id.replace('-', "");
    let tables = match t.backend {
        Backend::Sqlite => {
            t.strings(
                "select name from sqlite_master where type = 'table' and name not like 'sqlite_%' and name not like '_sqlx%' order by name",
            )
            .await
        }
        Backend::Postgres => {
            t.strings(
                "select table_name::text from information_schema.tables where table_schema = current_schema() \
                 and table_name not like '_sqlx%' order by 1",
            )
            .await
        }
    };
    assert!(tables.len() >= 40, "every table is searched: {tables:?}");
    let mut found = Vec::new();
    for table in tables {
        let columns = match t.backend {
            Backend::Sqlite => t.strings(&format!("select name from pragma_table_info('{table}')")).await,
            Backend::Postgres => {
                t.strings(&format!(
                    "select column_name::text from information_schema.columns where table_schema = current_schema() and table_name = '{table}'"
                ))
                .await
            }
        };
        for column in columns {
            let hit = match t.backend {
                Backend::Sqlite => format!("cast(\"{column}\" as text) like '%{id}%' or hex(\"{column}\") like '%{}%'", hex.to_uppercase()),
                Backend::Postgres => format!("cast(\"{column}\" as text) like '%{id}%' or cast(\"{column}\" as text) like '%{hex}%'"),
            };
            let n = t.scalar(&format!("select count(*) from \"{table}\" where {hit}")).await;
            if n > 0 {
                found.push(format!("{table}.{column}"));
            }
        }
    }
    found
}

async fn records_past_their_retention_become_id_free_statistics(backend: Backend) {
    let t = server(backend).await;
    let agent = t.register().await;
    let gone = record(&t, &agent, basic_axes(), true, None, true).await;
    t.clock.advance(Duration::minutes(1));
    let unconfirmed = record(&t, &agent, basic_axes(), false, None, false).await;
    let kept = record(&t, &agent, medium(), true, None, true).await;
    let child = record(&t, &agent, medium(), false, Some(id(&gone)), true).await;
    // An agent all of whose records go: afterwards only its account names it.
    let leaver = t.register().await;
    let leaver_records =
        [record(&t, &leaver, basic_axes(), true, None, true).await, record(&t, &leaver, basic_axes(), false, None, true).await];
    round(&t).await;
    let leaver_usage = t.scalar(&format!("select count(*) from usage_entry where agent_id = {}", t.uuid_sql(&leaver.id))).await;
    assert!(leaver_usage > 0);
    let receipt_reply = t.get(&format!("/v1/dd/{}/receipt", id(&gone)), Some(&agent.token)).await;
    assert_eq!(receipt_reply.status.as_u16(), 200, "{}", receipt_reply.text);
    let saved: Receipt = serde_json::from_value(receipt_reply.json).unwrap();
    verify_receipt(&saved, &t.log_key.vkey).expect("the receipt verifies while the record is kept");
    let before = shared_counts(&t).await;
    assert!(before.iter().any(|c| c == "all=all=5"), "five shared records counted: {before:?}");
    let ee_id = match backend {
        Backend::Sqlite => "lower(hex(ee_id))",
        Backend::Postgres => "cast(ee_id as text)",
    };
    let ee_id = t.strings(&format!("select {ee_id} from declaration where dd_id = {}", t.uuid_sql(id(&gone)))).await;
    let gone_ee_id = uuid::Uuid::parse_str(&ee_id[0]).unwrap().to_string();

    // A minute before the end nothing moves; after it, the job takes the short ones.
    t.clock.advance(Duration::days(90) - Duration::minutes(2));
    round(&t).await;
    assert_eq!(t.get(&format!("/v1/payment/{}/status", id(&gone)), Some(&agent.token)).await.status.as_u16(), 200);
    t.clock.advance(Duration::minutes(3));
    assert_eq!(t.store.deidentify_backlog(t.clock.now()).await.unwrap(), 4);
    round(&t).await;
    assert_eq!(t.store.deidentify_backlog(t.clock.now()).await.unwrap(), 0);

    // Reads answer 410 RECORD_DEIDENTIFIED; what is kept answers as before.
    for path in [
        format!("/v1/dd/{}", id(&gone)),
        format!("/v1/dd/{}/receipt", id(&gone)),
        format!("/v1/dd/{}/lineage", id(&gone)),
        format!("/v1/payment/{}/status", id(&gone)),
        format!("/v1/dd/{}", id(&unconfirmed)),
    ] {
        t.get(&path, Some(&agent.token)).await.assert_error(410, "RECORD_DEIDENTIFIED");
    }
    t.confirm(&agent, id(&unconfirmed)).await.assert_error(410, "RECORD_DEIDENTIFIED");
    t.get(&format!("/v1/dd/{}", id(&gone)), Some(&leaver.token)).await.assert_error(410, "RECORD_DEIDENTIFIED");
    let mut orphan = create_body(medium());
    orphan["dd"]["parent_dd_id"] = json!(id(&gone));
    t.post("/v1/dd/create", Some(&agent.token), &orphan).await.assert_error(410, "RECORD_DEIDENTIFIED");
    let list = t.get("/v1/dd/list", Some(&agent.token)).await;
    assert_eq!(list.status.as_u16(), 200, "{}", list.text);
    let mut listed: Vec<String> = list.json["dds"].as_array().unwrap().iter().map(|d| d["dd_id"].as_str().unwrap().to_string()).collect();
    listed.sort();
    let mut expected = vec![id(&kept).to_string(), id(&child).to_string()];
    expected.sort();
    assert_eq!(listed, expected, "the agent's list holds only what is kept");
    let lineage = t.get(&format!("/v1/dd/{}/lineage", id(&child)), Some(&agent.token)).await;
    assert_eq!(lineage.status.as_u16(), 200, "{}", lineage.text);
    assert!(!lineage.text.contains(id(&gone)), "a kept record no longer names the gone one: {}", lineage.text);

    // ARA keeps counting every record, the gone ones in id-free buckets; the
    // agent's own counts hold only what it still has.
    assert_eq!(shared_counts(&t).await, before, "no shared count lost or added");
    assert_eq!(t.scalar("select cast(coalesce(sum(n), 0) as bigint) from ara_deidentified_month where dimension = 'all'").await, 3);
    let own = t.get(&format!("/v1/ara/agent/{}/profile", agent.id), Some(&agent.token)).await;
    assert_eq!(own.status.as_u16(), 200, "{}", own.text);

    // The saved receipt still verifies offline, and the log moved on consistently.
    verify_receipt(&saved, &t.log_key.vkey).expect("a receipt saved before de-identification verifies after it");
    let late = t.register().await;
    record(&t, &late, medium(), false, None, true).await;
    round(&t).await;
    let latest = t.wait_for_log(saved.tree_size as i64 + 1).await;
    let proof = t.get(&format!("/v1/log/consistency?from={}&to={}", saved.tree_size, latest.size), None).await;
    assert_eq!(proof.status.as_u16(), 200, "{}", proof.text);
    let proof: ConsistencyProof = serde_json::from_value(proof.json).unwrap();
    verify_consistency(&saved.checkpoint, &latest.note, &proof, &t.log_key.vkey).expect("consistent");

    // Nothing names the gone records any more: not their ids, requests or
    // EE, not even the kept child (its parent and lineage group now name the
    // gone record's one-way key).
    for gone_id in [id(&gone), id(&unconfirmed), id(&leaver_records[0]), id(&leaver_records[1])] {
        assert_eq!(where_is(&t, gone_id).await, Vec::<String>::new(), "dd_id {gone_id}");
    }
    for request in [&gone["request_id"], &unconfirmed["request_id"], &leaver_records[0]["request_id"]] {
        assert_eq!(where_is(&t, request.as_str().unwrap()).await, Vec::<String>::new(), "request_id {request}");
    }
    assert_eq!(where_is(&t, &gone_ee_id).await, Vec::<String>::new(), "ee_id");
    let key = anchor_domain::retention::deidentified_key(uuid::Uuid::parse_str(id(&gone)).unwrap()).to_string();
    let mut places = where_is(&t, &key).await;
    places.sort();
    let expected = [
        "declaration.dd_id",
        "declaration.ee_id",
        "declaration.lineage_group_id",
        "declaration.parent_dd_id",
        "declaration.request_id",
        "log_entry.dd_id",
    ];
    assert_eq!(places, expected, "the gone record's key replaces its id in its row, its leaf and the kept child's links");
    // The agent that had only short records: its account, its spending and
    // its rate-limit windows name it; no record, count or log row does.
    let places = where_is(&t, &leaver.id).await;
    let account = ["agent.agent_id", "usage_entry.agent_id", "attempt_window.subject", "attempt_window.subject_id"];
    assert!(places.iter().all(|p| account.contains(&p.as_str())), "the leaver is still named in {places:?}");
    assert!(places.contains(&"agent.agent_id".to_string()));
    let usage = t.scalar(&format!("select count(*) from usage_entry where agent_id = {}", t.uuid_sql(&leaver.id))).await;
    assert_eq!(usage, leaver_usage, "its spending stays");
}

async fn an_interrupted_batch_leaves_nothing_and_the_next_run_finishes(backend: Backend) {
    let t = server(backend).await;
    let agent = t.register().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        // Band positions compare a decision with the agent's earlier ones.
        t.clock.advance(Duration::minutes(1));
        ids.push(id(&record(&t, &agent, basic_axes(), true, None, true).await).to_string());
    }
    round(&t).await;
    let before = shared_counts(&t).await;
    let usage_before = t.scalar("select count(*) from usage_entry where dd_id is not null").await;
    t.clock.advance(Duration::days(91));

    // The batch fails at its last write (as a crash or a lost connection would).
    match backend {
        Backend::Sqlite => {
            t.tamper("create trigger interrupt before insert on ara_deidentified_month begin select raise(abort, 'interrupted'); end").await
        }
        Backend::Postgres => {
            t.tamper(
                "create function interrupt() returns trigger language plpgsql as $$ begin raise exception 'interrupted'; end $$; \
                 create trigger interrupt before insert on ara_deidentified_month for each row execute function interrupt()",
            )
            .await
        }
    }
    let failed = t.store.deidentify_due(t.clock.now(), 500).await;
    assert!(failed.is_err(), "the batch failed: {failed:?}");
    assert_eq!(t.scalar("select count(*) from declaration where deidentified_at is not null").await, 0, "no record half done");
    assert_eq!(shared_counts(&t).await, before, "no count moved");
    assert_eq!(t.scalar("select count(*) from usage_entry where dd_id is not null").await, usage_before);
    assert!(t.scalar("select count(*) from ara_band").await > 0, "band positions kept for the retry");
    for dd_id in &ids {
        assert_eq!(t.get(&format!("/v1/payment/{dd_id}/status"), Some(&agent.token)).await.status.as_u16(), 200);
    }

    // Resumed: two records in a first (bounded) batch, the last in the next.
    t.tamper(if backend == Backend::Postgres { "drop trigger interrupt on ara_deidentified_month" } else { "drop trigger interrupt" })
        .await;
    assert_eq!(t.store.deidentify_due(t.clock.now(), 2).await.unwrap().records, 2);
    assert_eq!(t.store.deidentify_due(t.clock.now(), 2).await.unwrap().records, 1);
    assert_eq!(t.store.deidentify_due(t.clock.now(), 2).await.unwrap().records, 0);
    for dd_id in &ids {
        t.get(&format!("/v1/dd/{dd_id}"), Some(&agent.token)).await.assert_error(410, "RECORD_DEIDENTIFIED");
    }
    assert_eq!(shared_counts(&t).await, before);
    assert_eq!(t.scalar("select count(*) from usage_entry where dd_id is not null").await, 0);
    assert_eq!(t.scalar("select count(*) from ara_band").await, 0);
}

async fn two_hosts_at_once_take_each_record_once(backend: Backend) {
    let t = server(backend).await;
    let mut agents = Vec::new();
    for _ in 0..3 {
        agents.push(t.register().await);
    }
    for i in 0..24 {
        record(&t, &agents[i % 3], basic_axes(), i % 2 == 0, None, true).await;
    }
    round(&t).await;
    let before = shared_counts(&t).await;
    t.clock.advance(Duration::days(91));
    let now = t.clock.now();
    let (a, b) = tokio::join!(t.store.deidentify_due(now, 500), t.store.deidentify_due(now, 500));
    let (a, b) = (a.unwrap(), b.unwrap());
    let left = t.store.deidentify_due(now, 500).await.unwrap();
    assert_eq!(a.records + b.records + left.records, 24, "{a:?} {b:?} {left:?}");
    assert_eq!(shared_counts(&t).await, before, "nothing taken twice");
    assert_eq!(t.scalar("select count(*) from ara_agent_day").await, 0, "every agent count moved");
    assert_eq!(t.scalar("select cast(sum(n) as bigint) from ara_deidentified_month where dimension = 'all'").await, 24);
}
