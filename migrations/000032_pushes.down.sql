DROP TABLE IF EXISTS webhook_deliveries;
DROP TABLE IF EXISTS push_heads;
DROP TABLE IF EXISTS push_settings;
