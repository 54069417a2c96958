-- ASA, the agent state archive: subscriptions bought in periods (over x402
-- or from Earned DAC) and the snapshots registered under them. A snapshot
-- is its hash and the opaque metadata the agent chose to send; the service
-- never holds the content or a key it could use.

create table asa_subscription (
    subscription_id blob primary key,
    agent_id blob not null references agent (agent_id),
    started_at text not null,
    -- The end of the paid periods; the grace follows it.
    expires_at text not null,
    grace_days integer not null check (grace_days >= 0),
    periods integer not null check (periods >= 1),
    renewed_count integer not null default 0 check (renewed_count >= 0),
    next_payment_source text check (next_payment_source in ('external', 'earned')),
    -- An Earned-paid period runs until this: the owner may not cancel before.
    earned_until text,
    cancelled_at text,
    cancelled_by text check (cancelled_by in ('agent', 'owner')),
    -- Cancelled, or expired and replaced by a new subscription.
    ended_at text
);
create unique index asa_subscription_live on asa_subscription (agent_id) where ended_at is null;
create index asa_subscription_by_agent on asa_subscription (agent_id, started_at);

-- Every purchase (subscribe or extend); an external one is pending from its
-- payment's reservation until the settlement completes it. One in flight per agent.
create table asa_purchase (
    purchase_id blob primary key,
    agent_id blob not null references agent (agent_id),
    kind text not null check (kind in ('subscribe', 'extend')),
    periods integer not null check (periods >= 1),
    period_days integer not null check (period_days >= 1),
    grace_days integer not null check (grace_days >= 0),
    amount_milli integer not null check (amount_milli >= 0),
    payment_source text not null check (payment_source in ('external', 'earned')),
    payment_id blob references x402_payment (payment_id),
    subscription_id blob references asa_subscription (subscription_id),
    status text not null check (status in ('pending', 'completed', 'failed')),
    created_at text not null,
    completed_at text
);
create unique index asa_purchase_in_flight on asa_purchase (agent_id) where status = 'pending';

create table asa_snapshot (
    snapshot_id blob primary key,
    agent_id blob not null references agent (agent_id),
    subscription_id blob not null references asa_subscription (subscription_id),
    blob_hash text not null check (length(blob_hash) = 64),
    blob_url text,
    blob_size_bytes integer check (blob_size_bytes >= 0),
    encrypted_key text,
    label text,
    registered_at text not null
);
create index asa_snapshot_latest on asa_snapshot (agent_id, registered_at);
create index asa_snapshot_by_hash on asa_snapshot (agent_id, blob_hash);
create unique index x402_payment_one_per_asa_purchase on x402_payment (subject_id)
    where subject_domain = 'asa_subscription' and status in ('reserved', 'settled', 'settle_unknown');
