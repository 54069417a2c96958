-- What counts against an agent's DAB (its payments reserved or settled,
-- by the calendar month, UTC, they were made in) kept as a running total
-- per agent and month, so a DAB check reads one row instead of summing
-- every payment the agent made in the month. Triggers keep it: a payment
-- entering or leaving the counted statuses adds or takes away its amount,
-- in the statement that moves it. created_at is RFC 3339 text in UTC, so
-- its first seven characters are the month.
create table dab_spent (
    agent_id blob not null,
    period text not null, -- 'YYYY-MM' (UTC)
    spent_units integer not null,
    primary key (agent_id, period)
);

insert into dab_spent (agent_id, period, spent_units)
select agent_id, substr(created_at, 1, 7), sum(amount_units)
from x402_payment where status in ('reserved', 'settled')
group by 1, 2;

create trigger x402_payment_dab_insert after insert on x402_payment
when new.status in ('reserved', 'settled')
begin
    insert into dab_spent (agent_id, period, spent_units)
    values (new.agent_id, substr(new.created_at, 1, 7), new.amount_units)
    on conflict (agent_id, period) do update set spent_units = spent_units + excluded.spent_units;
end;

create trigger x402_payment_dab_update after update of status on x402_payment
when (old.status in ('reserved', 'settled')) <> (new.status in ('reserved', 'settled'))
begin
    insert into dab_spent (agent_id, period, spent_units)
    values (new.agent_id, substr(new.created_at, 1, 7),
            case when new.status in ('reserved', 'settled') then new.amount_units else -new.amount_units end)
    on conflict (agent_id, period) do update set spent_units = spent_units + excluded.spent_units;
end;
