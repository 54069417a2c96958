-- One row per ARA observation: who observed what, at which resolution, what
-- it cost and which payment paid it. Spending reports (DUR) sum ARA from here.
-- Nothing in it names a declaration of another agent.

create table ara_observation (
    observation_id uuid primary key,
    observer_agent_id uuid not null references agent (agent_id),
    target_agent_id uuid references agent (agent_id),
    kind text not null,
    resolution_level integer not null,
    base_milli bigint not null,
    premium_milli bigint not null,
    premium_source text,
    payment_id uuid references x402_payment (payment_id),
    observed_at timestamptz not null
);
create index ara_observation_by_observer on ara_observation (observer_agent_id, observed_at);
