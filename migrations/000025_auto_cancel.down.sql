DROP INDEX IF EXISTS pipelines_cancel_on_failure_idx;
ALTER TABLE pipelines DROP COLUMN IF EXISTS auto_cancel_on_job_failure, DROP COLUMN IF EXISTS auto_cancel_on_new_commit;
