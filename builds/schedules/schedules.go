// Package schedules holds a project's pipeline schedules (GitLab's /projects/:id/
// pipeline_schedules): a ref, a cron in a time zone, variables, and next_run_at, the deadline
// of record in the store. The worker's pass (Worker.TickOnce) starts the pipeline of every
// schedule whose next_run_at has come, on every replica at once: a replica creates a tick's
// pipeline only after its compare-and-set moved next_run_at from the due time it read to the
// next one (Store.ClaimTick), so each tick is claimed by one replica.
//
// Missed ticks run once, as in GitLab: GitLab's PipelineScheduleWorker picks every active
// schedule whose next_run_at has passed, runs it once, and sets next_run_at to the cron's
// first time after now. A schedule due at 02:00 whose replicas were all down from 01:00 to
// 05:00 runs once when the first replica is back, then next at its first time after that.
package schedules

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/gitref"
)

// Schedule is a project's pipeline schedule.
type Schedule struct {
	ID           int64
	ProjectID    int64
	Description  string
	Ref          string
	Cron         string
	CronTimezone string
	Active       bool
	// NextRunAt is the next tick, the deadline of record.
	NextRunAt time.Time
	// LastPipelineID is the pipeline it started last (0: none yet).
	LastPipelineID int64
	CreatedAt      time.Time
	UpdatedAt      time.Time
	// Owner is who created it (nil: a schedule made before owners were kept).
	Owner *builds.PipelineUser
	// Variables are set on each pipeline it starts (read with Store.Schedule and
	// Store.DueSchedules, not in lists).
	Variables []Variable
}

// Variable is a schedule's variable (GitLab's key, value, variable_type).
type Variable struct {
	Key          string
	Value        string
	VariableType string // builds.VariableEnv or builds.VariableFile
}

// Change is a create or an edit: nil fields are left as they are (or defaulted).
type Change struct {
	Description  *string
	Ref          *string
	Cron         *string
	CronTimezone *string
	Active       *bool
}

// VariableChange is a variable's create or edit: nil fields are left as they are.
type VariableChange struct {
	Value        *string
	VariableType *string
}

// Scopes of a list, GitLab's.
const (
	ScopeAll      = ""
	ScopeActive   = "active"
	ScopeInactive = "inactive"
)

// Store keeps schedules. Methods that name a project return builds.ErrNotFound when the
// project, or its schedule, does not exist.
type Store interface {
	CreateSchedule(ctx context.Context, s Schedule) (Schedule, error)
	// Schedules lists one page of a project's schedules (all, or by scope), oldest first,
	// and their total.
	Schedules(ctx context.Context, projectID int64, scope string, page builds.Page) ([]Schedule, int, error)
	// Schedule reads one schedule with its variables.
	Schedule(ctx context.Context, projectID, id int64) (Schedule, error)
	// UpdateSchedule writes every field but the ids, created_at and variables.
	UpdateSchedule(ctx context.Context, s Schedule) (Schedule, error)
	DeleteSchedule(ctx context.Context, projectID, id int64) error
	// CreateScheduleVariable adds a variable; builds.ErrExists when the key is taken.
	CreateScheduleVariable(ctx context.Context, projectID, scheduleID int64, v Variable) error
	UpdateScheduleVariable(ctx context.Context, projectID, scheduleID int64, v Variable) error
	DeleteScheduleVariable(ctx context.Context, projectID, scheduleID int64, key string) error
	// DueSchedules lists up to limit active schedules whose next_run_at is at or before
	// now, earliest first, with their variables.
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]Schedule, error)
	// ClaimTick moves an active schedule's next_run_at from due to next, only if it still
	// is due: true for the one caller whose update did it.
	ClaimTick(ctx context.Context, id int64, due, next time.Time) (bool, error)
	// RecordPipeline records a pipeline the schedule started, as its last.
	RecordPipeline(ctx context.Context, id, pipelineID int64) error
	// SchedulePipelines lists one page of the ids of the pipelines a project's schedule
	// started, in id order (newest first with desc), and their total.
	SchedulePipelines(ctx context.Context, projectID, id int64, page builds.Page, desc bool) ([]int64, int, error)
}

