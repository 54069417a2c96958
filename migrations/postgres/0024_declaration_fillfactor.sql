-- A declaration is written once and updated soon after (its confirmation),
-- then rarely. Leaving a quarter of each new page free lets that update put
-- the new row version on the same page (a HOT update), so none of the
-- table's indexes gets a new entry for it. Pages written before this keep
-- their layout.
alter table declaration set (fillfactor = 75);
