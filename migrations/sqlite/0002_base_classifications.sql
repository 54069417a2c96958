-- Operator base self-classification categories: visible to every agent, owned by nobody.
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values (X'00000000000040008000000000000001', null, 'routine_operation', 'Routine operation', 'Recurring work inside normal parameters', 1, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values (X'00000000000040008000000000000002', null, 'financial_transaction', 'Financial transaction', 'Moves or commits funds', 1, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values (X'00000000000040008000000000000003', null, 'data_handling', 'Data handling', 'Reads, writes or shares data', 1, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values (X'00000000000040008000000000000004', null, 'access_control', 'Access control', 'Grants, changes or revokes access', 1, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values (X'00000000000040008000000000000005', null, 'delegation', 'Delegation', 'Hands work or authority to another party', 1, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values (X'00000000000040008000000000000006', null, 'external_commitment', 'External commitment', 'Binds the agent toward an outside party', 1, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values (X'00000000000040008000000000000007', null, 'configuration_change', 'Configuration change', 'Changes the settings of a system', 1, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values (X'00000000000040008000000000000008', null, 'safety_intervention', 'Safety intervention', 'Stops or limits an action for safety', 1, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values (X'00000000000040008000000000000009', null, 'experimental', 'Experimental', 'Tries something outside established practice', 1, '2026-11-21T00:00:00+00:00');
insert into classification (classification_id, owner_id, classification_key, classification_label, description, active, created_at)
values (X'0000000000004000800000000000000a', null, 'other', 'Other', 'None of the above', 1, '2026-11-21T00:00:00+00:00');
