-- PostgreSQL leaves room on the declaration's pages for its confirmation's
-- update. SQLite updates rows in place in its B-tree: nothing to do here,
-- the file exists so both engines' migrations keep the same names.
select 1;
