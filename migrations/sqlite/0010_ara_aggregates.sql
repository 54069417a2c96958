-- ARA's aggregate model: what observations read instead of the declarations.
-- A job on the lease folds every confirmed declaration into these tables once,
-- in the log's order (leaf index), so an observation's cost does not grow with
-- the number of stored declarations. Days are UTC day numbers since 1970-01-01.
--
-- visibility 0: counted in cross-agent views; 1: the agent's own views only
-- (access_class internal_only, and template dimensions whose
-- content_disclosure_scope is owner).

create table ara_agent_day (
    agent_id blob not null references agent (agent_id),
    day integer not null,
    dimension text not null,
    value text not null,
    visibility integer not null,
    n integer not null,
    primary key (agent_id, day, dimension, value, visibility)
);
create index ara_agent_day_by_dimension on ara_agent_day (dimension, day);

create table ara_agent_total (
    agent_id blob not null references agent (agent_id),
    dimension text not null,
    value text not null,
    visibility integer not null,
    n integer not null,
    first_day integer not null,
    last_day integer not null,
    primary key (agent_id, dimension, value, visibility)
);

-- The next leaf index to fold; advanced only from the value read (one folder at a time).
create table ara_fold (
    ara_fold_id integer primary key check (ara_fold_id = 0),
    next_leaf integer not null
);
insert into ara_fold (ara_fold_id, next_leaf) values (0, 0);

-- De-identified releases, computed once per kind, window length and window end
-- (a UTC day number, exclusive) and served as stored: asking again never draws
-- new noise, and windows are fixed and aligned, so two releases cannot be
-- subtracted to isolate an agent.
create table ara_release (
    kind text not null,
    window_days integer not null,
    window_end integer not null,
    body text not null,
    released_at text not null,
    primary key (kind, window_days, window_end)
);
