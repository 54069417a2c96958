-- The raw-SQL yardstick for anchoring throughput: the fewest statements one
-- anchored declaration needs on PostgreSQL, without the service. Tables are
-- prefixed eq_ so they never meet the service's own.
drop table if exists eq_log_queue, eq_usage, eq_dd, eq_agent;
create table eq_agent (
    agent_id bigint primary key,
    trial_milli bigint not null,
    trial_expires timestamptz not null
);
create table eq_dd (
    dd_id uuid primary key,
    agent_id bigint not null references eq_agent,
    request_id uuid not null,
    status text not null,
    dd_unit_type text,
    dd_declaration_mode text,
    decision_type text,
    decision_action_type text,
    origin_context_type text,
    selection_state text,
    retention text,
    integrity_level text,
    disclosure text,
    responsibility text,
    pricing_version text,
    total_milli bigint not null,
    created_at timestamptz not null,
    anchored_at timestamptz,
    integrity_hash text,
    unique (agent_id, request_id)
);
create table eq_usage (
    id bigserial primary key,
    dd_id uuid not null,
    agent_id bigint not null,
    amount_milli bigint not null,
    source text,
    at timestamptz not null
);
create table eq_log_queue (
    id bigserial primary key,
    leaf bytea not null,
    at timestamptz not null
);
insert into eq_agent select g, 1000000000, now() + interval '30 days' from generate_series(1, 10000) g;
