package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/schedules"
)

var _ schedules.Store = (*Store)(nil)

const scheduleCols = `id, project_id, description, ref, cron, cron_timezone, active, next_run_at,
    COALESCE(last_pipeline_id, 0), created_at, updated_at, owner`

func scanSchedule(row pgx.Row) (schedules.Schedule, error) {
	var s schedules.Schedule
	err := row.Scan(&s.ID, &s.ProjectID, &s.Description, &s.Ref, &s.Cron, &s.CronTimezone, &s.Active, &s.NextRunAt,
		&s.LastPipelineID, &s.CreatedAt, &s.UpdatedAt, &s.Owner)
	return s, err
}

func collectSchedules(rows pgx.Rows, err error) ([]schedules.Schedule, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (schedules.Schedule, error) { return scanSchedule(row) })
}

const insertSchedule = `
INSERT INTO pipeline_schedules (project_id, description, ref, cron, cron_timezone, active, next_run_at, created_at, updated_at, owner)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $8, $9 WHERE EXISTS (SELECT 1 FROM projects WHERE id = $1)
RETURNING ` + scheduleCols

// CreateSchedule stores a schedule of a project that exists.
func (s *Store) CreateSchedule(ctx context.Context, sc schedules.Schedule) (schedules.Schedule, error) {
	created, err := scanSchedule(s.pool.QueryRow(ctx, insertSchedule, sc.ProjectID, sc.Description, sc.Ref, sc.Cron,
		sc.CronTimezone, sc.Active, sc.NextRunAt, sc.CreatedAt, sc.Owner))
	return created, notFound(err, fmt.Sprintf("project %d", sc.ProjectID))
}

const schedulesOf = `SELECT ` + scheduleCols + `, count(*) OVER () FROM pipeline_schedules
WHERE project_id = $1 AND ($2 = '' OR active = ($2 = 'active')) ORDER BY id LIMIT $3 OFFSET $4`

// Schedules lists one page of a project's schedules, oldest first, all or by scope, and
// their total.
func (s *Store) Schedules(ctx context.Context, projectID int64, scope string, pg builds.Page) ([]schedules.Schedule, int, error) {
	limit, off := offset(pg)
	rows, err := s.pool.Query(ctx, schedulesOf, projectID, scope, limit, off)
	if err != nil {
		return nil, 0, err
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (schedules.Schedule, error) {
		var sc schedules.Schedule
		err := row.Scan(&sc.ID, &sc.ProjectID, &sc.Description, &sc.Ref, &sc.Cron, &sc.CronTimezone, &sc.Active, &sc.NextRunAt,
			&sc.LastPipelineID, &sc.CreatedAt, &sc.UpdatedAt, &sc.Owner, &total)
		return sc, err
	})
	if err != nil || len(list) > 0 {
		return list, total, err
	}
	if _, err := s.Project(ctx, projectID); err != nil {
		return nil, 0, err
	}
	err = s.pool.QueryRow(ctx, `SELECT count(*) FROM pipeline_schedules WHERE project_id = $1 AND ($2 = '' OR active = ($2 = 'active'))`,
		projectID, scope).Scan(&total)
	return list, total, err
}

const scheduleByID = `SELECT ` + scheduleCols + ` FROM pipeline_schedules WHERE project_id = $1 AND id = $2`

const scheduleVariablesOf = `SELECT schedule_id, key, value, variable_type FROM pipeline_schedule_variables
WHERE schedule_id = ANY($1) ORDER BY schedule_id, key`

// Schedule reads one schedule and its variables.
func (s *Store) Schedule(ctx context.Context, projectID, id int64) (schedules.Schedule, error) {
	sc, err := scanSchedule(s.pool.QueryRow(ctx, scheduleByID, projectID, id))
	if err != nil {
		return sc, notFound(err, fmt.Sprintf("pipeline schedule %d of project %d", id, projectID))
	}
	list := []schedules.Schedule{sc}
	if err := s.withVariables(ctx, list); err != nil {
		return sc, err
	}
	return list[0], nil
}

