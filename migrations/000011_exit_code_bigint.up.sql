-- Windows reports crashes as unsigned 32-bit exit codes (0xC0000005 = 3221225477), past
-- integer's 2^31-1: the runner's final update failed. Changing the type rewrites the table
-- under an ACCESS EXCLUSIVE lock; on a large builds table run it in a quiet window.
ALTER TABLE builds ALTER COLUMN exit_code TYPE bigint;
