-- Every charge names the pricing generation that set its price: the usage
-- rows, the x402 payments they settle and the ARA observations. Rows
-- recorded before this stay without one (null).
alter table usage_entry add column pricing_version text;
alter table usage_entry add column pricing_sha256 text;
alter table x402_payment add column pricing_version text;
alter table x402_payment add column pricing_sha256 text;
alter table ara_observation add column pricing_version text;
alter table ara_observation add column pricing_sha256 text;