// withVariables fills the variables of a list of schedules in one read.
func (s *Store) withVariables(ctx context.Context, list []schedules.Schedule) error {
	if len(list) == 0 {
		return nil
	}
	ids := make([]int64, len(list))
	at := make(map[int64]int, len(list))
	for i, sc := range list {
		ids[i], at[sc.ID] = sc.ID, i
	}
	rows, err := s.pool.Query(ctx, scheduleVariablesOf, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var v schedules.Variable
		if err := rows.Scan(&id, &v.Key, &v.Value, &v.VariableType); err != nil {
			return err
		}
		list[at[id]].Variables = append(list[at[id]].Variables, v)
	}
	return rows.Err()
}

const updateSchedule = `UPDATE pipeline_schedules
SET description = $3, ref = $4, cron = $5, cron_timezone = $6, active = $7, next_run_at = $8, updated_at = $9
WHERE project_id = $1 AND id = $2 RETURNING ` + scheduleCols

// UpdateSchedule writes a schedule's fields.
func (s *Store) UpdateSchedule(ctx context.Context, sc schedules.Schedule) (schedules.Schedule, error) {
	updated, err := scanSchedule(s.pool.QueryRow(ctx, updateSchedule, sc.ProjectID, sc.ID, sc.Description, sc.Ref, sc.Cron,
		sc.CronTimezone, sc.Active, sc.NextRunAt, sc.UpdatedAt))
	return updated, notFound(err, fmt.Sprintf("pipeline schedule %d of project %d", sc.ID, sc.ProjectID))
}

const deleteSchedule = `DELETE FROM pipeline_schedules WHERE project_id = $1 AND id = $2`

// DeleteSchedule removes a schedule (its variables go with it).
func (s *Store) DeleteSchedule(ctx context.Context, projectID, id int64) error {
	tag, err := s.pool.Exec(ctx, deleteSchedule, projectID, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("pipeline schedule %d of project %d: %w", id, projectID, builds.ErrNotFound)
	}
	return err
}

// The schedule must be the project's: the variable is written only through it.
const insertScheduleVariable = `
INSERT INTO pipeline_schedule_variables (schedule_id, key, value, variable_type)
SELECT id, $3, $4, $5 FROM pipeline_schedules WHERE project_id = $1 AND id = $2
ON CONFLICT (schedule_id, key) DO NOTHING
RETURNING schedule_id`

// CreateScheduleVariable adds a variable to a project's schedule.
func (s *Store) CreateScheduleVariable(ctx context.Context, projectID, scheduleID int64, v schedules.Variable) error {
	var id int64
	err := s.pool.QueryRow(ctx, insertScheduleVariable, projectID, scheduleID, v.Key, v.Value, v.VariableType).Scan(&id)
	if err != pgx.ErrNoRows {
		return err
	}
	if _, err := s.Schedule(ctx, projectID, scheduleID); err != nil {
		return err
	}
	return fmt.Errorf("variable %q of pipeline schedule %d: %w", v.Key, scheduleID, builds.ErrExists)
}

const updateScheduleVariable = `
UPDATE pipeline_schedule_variables v SET value = $4, variable_type = $5
FROM pipeline_schedules s
WHERE s.project_id = $1 AND s.id = $2 AND v.schedule_id = s.id AND v.key = $3`

// UpdateScheduleVariable edits a schedule's variable.
func (s *Store) UpdateScheduleVariable(ctx context.Context, projectID, scheduleID int64, v schedules.Variable) error {
	tag, err := s.pool.Exec(ctx, updateScheduleVariable, projectID, scheduleID, v.Key, v.Value, v.VariableType)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("variable %q of pipeline schedule %d: %w", v.Key, scheduleID, builds.ErrNotFound)
	}
	return err
}

const deleteScheduleVariable = `
DELETE FROM pipeline_schedule_variables v USING pipeline_schedules s
WHERE s.project_id = $1 AND s.id = $2 AND v.schedule_id = s.id AND v.key = $3`

