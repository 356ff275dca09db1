ALTER TABLE builds DROP COLUMN coverage;
