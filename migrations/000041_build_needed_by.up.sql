-- The jobs of the pipeline that declare a need on this build's job, by name (text[]; '{}'
-- when none), so that a finish in a pipeline planned per job reads its needers and what
-- they need instead of every latest attempt. NULL for builds created before: their
-- pipelines keep the whole plan.
ALTER TABLE builds ADD COLUMN needed_by text[];
