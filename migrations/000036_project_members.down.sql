DROP TABLE project_members;
