//! Writing many agents and declarations directly in SQL (load programs).

use anchor_domain::MilliDac;
use anchor_ports::NewAgent;
use anchor_tests::*;
use uuid::Uuid;

/// `agents - 1` agents besides the ones the program registered, numbered in
/// the table `bench_agent` (k, agent_id) with every agent.
pub async fn agents(t: &TestServer, agents: usize, now: chrono::DateTime<chrono::Utc>) -> anyhow::Result<()> {
    for _ in 1..agents {
        let agent = NewAgent {
            agent_id: Uuid::new_v4(),
            token_hash: *Uuid::new_v4().as_bytes().repeat(2).first_chunk::<32>().expect("32 bytes"),
            recovery_hash: [0; 32],
            region_code: None,
            registered_at: now - chrono::Duration::days(120),
            trial_granted: MilliDac::ZERO,
            trial_expires_at: now - chrono::Duration::days(90),
        };
        t.store.insert_agent(&agent).await?;
    }
    number_agents(t).await;
    Ok(())
}

/// Every agent observable in full, and numbered in the table `bench_agent`
/// (k, agent_id), which the clones of [`rows`] are spread over.
pub async fn number_agents(t: &TestServer) {
    t.tamper("update agent set disclosure_level = 'full'").await;
    // The nil agent (the owner of de-identified records) is no bench agent.
    let nil = t.uuid_sql(&Uuid::nil().to_string());
    t.tamper(&format!(
        "create table bench_agent as select row_number() over (order by agent_id) - 1 as k, agent_id from agent where agent_id <> {nil}"
    ))
    .await;
    t.tamper("create index bench_agent_k on bench_agent (k)").await;
    t.tamper("create index bench_agent_id on bench_agent (agent_id)").await;
}

/// The observer, and two confirmed declarations of its own to clone: a
/// plain EE_basic one and a branch-1 one with a template.
#[allow(dead_code)] // deidbench clones templates of its own (no human involvement)
pub async fn templates(t: &TestServer) -> (Agent, String, String) {
    use serde_json::json;
    let observer = t.register().await;
    let plain = t.create(&observer, json!({ "ee_preset": "EE_basic" })).await["dd_id"].as_str().expect("dd_id").to_string();
    let mut body = create_body(json!({ "ee_preset": "EE_standard" }));
    body["content_inclusion_flag"] = json!(1);
    body["template"] =
        json!({ "decision_class": "payment", "decision_scale_value": 1, "decision_scale_unit": "USDC", "human_involvement": "approval" });
    let branch_one = t.post("/v1/dd/create", Some(&observer.token), &body).await.json["dd_id"].as_str().expect("dd_id").to_string();
    for dd in [&plain, &branch_one] {
        assert_eq!(t.confirm(&observer, dd).await.status.as_u16(), 200);
    }
    (observer, plain, branch_one)
}

/// The columns of `table`, in order.
pub async fn columns(t: &TestServer, backend: Backend, table: &str) -> Vec<String> {
    match backend {
        Backend::Sqlite => t.strings(&format!("select name from pragma_table_info('{table}') order by cid")).await,
        Backend::Postgres => {
            t.strings(&format!(
                "select column_name::text from information_schema.columns \
                 where table_schema = current_schema() and table_name = '{table}' order by ordinal_position"
            ))
            .await
        }
    }
}

/// Folds everything the log holds into ARA, as the job would; how many.
pub async fn fold_all(t: &TestServer) -> anyhow::Result<usize> {
    let mut folded = 0;
    loop {
        let n = anchor_app::ara::fold::round(&t.state.app, 50).await?;
        if n == 0 {
            return Ok(folded);
        }
        folded += n;
    }
}

/// Clones `declarations` declarations from the two templates (one in five
/// from `branch_one`), confirmed, with a log entry each and the log's size
/// set, as if the integrator had taken them.
pub async fn declarations(
    t: &TestServer,
    backend: Backend,
    declarations: usize,
    agents: usize,
    now: chrono::DateTime<chrono::Utc>,
    plain: &str,
    branch_one: &str,
) {
    rows(t, backend, declarations, agents, now, plain, branch_one).await;
    let stamp = match backend {
        Backend::Sqlite => format!("'{}'", now.to_rfc3339()),
        Backend::Postgres => format!("timestamptz '{}'", now.to_rfc3339()),
    };
    let zero = match backend {
        Backend::Sqlite => "x'00'",
        Backend::Postgres => "decode('00', 'hex')",
    };
    t.tamper(&format!(
        "insert into log_entry (leaf_index, dd_id, leaf_data, integrated_at) \
         select row_number() over (order by anchored_at, dd_id) - 1, dd_id, {zero}, {stamp} from declaration where confirmed_at is not null"
    ))
    .await;
    t.tamper("delete from log_pending").await;
    t.tamper("update log_state set size = (select count(*) from log_entry) where log_state_id = 0").await;
    t.tamper("analyze").await;
}

