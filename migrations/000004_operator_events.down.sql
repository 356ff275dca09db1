DROP TABLE IF EXISTS operator_events;
