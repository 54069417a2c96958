-- Earned DAC: what an agent earned (lots), what it spent from them and what
-- expired, as a ledger. A lot is consumed first-expiring first; each debit
-- remembers the lots it drew on, so that a refund restores those same lots.
-- Earned DAC belongs to one agent: nothing here moves it to another.

create table earned_lot (
    lot_id blob primary key,
    agent_id blob not null references agent (agent_id),
    amount_milli integer not null check (amount_milli > 0),
    remaining_milli integer not null check (remaining_milli >= 0 and remaining_milli <= amount_milli),
    earned_at text not null,
    expires_at text not null,
    expired boolean not null default false
);
create index earned_lot_fifo on earned_lot (agent_id, expires_at, earned_at, lot_id);
create index earned_lot_due on earned_lot (expires_at) where not expired;

create table earned_entry (
    entry_id blob primary key,
    agent_id blob not null references agent (agent_id),
    seq integer not null,
    kind text not null check (kind in ('credit', 'debit', 'expiry', 'refund')),
    reason text not null,
    amount_milli integer not null check (amount_milli > 0),
    balance_after_milli integer not null check (balance_after_milli >= 0),
    lot_id blob references earned_lot (lot_id),
    reference_kind text,
    reference_id blob,
    refunded boolean not null default false,
    at text not null,
    unique (agent_id, seq)
);

create table earned_draw (
    entry_id blob not null references earned_entry (entry_id),
    lot_id blob not null references earned_lot (lot_id),
    amount_milli integer not null check (amount_milli > 0),
    primary key (entry_id, lot_id)
);
