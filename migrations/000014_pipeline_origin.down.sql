DROP TABLE pipeline_iids;
ALTER TABLE pipelines DROP COLUMN iid, DROP COLUMN variables, DROP COLUMN before_sha, DROP COLUMN source;
