DROP INDEX CONCURRENTLY IF EXISTS builds_pipeline_dag_idx;