// Start is a pipeline to create from the project's repository at Ref.
type Start struct {
	ProjectID int64
	Ref       string
	Source    string
	Variables []builds.Variable
}

// StartFunc creates a pipeline from the repository: it resolves the ref on the project's
// remote and compiles the CI configuration read there.
type StartFunc func(ctx context.Context, s Start) (builds.Pipeline, error)

// Auditor records a change that succeeded in the audit log, naming the context's actor
// (builds.Service.RecordAudit).
type Auditor interface {
	RecordAudit(ctx context.Context, action, target string, detail map[string]any)
}

// Service manages schedules and starts their pipelines.
type Service struct {
	store Store
	start StartFunc
	audit Auditor
	now   func() time.Time
}

// NewService returns a Service over store that creates pipelines with start and records
// every change of a schedule, and every play, with audit; now nil is time.Now.
func NewService(store Store, start StartFunc, audit Auditor, now func() time.Time) *Service {
	if store == nil || start == nil || audit == nil {
		panic("schedules.NewService: store, start and audit are required")
	}
	if now == nil {
		now = time.Now
	}
	return &Service{store: store, start: start, audit: audit, now: now}
}

func target(projectID int64) string { return "project:" + strconv.FormatInt(projectID, 10) }

// detail is what the audit log keeps of a schedule (its variables' values may be secrets:
// left out).
func detail(sc Schedule) map[string]any {
	return map[string]any{"schedule_id": sc.ID, "description": sc.Description, "ref": sc.Ref, "cron": sc.Cron,
		"cron_timezone": sc.CronTimezone, "active": sc.Active}
}

// variableDetail is what the audit log keeps of a schedule's variable: its key and type,
// never its value (a secret, as often as not).
func variableDetail(scheduleID int64, v Variable) map[string]any {
	return map[string]any{"schedule_id": scheduleID, "key": v.Key, "variable_type": v.VariableType}
}

// Limits of a schedule's text fields (GitLab's columns are varchar(255) where bounded).
const (
	maxDescription   = 255
	maxVariableValue = 10_000
)

var variableKey = regexp.MustCompile(`^[A-Za-z0-9_]{1,255}$`)

func checkText(field, v string, limit int) error {
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return invalid("%s must be UTF-8 text without NUL", field)
	}
	if utf8.RuneCountInString(v) > limit {
		return invalid("%s is longer than %d characters", field, limit)
	}
	return nil
}

// apply checks a change against s and applies it; it reports whether the timing changed
// (cron, zone, or the schedule turned active), which moves next_run_at.
func apply(s *Schedule, c Change) (retime bool, err error) {
	if c.Description != nil {
		if strings.TrimSpace(*c.Description) == "" {
			return false, invalid("description is missing")
		}
		if err := checkText("description", *c.Description, maxDescription); err != nil {
			return false, err
		}
		s.Description = *c.Description
	}
	if c.Ref != nil {
		if *c.Ref == "" {
			return false, invalid("ref is missing")
		}
		if err := gitref.CheckRevisions(*c.Ref, "", ""); err != nil {
			return false, &builds.ValidationError{Msg: err.Error()}
		}
		s.Ref = *c.Ref
	}
	if c.Cron != nil && strings.TrimSpace(*c.Cron) != s.Cron {
		s.Cron, retime = strings.TrimSpace(*c.Cron), true
	}
	if c.CronTimezone != nil && *c.CronTimezone != s.CronTimezone {
		s.CronTimezone, retime = *c.CronTimezone, true
		if s.CronTimezone == "" {
			s.CronTimezone = "UTC"
		}
	}
	if c.Active != nil {
		if *c.Active && !s.Active {
			// A schedule turned on again starts from now, not from the tick it was off for.
			retime = true
		}
		s.Active = *c.Active
	}
	return retime, nil
}

