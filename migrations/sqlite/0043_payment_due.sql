-- Lapsed reservations (decision 0083): the service releases the payment of
-- an externally paid declaration nobody confirmed, once its window has
-- closed and no authorization can settle any more, walking the records in
-- the order of their deadlines. The index names only columns written once,
-- with the record: a confirmation, which changes neither, still leaves its
-- row on its page without touching an index. Records paid by Trial alone
-- have no deadline and no entry. An expand migration: older builds never
-- read it.
create index declaration_payment_due on declaration (payment_deadline, dd_id) where payment_deadline is not null;
insert into migration_rules (version, runs_beside_builds_from) values (43, 0);
