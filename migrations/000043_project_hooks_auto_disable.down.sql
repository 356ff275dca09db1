ALTER TABLE project_hooks DROP COLUMN IF EXISTS disabled_until, DROP COLUMN IF EXISTS recent_failures;
