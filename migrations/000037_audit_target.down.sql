DROP INDEX IF EXISTS operator_events_target_idx;
