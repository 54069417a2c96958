-- A payment whose settlement outcome is unknown may have moved its money:
-- it counts against the DAB as a reserved or settled one does (before,
-- moving it to settle_unknown freed its amount until it was reconciled).
drop trigger x402_payment_dab_insert;
drop trigger x402_payment_dab_update;

create trigger x402_payment_dab_insert after insert on x402_payment
when new.status in ('reserved', 'settled', 'settle_unknown')
begin
    insert into dab_spent (agent_id, period, spent_units)
    values (new.agent_id, substr(new.created_at, 1, 7), new.amount_units)
    on conflict (agent_id, period) do update set spent_units = spent_units + excluded.spent_units;
end;

create trigger x402_payment_dab_update after update of status on x402_payment
when (old.status in ('reserved', 'settled', 'settle_unknown')) <> (new.status in ('reserved', 'settled', 'settle_unknown'))
begin
    insert into dab_spent (agent_id, period, spent_units)
    values (new.agent_id, substr(new.created_at, 1, 7),
            case when new.status in ('reserved', 'settled', 'settle_unknown') then new.amount_units else -new.amount_units end)
    on conflict (agent_id, period) do update set spent_units = spent_units + excluded.spent_units;
end;

-- The totals again, counting the payments unknown now.
delete from dab_spent;
insert into dab_spent (agent_id, period, spent_units)
select agent_id, substr(created_at, 1, 7), sum(amount_units)
from x402_payment where status in ('reserved', 'settled', 'settle_unknown')
group by 1, 2;
