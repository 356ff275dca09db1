DROP INDEX IF EXISTS builds_running_token_idx;
DROP INDEX IF EXISTS pipelines_success_ref_idx;
DROP TABLE IF EXISTS job_artifacts;
DROP FUNCTION IF EXISTS job_artifacts_queue_cleanup();
DROP TABLE IF EXISTS object_cleanup;
