-- One row per ARA observation: who observed what, at which resolution, what
-- it cost and which payment paid it. Spending reports (DUR) sum ARA from here.
-- Nothing in it names a declaration of another agent.

create table ara_observation (
    observation_id blob primary key,
    observer_agent_id blob not null references agent (agent_id),
    target_agent_id blob references agent (agent_id),
    kind text not null,
    resolution_level integer not null,
    base_milli integer not null,
    premium_milli integer not null,
    premium_source text,
    payment_id blob references x402_payment (payment_id),
    observed_at text not null
);
create index ara_observation_by_observer on ara_observation (observer_agent_id, observed_at);
