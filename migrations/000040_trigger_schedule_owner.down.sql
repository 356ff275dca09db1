ALTER TABLE pipeline_schedules DROP COLUMN owner;
ALTER TABLE pipeline_triggers DROP COLUMN owner;
