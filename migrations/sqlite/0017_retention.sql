-- Indefinite retention: one subscription per agent, billed monthly from
-- Earned DAC; its state (active, grace, expired) is read off its timestamps.
-- Every declaration stores when its retention ends (null: indefinite while a
-- subscription holds) and when an ended subscription demoted it.

create table retention_subscription (
    agent_id blob primary key references agent (agent_id),
    subscribed_at text not null,
    activated_at text not null,
    next_billing_at text not null,
    grace_started_at text,
    grace_ends_at text,
    cancelled_at text,
    expired_at text,
    months_billed integer not null default 0 check (months_billed >= 0),
    demoted_count integer not null default 0 check (demoted_count >= 0)
);
create index retention_subscription_billing on retention_subscription (next_billing_at)
    where grace_started_at is null and expired_at is null;
create index retention_subscription_grace on retention_subscription (grace_ends_at)
    where grace_started_at is not null and expired_at is null;

alter table declaration add column retention_expires_at text;
alter table declaration add column retention_demoted_at text;
update declaration set retention_expires_at = strftime('%Y-%m-%dT%H:%M:%S+00:00', anchored_at,
    case ee_retention_period when 'short' then '+90 days' when 'medium' then '+365 days'
        when 'long' then '+1825 days' else '+3650 days' end)
    where ee_retention_period <> 'indefinite';
create index declaration_retention_end on declaration (retention_expires_at) where retention_expires_at is not null;
create index declaration_indefinite on declaration (agent_id) where retention_expires_at is null;
