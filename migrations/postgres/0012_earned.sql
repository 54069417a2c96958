-- Earned DAC: what an agent earned (lots), what it spent from them and what
-- expired, as a ledger. A lot is consumed first-expiring first; each debit
-- remembers the lots it drew on, so that a refund restores those same lots.
-- Earned DAC belongs to one agent: nothing here moves it to another.

create table earned_lot (
    lot_id uuid primary key,
    agent_id uuid not null references agent (agent_id),
    amount_milli bigint not null check (amount_milli > 0),
    remaining_milli bigint not null check (remaining_milli >= 0 and remaining_milli <= amount_milli),
    earned_at timestamptz not null,
    expires_at timestamptz not null,
    expired boolean not null default false
);
create index earned_lot_fifo on earned_lot (agent_id, expires_at, earned_at, lot_id);
create index earned_lot_due on earned_lot (expires_at) where not expired;

create table earned_entry (
    entry_id uuid primary key,
    agent_id uuid not null references agent (agent_id),
    seq bigint not null,
    kind text not null check (kind in ('credit', 'debit', 'expiry', 'refund')),
    reason text not null,
    amount_milli bigint not null check (amount_milli > 0),
    balance_after_milli bigint not null check (balance_after_milli >= 0),
    lot_id uuid references earned_lot (lot_id),
    reference_kind text,
    reference_id uuid,
    refunded boolean not null default false,
    at timestamptz not null,
    unique (agent_id, seq)
);

create table earned_draw (
    entry_id uuid not null references earned_entry (entry_id),
    lot_id uuid not null references earned_lot (lot_id),
    amount_milli bigint not null check (amount_milli > 0),
    primary key (entry_id, lot_id)
);