// Create makes a schedule: description, ref and cron are required; cron_timezone is UTC
// and active true unless given.
func (s *Service) Create(ctx context.Context, projectID int64, c Change) (Schedule, error) {
	switch {
	case c.Description == nil:
		return Schedule{}, invalid("description is missing")
	case c.Ref == nil:
		return Schedule{}, invalid("ref is missing")
	case c.Cron == nil:
		return Schedule{}, invalid("cron is missing")
	}
	sc := Schedule{ProjectID: projectID, CronTimezone: "UTC", Active: true}
	if _, err := apply(&sc, c); err != nil {
		return Schedule{}, err
	}
	timing, err := ParseTiming(sc.Cron, sc.CronTimezone)
	if err != nil {
		return Schedule{}, err
	}
	now := s.now()
	sc.NextRunAt, sc.CreatedAt, sc.UpdatedAt = timing.Next(now), now, now
	if a, ok := builds.ActorFrom(ctx); ok {
		sc.Owner = builds.PipelineUserOf(a)
	}
	created, err := s.store.CreateSchedule(ctx, sc)
	if err != nil {
		return Schedule{}, err
	}
	s.audit.RecordAudit(ctx, "schedule_created", target(projectID), detail(created))
	return created, nil
}

// List returns one page of a project's schedules (scope: "", active or inactive) and
// their total.
func (s *Service) List(ctx context.Context, projectID int64, scope string, page builds.Page) ([]Schedule, int, error) {
	switch scope {
	case ScopeAll, ScopeActive, ScopeInactive:
	default:
		return nil, 0, invalid("scope must be active or inactive")
	}
	return s.store.Schedules(ctx, projectID, scope, page)
}

// Pipelines lists one page of the ids of the pipelines a schedule started (sort: asc, the
// default, or desc) and their total; builds.ErrNotFound for no such schedule.
func (s *Service) Pipelines(ctx context.Context, projectID, id int64, page builds.Page, sort string) ([]int64, int, error) {
	if sort != "" && sort != "asc" && sort != "desc" {
		return nil, 0, invalid("sort must be asc or desc")
	}
	if _, err := s.store.Schedule(ctx, projectID, id); err != nil {
		return nil, 0, err
	}
	return s.store.SchedulePipelines(ctx, projectID, id, page, sort == "desc")
}

// Get returns one schedule with its variables.
func (s *Service) Get(ctx context.Context, projectID, id int64) (Schedule, error) {
	return s.store.Schedule(ctx, projectID, id)
}

// Update edits a schedule. A new cron or time zone, or turning it on, sets next_run_at to
// the cron's first time after now.
func (s *Service) Update(ctx context.Context, projectID, id int64, c Change) (Schedule, error) {
	sc, err := s.store.Schedule(ctx, projectID, id)
	if err != nil {
		return Schedule{}, err
	}
	retime, err := apply(&sc, c)
	if err != nil {
		return Schedule{}, err
	}
	timing, err := ParseTiming(sc.Cron, sc.CronTimezone)
	if err != nil {
		return Schedule{}, err
	}
	now := s.now()
	if retime {
		sc.NextRunAt = timing.Next(now)
	}
	sc.UpdatedAt = now
	updated, err := s.store.UpdateSchedule(ctx, sc)
	if err != nil {
		return Schedule{}, err
	}
	updated.Variables = sc.Variables
	s.audit.RecordAudit(ctx, "schedule_updated", target(projectID), detail(updated))
	return updated, nil
}

// Delete removes a schedule and its variables.
func (s *Service) Delete(ctx context.Context, projectID, id int64) error {
	if err := s.store.DeleteSchedule(ctx, projectID, id); err != nil {
		return err
	}
	s.audit.RecordAudit(ctx, "schedule_deleted", target(projectID), map[string]any{"schedule_id": id})
	return nil
}

func checkVariable(v Variable) error {
	if !variableKey.MatchString(v.Key) {
		return invalid("key %.60q must be 1 to 255 letters, digits and _", v.Key)
	}
	if err := checkText("value", v.Value, maxVariableValue); err != nil {
		return err
	}
	switch v.VariableType {
	case builds.VariableEnv, builds.VariableFile:
		return nil
	}
	return invalid("variable_type must be env_var or file")
}

