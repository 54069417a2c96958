-- An agent's daily counts are read by agent, then dimension, then a range of
-- days. Keyed that way, the primary key serves those reads by itself; keyed by
-- day first, a database without statistics read the by-dimension index (every
-- agent's rows of the window) instead. SQLite cannot change a primary key in
-- place, so the table is rebuilt.

create table ara_agent_day_next (
    agent_id blob not null references agent (agent_id),
    day integer not null,
    dimension text not null,
    value text not null,
    visibility integer not null,
    n integer not null,
    primary key (agent_id, dimension, day, value, visibility)
);
insert into ara_agent_day_next (agent_id, day, dimension, value, visibility, n)
select agent_id, day, dimension, value, visibility, n from ara_agent_day;
drop table ara_agent_day;
alter table ara_agent_day_next rename to ara_agent_day;
create index ara_agent_day_by_dimension on ara_agent_day (dimension, day);
