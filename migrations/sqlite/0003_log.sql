-- The verifiable log: an append-only RFC 6962 Merkle tree of confirmed
-- declarations. Leaves carry an integrity hash and an anchoring time only;
-- which declaration a leaf belongs to is kept here, privately.

-- Written by confirm in the same transaction as the declaration; drained by the integrator.
create table log_pending (
    dd_id blob primary key references declaration (dd_id),
    leaf_data blob not null,
    enqueued_at text not null
);
create index log_pending_order on log_pending (enqueued_at, dd_id);

-- Dense indices 0..size-1, assigned by the integrator; never updated.
create table log_entry (
    leaf_index integer primary key,
    dd_id blob not null unique references declaration (dd_id),
    leaf_data blob not null,
    integrated_at text not null
);

-- Every stored hash of the tree (tlog "stored hash index" numbering).
create table log_hash (
    hash_index integer primary key,
    hash blob not null
);

-- The tree head and its right edge (the roots of the complete subtrees that
-- make up `size`), changed only under this row's lock.
create table log_state (
    log_state_id integer primary key check (log_state_id = 0),
    size integer not null,
    root blob not null,
    edge blob not null,
    updated_at text not null
);
insert into log_state (log_state_id, size, root, edge, updated_at)
values (0, 0, X'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', X'', '2026-11-21T00:00:00+00:00');

-- Every signed checkpoint ever published.
create table log_checkpoint (
    size integer primary key,
    root blob not null,
    note text not null,
    published_at text not null
);

-- Who integrates: one holder at a time, until its lease runs out.
create table log_lease (
    log_lease_id integer primary key check (log_lease_id = 0),
    holder blob,
    expires_at text not null
);
insert into log_lease (log_lease_id, holder, expires_at) values (0, null, '1970-01-01T00:00:00+00:00');