// CreateVariable adds a variable to a schedule (value required, variable_type env_var
// unless given).
func (s *Service) CreateVariable(ctx context.Context, projectID, scheduleID int64, key string, c VariableChange) (Variable, error) {
	if c.Value == nil {
		return Variable{}, invalid("value is missing")
	}
	v := Variable{Key: key, Value: *c.Value, VariableType: builds.VariableEnv}
	if c.VariableType != nil {
		v.VariableType = *c.VariableType
	}
	if err := checkVariable(v); err != nil {
		return Variable{}, err
	}
	if err := s.store.CreateScheduleVariable(ctx, projectID, scheduleID, v); err != nil {
		return Variable{}, err
	}
	s.audit.RecordAudit(ctx, "schedule_variable_created", target(projectID), variableDetail(scheduleID, v))
	return v, nil
}

// UpdateVariable edits a schedule's variable.
func (s *Service) UpdateVariable(ctx context.Context, projectID, scheduleID int64, key string, c VariableChange) (Variable, error) {
	sc, err := s.store.Schedule(ctx, projectID, scheduleID)
	if err != nil {
		return Variable{}, err
	}
	for _, v := range sc.Variables {
		if v.Key != key {
			continue
		}
		if c.Value != nil {
			v.Value = *c.Value
		}
		if c.VariableType != nil {
			v.VariableType = *c.VariableType
		}
		if err := checkVariable(v); err != nil {
			return Variable{}, err
		}
		if err := s.store.UpdateScheduleVariable(ctx, projectID, scheduleID, v); err != nil {
			return Variable{}, err
		}
		s.audit.RecordAudit(ctx, "schedule_variable_updated", target(projectID), variableDetail(scheduleID, v))
		return v, nil
	}
	return Variable{}, fmt.Errorf("variable %.60q: %w", key, builds.ErrNotFound)
}

// DeleteVariable removes a schedule's variable and returns it as it was.
func (s *Service) DeleteVariable(ctx context.Context, projectID, scheduleID int64, key string) (Variable, error) {
	sc, err := s.store.Schedule(ctx, projectID, scheduleID)
	if err != nil {
		return Variable{}, err
	}
	for _, v := range sc.Variables {
		if v.Key != key {
			continue
		}
		if err := s.store.DeleteScheduleVariable(ctx, projectID, scheduleID, key); err != nil {
			return Variable{}, err
		}
		s.audit.RecordAudit(ctx, "schedule_variable_deleted", target(projectID), variableDetail(scheduleID, v))
		return v, nil
	}
	return Variable{}, fmt.Errorf("variable %.60q: %w", key, builds.ErrNotFound)
}

// Play starts the schedule's pipeline now, whatever its cron says; next_run_at stays (as
// GitLab's play leaves the schedule's next run as it was).
func (s *Service) Play(ctx context.Context, projectID, id int64) (builds.Pipeline, error) {
	sc, err := s.store.Schedule(ctx, projectID, id)
	if err != nil {
		return builds.Pipeline{}, err
	}
	p, err := s.run(ctx, sc)
	if err != nil {
		return p, err
	}
	s.audit.RecordAudit(ctx, "schedule_played", target(projectID), map[string]any{"schedule_id": id, "pipeline_id": p.ID})
	return p, nil
}

// run creates a schedule's pipeline and records it as the schedule's last. A tick acts on
// the schedule's own account; a play keeps the actor who pressed it.
func (s *Service) run(ctx context.Context, sc Schedule) (builds.Pipeline, error) {
	if _, ok := builds.ActorFrom(ctx); !ok {
		ctx = builds.WithActor(ctx, builds.Actor{Kind: builds.ActorSchedule, Username: "schedule #" + strconv.FormatInt(sc.ID, 10)})
	}
	vars := make([]builds.Variable, len(sc.Variables))
	for i, v := range sc.Variables {
		vars[i] = builds.Variable{Key: v.Key, Value: v.Value, File: v.VariableType == builds.VariableFile}
	}
	p, err := s.start(ctx, Start{ProjectID: sc.ProjectID, Ref: sc.Ref, Source: builds.SourceSchedule, Variables: vars})
	if err != nil {
		return builds.Pipeline{}, err
	}
	if err := s.store.RecordPipeline(ctx, sc.ID, p.ID); err != nil {
		return p, fmt.Errorf("schedule %d started pipeline %d but did not record it: %w", sc.ID, p.ID, err)
	}
	return p, nil
}
