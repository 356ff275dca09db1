DROP TABLE IF EXISTS deployments;
DROP TABLE IF EXISTS environments;
