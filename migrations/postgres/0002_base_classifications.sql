-- Operator base self-classification categories: visible to every agent, owned by nobody.
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values ('00000000-0000-4000-8000-000000000001', null, 'routine_operation', 'Routine operation', 'Recurring work inside normal parameters', true, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values ('00000000-0000-4000-8000-000000000002', null, 'financial_transaction', 'Financial transaction', 'Moves or commits funds', true, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values ('00000000-0000-4000-8000-000000000003', null, 'data_handling', 'Data handling', 'Reads, writes or shares data', true, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values ('00000000-0000-4000-8000-000000000004', null, 'access_control', 'Access control', 'Grants, changes or revokes access', true, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values ('00000000-0000-4000-8000-000000000005', null, 'delegation', 'Delegation', 'Hands work or authority to another party', true, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values ('00000000-0000-4000-8000-000000000006', null, 'external_commitment', 'External commitment', 'Binds the agent toward an outside party', true, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values ('00000000-0000-4000-8000-000000000007', null, 'configuration_change', 'Configuration change', 'Changes the settings of a system', true, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values ('00000000-0000-4000-8000-000000000008', null, 'safety_intervention', 'Safety intervention', 'Stops or limits an action for safety', true, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values ('00000000-0000-4000-8000-000000000009', null, 'experimental', 'Experimental', 'Tries something outside established practice', true, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values ('00000000-0000-4000-8000-00000000000a', null, 'other', 'Other', 'None of the above', true, '2026-11-21T00:00:00+00:00');
