DROP TABLE IF EXISTS feature_flag_actors;
DROP TABLE IF EXISTS feature_flags;
DROP TABLE IF EXISTS build_trace_chunks;
DROP TABLE IF EXISTS build_events;
DROP TABLE IF EXISTS builds;
DROP TABLE IF EXISTS pipelines;
DROP TABLE IF EXISTS runner_managers;
DROP TABLE IF EXISTS runners;
