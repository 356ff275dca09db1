DROP TABLE hook_event_cursor;
DROP TABLE hook_delivery_attempts;
DROP TABLE hook_deliveries;
DROP TABLE forge_status_settings;
DROP TABLE project_hooks;
