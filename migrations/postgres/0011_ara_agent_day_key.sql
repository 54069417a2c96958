-- An agent's daily counts are read by agent, then dimension, then a range of
-- days. Keyed that way, the primary key serves those reads by itself; keyed by
-- day first, a database without statistics read the by-dimension index (every
-- agent's rows of the window) instead.

alter table ara_agent_day drop constraint ara_agent_day_pkey;
alter table ara_agent_day add primary key (agent_id, dimension, day, value, visibility);
