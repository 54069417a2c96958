-- PostgreSQL moves the liveness of a payment out of its indexes'
-- predicates so that a settlement updates the row in place. SQLite
-- updates rows in place in its B-tree whatever its indexes name: nothing
-- to do here, the file exists so both engines' migrations keep the same
-- names.
select 1;
