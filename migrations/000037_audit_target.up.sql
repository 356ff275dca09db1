-- A pipeline's page shows its history (created, canceled, retried, by whom) from the
-- audit log: the actions on one target, in order.
CREATE INDEX operator_events_target_idx ON operator_events (target, id);
