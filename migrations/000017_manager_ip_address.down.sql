ALTER TABLE runner_managers DROP COLUMN ip_address;
