ALTER TABLE projects DROP COLUMN IF EXISTS ci_config_path;
