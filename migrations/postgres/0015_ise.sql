-- ISE: an agent's stays in the idle state. Only entry, exit, duration and
-- what the stay cost are kept; an agent has one open stay at a time. A stay
-- paid over x402 has one live payment: a second exit racing the first
-- cannot pay for it again.

create table ise_session (
    session_id uuid primary key,
    agent_id uuid not null references agent (agent_id),
    payment_mode text not null check (payment_mode in ('free', 'earned_only', 'external')),
    entered_at timestamptz not null,
    exited_at timestamptz,
    charged_milli bigint not null default 0 check (charged_milli >= 0),
    payment_source text check (payment_source in ('trial', 'external', 'earned')),
    payment_id uuid references x402_payment (payment_id),
    closed_by text check (closed_by in ('agent', 'service')),
    unpaid boolean not null default false
);
create unique index ise_session_open on ise_session (agent_id) where exited_at is null;
create index ise_session_due on ise_session (entered_at) where exited_at is null;
create index ise_session_by_agent on ise_session (agent_id, entered_at);
create unique index x402_payment_one_per_stay on x402_payment (subject_id)
    where subject_domain = 'ise_session' and status in ('reserved', 'settled', 'settle_unknown');
