-- A batch of creates paid over x402 in one statement (decision 0090) needs
-- a function on PostgreSQL only: SQLite's one writer runs each batch alone.
insert into migration_rules (version, runs_beside_builds_from) values (46, 0);
