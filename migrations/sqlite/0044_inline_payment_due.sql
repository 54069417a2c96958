-- Abandoned inline payments (decision 0084): a payment reserved by a request
-- whose host stopped before settling it stays reserved. The job finds those
-- whose authorization ran out, in the order of its validBefore, through an
-- index naming only columns written once, with the payment: a settlement,
-- which changes neither, still touches no index (migration 0034). A
-- declaration's payment settles at its confirmation and has its own walk
-- (0043). An expand migration: older builds never read it.
create index x402_payment_inline_due on x402_payment (valid_before, payment_id) where subject_domain <> 'declaration';
insert into migration_rules (version, runs_beside_builds_from) values (44, 0);
