-- The address a runner manager last contacted jobapi from (GitLab's ip_address), for
-- operators telling machines apart; written with the rest of the row, at most once a minute.
ALTER TABLE runner_managers ADD COLUMN ip_address text NOT NULL DEFAULT '';
