-- Rows the hot path updates again and again: an agent's row on every
-- Trial-paid request (its balance), and the ARA fold's counts of the current
-- day on every fold that meets the same agent. Room left free on each page
-- lets such an update put the new row version on the same page (a HOT
-- update), so none of the table's indexes gets a new entry for it; on a full
-- page every update adds an entry to each index. The counts of past days
-- are never updated again, so their tables keep less room than the agent's.
-- Pages written before this keep their layout.
alter table agent set (fillfactor = 75);
alter table ara_agent_day set (fillfactor = 90);
alter table ara_agent_total set (fillfactor = 90);
