-- External payments over x402 v2: one row per authorization, with its status
-- history. A (network, asset, payer, nonce) is used at most once, whichever
-- host receives it.

create table x402_payment (
    payment_id blob primary key,
    network text not null,
    asset text not null,
    payer text not null,
    nonce text not null,
    amount_units integer not null,
    pay_to text not null,
    valid_after integer not null,
    valid_before integer not null,
    route text not null,
    agent_id blob not null references agent (agent_id),
    dd_id blob references declaration (dd_id),
    -- The decoded PaymentPayload, for audit and reconciliation.
    payload text not null,
    -- reserved, settled, released, settle_failed, settle_unknown
    status text not null,
    error_reason text,
    settlement_ref text,
    created_at text not null,
    updated_at text not null,
    constraint x402_payment_nonce unique (network, asset, payer, nonce)
);
create index x402_payment_by_dd on x402_payment (dd_id);

create table x402_payment_event (
    payment_id blob not null references x402_payment (payment_id),
    status text not null,
    reason text,
    at text not null
);
create index x402_payment_event_by_payment on x402_payment_event (payment_id, at);

-- An externally paid declaration must be confirmed before this time.
alter table declaration add column payment_deadline text;
