DROP INDEX IF EXISTS pipelines_parent_build_idx;
ALTER TABLE pipelines DROP COLUMN IF EXISTS depth;
ALTER TABLE pipelines DROP COLUMN IF EXISTS parent_build_id;
DROP INDEX IF EXISTS builds_bridges_idx;
ALTER TABLE builds DROP COLUMN IF EXISTS bridge;
