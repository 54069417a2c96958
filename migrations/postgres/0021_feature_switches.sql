-- Areas switched on or off by the operator while the service runs
-- (`anchor feature on|off NAME`). A row overrides the host's start flags;
-- every host reads this table about twice a second.
create table feature_switch (
    name text primary key check (length(name) between 1 and 64),
    enabled boolean not null,
    changed_at timestamptz not null
);
