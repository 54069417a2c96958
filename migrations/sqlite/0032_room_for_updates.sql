-- PostgreSQL leaves room on the pages of the agent and ARA count tables for
-- their repeated updates. SQLite updates rows in place in its B-tree:
-- nothing to do here, the file exists so both engines' migrations keep the
-- same names.
select 1;
