DROP INDEX IF EXISTS builds_run_deadline_idx;
ALTER TABLE builds DROP COLUMN IF EXISTS run_deadline;
DROP INDEX IF EXISTS pipelines_unfinished_idx;
ALTER TABLE pipelines DROP COLUMN IF EXISTS advanced_past;
ALTER TABLE pipelines DROP COLUMN IF EXISTS progressed_at;
