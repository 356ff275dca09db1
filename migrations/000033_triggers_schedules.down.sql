DROP TABLE IF EXISTS pipeline_schedule_pipelines;
DROP TABLE IF EXISTS pipeline_schedule_variables;
DROP TABLE IF EXISTS pipeline_schedules;
DROP TABLE IF EXISTS pipeline_triggers;
