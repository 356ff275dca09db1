-- GitLab's ci_config_path: the file a pipeline created from the repository (a ref only)
-- reads; '' is .gitlab-ci.yml. Every existing project keeps the default.
ALTER TABLE projects ADD COLUMN IF NOT EXISTS ci_config_path text NOT NULL DEFAULT '';
