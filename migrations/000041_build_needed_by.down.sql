ALTER TABLE builds DROP COLUMN needed_by;
