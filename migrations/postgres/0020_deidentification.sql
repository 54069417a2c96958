-- De-identification: a record past its retention end keeps only what the
-- verifiable log and the money need. Its row stays (its log leaf points at
-- it) under a key derived from its id by a one-way hash, so that the id is
-- found nowhere while reading it still answers 410 RECORD_DEIDENTIFIED; it no
-- longer names its agent (it belongs to the nil agent below), its request,
-- EE or lineage group (all set to the new key), its parent, salt, template or
-- decision time.
-- Its ARA counts move from its agent's rows into id-free monthly buckets.

alter table declaration add column deidentified_at timestamptz;
drop index declaration_retention_end;
create index declaration_deidentify_due on declaration (retention_expires_at)
    where retention_expires_at is not null and deidentified_at is null;

-- The owner of every de-identified record: no token or recovery key hashes
-- to 32 zero bytes, so nobody can act as it.
insert into agent (agent_id, token_hash, recovery_hash, registered_at, trial_granted_milli, trial_balance_milli, trial_expires_at)
values ('00000000-0000-0000-0000-000000000000', decode(repeat('00', 32), 'hex'), decode(repeat('00', 32), 'hex'),
        '1970-01-01T00:00:00+00:00', 0, 0, '1970-01-01T00:00:00+00:00');

-- What a branch-1 declaration's band positions added to its agent's ARA
-- counts when it was folded (they depend on the agent's other records at that
-- time, so they are kept to be taken back exactly); gone at de-identification.
create table ara_band (
    dd_id uuid not null,
    dimension text not null,
    value text not null,
    visibility integer not null,
    primary key (dd_id, dimension)
);

-- De-identified statistics: shared ARA counts of records past their
-- retention, per UTC month (year * 12 + month - 1), with no agent and no record.
create table ara_deidentified_month (
    month integer not null,
    dimension text not null,
    value text not null,
    n bigint not null,
    primary key (month, dimension, value)
);

-- The record's links are moved to its new key in the batch's transaction:
-- the foreign keys that point at it are checked at its commit.
alter table log_entry alter constraint log_entry_dd_id_fkey deferrable initially immediate;
alter table declaration alter constraint declaration_parent_dd_id_fkey deferrable initially immediate;

-- What a batch looks up by a record's id besides the record itself.
create index declaration_by_parent on declaration (parent_dd_id) where parent_dd_id is not null;
create index earned_entry_by_reference on earned_entry (reference_kind, reference_id) where reference_id is not null;

-- An agent's demoted records by anchoring time (its own ARA timeline counts them).
create index declaration_demoted on declaration (agent_id, anchored_at) where retention_demoted_at is not null;
