-- Shared group commit (decision 0075): the host that commits the hot path's
-- batches for every host holding the same peer key, until its lease runs
-- out, and where the others send their batches. An expand migration: a
-- table older builds never read.
create table commit_lease (
    commit_lease_id integer primary key check (commit_lease_id = 0),
    holder blob,
    address text,
    protocol text,
    expires_at text not null
);
insert into commit_lease (commit_lease_id, holder, address, protocol, expires_at) values (0, null, null, null, '1970-01-01T00:00:00+00:00');
insert into migration_rules (version, runs_beside_builds_from) values (42, 0);
