-- Payments and usage are keyed by what they paid for: a subject (its kind
-- and id), so routes that buy something other than a declaration record the
-- same way. dd_id stays where the subject is a declaration, for its foreign key.

alter table x402_payment add column subject_domain text;
alter table x402_payment add column subject_id uuid;
update x402_payment set subject_domain = 'declaration', subject_id = dd_id where dd_id is not null;
create index x402_payment_by_subject on x402_payment (subject_domain, subject_id);

alter table usage_entry add column subject_domain text not null default 'declaration';
alter table usage_entry add column subject_id uuid;
alter table usage_entry add column payment_id uuid references x402_payment (payment_id);
update usage_entry set subject_id = dd_id;
alter table usage_entry alter column subject_id set not null;
alter table usage_entry alter column subject_domain drop default;
alter table usage_entry alter column dd_id drop not null;
create index usage_entry_by_subject on usage_entry (subject_domain, subject_id);
