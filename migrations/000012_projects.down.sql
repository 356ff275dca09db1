DROP TABLE IF EXISTS project_variables;
DROP TABLE IF EXISTS projects;
