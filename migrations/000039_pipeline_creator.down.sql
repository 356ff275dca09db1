ALTER TABLE pipelines DROP COLUMN created_by;
