-- Payments and usage are keyed by what they paid for: a subject (its kind
-- and id), so routes that buy something other than a declaration record the
-- same way. dd_id stays where the subject is a declaration, for its foreign key.

alter table x402_payment add column subject_domain text;
alter table x402_payment add column subject_id blob;
update x402_payment set subject_domain = 'declaration', subject_id = dd_id where dd_id is not null;
create index x402_payment_by_subject on x402_payment (subject_domain, subject_id);

-- SQLite cannot drop a NOT NULL: the table is rebuilt.
create table usage_entry_new (
    usage_id blob primary key,
    agent_id blob not null references agent (agent_id),
    dd_id blob references declaration (dd_id),
    subject_domain text not null,
    subject_id blob not null,
    payment_id blob references x402_payment (payment_id),
    cost_component text not null,
    payment_source text not null,
    amount_milli integer not null,
    recorded_at text not null
);
insert into usage_entry_new (usage_id, agent_id, dd_id, subject_domain, subject_id, payment_id, cost_component,
    payment_source, amount_milli, recorded_at)
select usage_id, agent_id, dd_id, 'declaration', dd_id, null, cost_component, payment_source, amount_milli, recorded_at
from usage_entry;
drop table usage_entry;
alter table usage_entry_new rename to usage_entry;
create index usage_entry_by_agent on usage_entry (agent_id, recorded_at);
create index usage_entry_by_subject on usage_entry (subject_domain, subject_id);