/// The declarations alone: `declarations` clones of the two templates (one
/// in five from `branch_one`), confirmed, by agent ordinal, 100,000 per
/// statement.
pub async fn rows(
    t: &TestServer,
    backend: Backend,
    declarations: usize,
    agents: usize,
    now: chrono::DateTime<chrono::Utc>,
    plain: &str,
    branch_one: &str,
) {
    let columns = columns(t, backend, "declaration").await;
    let chunk = 100_000;
    let mut lo = 0;
    while lo < declarations {
        let hi = (lo + chunk).min(declarations);
        t.tamper(&clone_statement(backend, t, &columns, lo, hi, agents, now, plain, branch_one)).await;
        lo = hi;
    }
}

/// `insert into declaration … select` cloning declarations `lo..hi` from the
/// two templates: a random id, an agent by ordinal, an anchoring time on one
/// of the agent's 20 active days, and a few varied axes.
#[allow(clippy::too_many_arguments)]
fn clone_statement(
    backend: Backend,
    t: &TestServer,
    columns: &[String],
    lo: usize,
    hi: usize,
    agents: usize,
    now: chrono::DateTime<chrono::Utc>,
    plain: &str,
    branch_one: &str,
) -> String {
    // Whole days before today's start, and seconds into the day.
    let day = format!("(1 + ((g.i / {agents}) % 20) * 4 + (a.k % 4))");
    let second = "((g.i * 7919) % 86000)";
    let today = now.timestamp() - now.timestamp() % 86_400;
    let (random_id, time, series) = match backend {
        Backend::Sqlite => (
            "randomblob(16)".to_string(),
            format!("strftime('%Y-%m-%dT%H:%M:%S+00:00', {today} - {day} * 86400 + {second}, 'unixepoch')"),
            format!("with recursive g(i) as (select {lo} union all select i + 1 from g where i < {}) ", hi - 1),
        ),
        Backend::Postgres => ("gen_random_uuid()".to_string(), format!("to_timestamp({today} - {day} * 86400 + {second})"), String::new()),
    };
    let from = match backend {
        Backend::Sqlite => "g".to_string(),
        Backend::Postgres => format!("generate_series(cast({lo} as bigint), {}) as g(i)", hi - 1),
    };
    // The service's record ids are UUIDv7 (`anchor_domain::record_id`): on
    // PostgreSQL the clones' are too, their time the clone's anchoring time,
    // so that the indexes keyed by them are shaped as the service's would be.
    let record_id = match backend {
        Backend::Sqlite => random_id.clone(),
        Backend::Postgres => format!(
            "cast(encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) placing \
             substring(int8send(cast(floor(extract(epoch from {time}) * 1000) as bigint)) from 3 for 6) from 1 for 6), \
             52, 1), 53, 1), 'hex') as uuid)"
        ),
    };
    let value = |column: &str| -> String {
        match column {
            "dd_id" | "ee_id" | "lineage_group_id" => record_id.clone(),
            "request_id" => random_id.clone(),
            "agent_id" => "a.agent_id".into(),
            "anchored_at" | "confirmed_at" => time.clone(),
            "decision_action_type" => {
                "case g.i % 7 when 0 then 'hold' when 1 then 'reject' when 2 then 'approve' else 'execute' end".into()
            }
            "tpl_decision_scale_value" => "case when t.content_inclusion then cast(g.i % 1000 as text) else null end".into(),
            other => format!("t.{other}"),
        }
    };
    let names = columns.join(", ");
    let values: Vec<String> = columns.iter().map(|c| value(c)).collect();
    format!(
        "{series}insert into declaration ({names}) select {} from {from} \
         join bench_agent a on a.k = g.i % {agents} \
         join declaration t on t.dd_id = (case when g.i % 5 = 0 then {} else {} end)",
        values.join(", "),
        uuid_literal(backend, t, branch_one),
        uuid_literal(backend, t, plain),
    )
}

/// A UUID literal that compares with the id column on both engines.
pub fn uuid_literal(backend: Backend, t: &TestServer, id: &str) -> String {
    match backend {
        Backend::Sqlite => t.uuid_sql(id),
        Backend::Postgres => format!("cast('{id}' as uuid)"),
    }
}

/// One ARA observation; a paid one answers its challenge first, and only
/// the paid request is timed.
#[allow(dead_code)] // deidbench includes this file and observes nothing
pub async fn observe(t: &TestServer, token: &str, path: &str, paid: bool) -> std::time::Duration {
    use anchor_domain::Clock;
    use anchor_tests::x402::{Twist, b64, pay};
    let bearer = format!("Bearer {token}");
    let mut signature = None;
    if paid {
        let challenge = t.http.get(t.url(path)).header("authorization", &bearer).send().await.expect("challenge");
        assert_eq!(challenge.status().as_u16(), 402, "{path}: {}", challenge.text().await.unwrap_or_default());
        let challenge: serde_json::Value = challenge.json().await.expect("challenge body");
        signature = Some(b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default())));
    }
    let mut request = t.http.get(t.url(path)).header("authorization", &bearer);
    if let Some(signature) = &signature {
        request = request.header("payment-signature", signature);
    }
    let started = std::time::Instant::now();
    let response = request.send().await.expect("observation");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let elapsed = started.elapsed();
    assert_eq!(status, 200, "{path}: {text}");
    elapsed
}