// DeleteScheduleVariable removes a schedule's variable.
func (s *Store) DeleteScheduleVariable(ctx context.Context, projectID, scheduleID int64, key string) error {
	tag, err := s.pool.Exec(ctx, deleteScheduleVariable, projectID, scheduleID, key)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("variable %q of pipeline schedule %d: %w", key, scheduleID, builds.ErrNotFound)
	}
	return err
}

// Through pipeline_schedules_due_idx.
const dueSchedules = `SELECT ` + scheduleCols + ` FROM pipeline_schedules
WHERE active AND next_run_at <= $1 ORDER BY next_run_at, id LIMIT $2`

// DueSchedules lists active schedules whose tick has come, with their variables.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]schedules.Schedule, error) {
	list, err := collectSchedules(s.pool.Query(ctx, dueSchedules, now, limit))
	if err != nil {
		return nil, err
	}
	return list, s.withVariables(ctx, list)
}

// The claim of a tick: a compare-and-set on the deadline of record. Of replicas that read
// the same due time, the one whose update moved it owns the tick; the others match no row.
const claimTick = `UPDATE pipeline_schedules SET next_run_at = $3
WHERE id = $1 AND next_run_at = $2 AND active RETURNING id`

// ClaimTick moves a due schedule to its next time; true when this call did.
func (s *Store) ClaimTick(ctx context.Context, id int64, due, next time.Time) (bool, error) {
	var got int64
	err := s.pool.QueryRow(ctx, claimTick, id, due, next).Scan(&got)
	if err == pgx.ErrNoRows {
		return false, nil
	}
	return err == nil, err
}

// The pipeline becomes the schedule's last and joins its list, in one statement.
const recordPipeline = `WITH last AS (
    UPDATE pipeline_schedules SET last_pipeline_id = $2 WHERE id = $1 RETURNING id
)
INSERT INTO pipeline_schedule_pipelines (schedule_id, pipeline_id) SELECT id, $2 FROM last
ON CONFLICT DO NOTHING`

// RecordPipeline records a pipeline a schedule started, as its last.
func (s *Store) RecordPipeline(ctx context.Context, id, pipelineID int64) error {
	_, err := s.pool.Exec(ctx, recordPipeline, id, pipelineID)
	return err
}

const schedulePipelinesAsc = `SELECT sp.pipeline_id, count(*) OVER ()
FROM pipeline_schedule_pipelines sp JOIN pipeline_schedules s ON s.id = sp.schedule_id
WHERE s.project_id = $1 AND s.id = $2 ORDER BY sp.pipeline_id LIMIT $3 OFFSET $4`

const schedulePipelinesDesc = `SELECT sp.pipeline_id, count(*) OVER ()
FROM pipeline_schedule_pipelines sp JOIN pipeline_schedules s ON s.id = sp.schedule_id
WHERE s.project_id = $1 AND s.id = $2 ORDER BY sp.pipeline_id DESC LIMIT $3 OFFSET $4`

// SchedulePipelines lists one page of the pipelines a schedule started, and their total.
func (s *Store) SchedulePipelines(ctx context.Context, projectID, id int64, pg builds.Page, desc bool) ([]int64, int, error) {
	limit, off := offset(pg)
	query := schedulePipelinesAsc
	if desc {
		query = schedulePipelinesDesc
	}
	rows, err := s.pool.Query(ctx, query, projectID, id, limit, off)
	if err != nil {
		return nil, 0, err
	}
	var total int
	ids, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (int64, error) {
		var pid int64
		err := row.Scan(&pid, &total)
		return pid, err
	})
	if err == nil && len(ids) == 0 && pg.Page > 1 {
		err = s.pool.QueryRow(ctx, `SELECT count(*) FROM pipeline_schedule_pipelines WHERE schedule_id = $1`, id).Scan(&total)
	}
	return ids, total, err
}
