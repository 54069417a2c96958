-- A payment sent again resumes (decision 0085): on a route that only reads
-- (an observation), the payment keeps a digest of the request it paid for,
-- so the same payment sent again by its agent with the same request is
-- answered again, charged once. An expand migration: older builds never
-- write it (their payments answer a second sending 409, as before).
alter table x402_payment add column request_digest bytea;
insert into migration_rules (version, runs_beside_builds_from) values (45, 0);
