-- Trace links (decision 0068): the key under which a record's salt commits
-- to the trace id of the run that made the decision, when the create carried
-- a W3C traceparent. Null otherwise. The trace id itself is stored nowhere.
-- An expand migration: the record's encoding is unchanged, so an older host
-- hashes, confirms and serves such a record as any other (its receipt just
-- lacks the key).
alter table declaration add column trace_key bytea;
insert into migration_rules (version, runs_beside_builds_from) values (41, 0);
