ALTER TABLE job_artifacts DROP COLUMN expose_as, DROP COLUMN access;
