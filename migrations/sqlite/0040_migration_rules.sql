-- Rolling upgrades (decision 0067): for every migration from this one on,
-- the oldest build it runs beside, as the newest migration that build
-- carries. 0: an expand migration, which only adds what older builds
-- ignore; a host of any build serves beside it. A contract migration names
-- the release that stopped using what it removes. Each migration inserts
-- its own row, in its own transaction, so a host of an older build reading
-- the rules never sees a migration without one.
create table migration_rules (
    version integer primary key,
    runs_beside_builds_from integer not null check (runs_beside_builds_from >= 0)
);
-- 0039 (SCITT entries) only created a table: an expand migration.
insert into migration_rules (version, runs_beside_builds_from) values (39, 0), (40, 0);
