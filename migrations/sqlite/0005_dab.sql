-- DAB (Decision Anchor Budget): a cap on an agent's external spending per
-- month. Null means the operator's default; owners set it (owner portal).
alter table agent add column dab_limit_milli integer;
