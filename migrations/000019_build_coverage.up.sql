-- .gitlab-ci.yml's coverage (issue 17): the percentage the job's coverage regex found in its
-- log when it finished; NULL when the job has no regex or the log had no match.
ALTER TABLE builds ADD COLUMN coverage numeric;
