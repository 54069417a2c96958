-- sDAC: simulated pricing with accountability removed. A session counts its
-- trials (each an EE combination and what the real generation would charge:
-- enums and amounts, no declaration, no log leaf) and, at its end, is
-- charged a share of the simulated total. One open session per agent; one
-- live x402 payment per session.

create table sdac_session (
    session_id uuid primary key,
    agent_id uuid not null references agent (agent_id),
    started_at timestamptz not null,
    ended_at timestamptz,
    trials integer not null default 0 check (trials >= 0),
    simulated_milli bigint not null default 0 check (simulated_milli >= 0),
    charged_milli bigint not null default 0 check (charged_milli >= 0),
    payment_source text check (payment_source in ('trial', 'external')),
    payment_id uuid references x402_payment (payment_id)
);
create unique index sdac_session_open on sdac_session (agent_id) where ended_at is null;

create table sdac_trial (
    trial_id uuid primary key,
    session_id uuid not null references sdac_session (session_id),
    position integer not null,
    retention text not null,
    integrity text not null,
    disclosure text not null,
    responsibility text not null,
    content_scope text not null,
    delegation text not null,
    total_milli bigint not null check (total_milli >= 0),
    at timestamptz not null,
    unique (session_id, position)
);
create unique index x402_payment_one_per_sdac on x402_payment (subject_id)
    where subject_domain = 'sdac_session' and status in ('reserved', 'settled', 'settle_unknown');
