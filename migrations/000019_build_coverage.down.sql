DROP INDEX pipelines_alive_ref_idx;
ALTER TABLE builds DROP COLUMN coverage;
