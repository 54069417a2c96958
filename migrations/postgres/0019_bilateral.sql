-- Bilateral declarations: a proposal paid like DD create (reserved over
-- x402, settled when the proposer confirms), which the counterparty accepts
-- (its own record is created, mirroring the declared fields, at no charge)
-- or rejects; unanswered by the payment window's end it expires. Rejection
-- and expiry release the reservation.

create table bilateral_agreement (
    agreement_id uuid primary key,
    proposer_agent_id uuid not null references agent (agent_id),
    counterparty_agent_id uuid not null references agent (agent_id),
    proposer_dd_id uuid not null unique references declaration (dd_id),
    counterparty_dd_id uuid unique references declaration (dd_id),
    status text not null check (status in ('proposed', 'accepted', 'rejected', 'expired')),
    proposed_at timestamptz not null,
    expires_at timestamptz not null,
    responded_at timestamptz,
    check (proposer_agent_id <> counterparty_agent_id)
);
create index bilateral_received on bilateral_agreement (counterparty_agent_id, proposed_at);
create index bilateral_sent on bilateral_agreement (proposer_agent_id, proposed_at);
create index bilateral_due on bilateral_agreement (expires_at) where status = 'proposed';

alter table declaration add column agreement_id uuid;
