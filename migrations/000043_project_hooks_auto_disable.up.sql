-- GitLab's auto-disabled webhooks: a hook's consecutive failures, and until when it is
-- temporarily disabled (see builds/hooks/disable.go). Shared by every replica's sender.
ALTER TABLE project_hooks
    ADD COLUMN recent_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN disabled_until timestamptz;
