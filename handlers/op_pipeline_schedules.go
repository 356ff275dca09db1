package handlers

// Pipeline schedules, GitLab's /projects/:id/pipeline_schedules (a reporter reads
// them, a developer manages and plays them, builds/access): the schedules, their variables,
// and play.

import (
	"context"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/schedules"
)

func scheduleView(base string, s schedules.Schedule) api.PipelineSchedule {
	return api.PipelineSchedule{ID: s.ID, Description: s.Description, Ref: s.Ref, Cron: s.Cron,
		CronTimezone: s.CronTimezone, NextRunAt: s.NextRunAt, Active: s.Active, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
		Owner: userView(base, s.Owner)}
}

// scheduleDetail is one schedule as GET …/:id answers it: with its variables and the
// pipeline it started last.
func (h *Handler) scheduleDetail(r *http.Request, s schedules.Schedule) (api.PipelineSchedule, error) {
	out := scheduleView(h.externalBase(r), s)
	out.Variables = make([]api.PipelineScheduleVariable, len(s.Variables))
	for i, v := range s.Variables {
		out.Variables[i] = api.PipelineScheduleVariable(v)
	}
	if s.LastPipelineID != 0 {
		p, err := h.svc.Pipeline(r.Context(), s.ProjectID, s.LastPipelineID)
		switch {
		case err == nil:
			out.LastPipeline = &api.ScheduleLastPipeline{ID: p.ID, SHA: p.SHA, Ref: p.Ref, Status: string(p.Status)}
		case !errors.Is(err, builds.ErrNotFound): // a deleted pipeline is no last pipeline
			return out, err
		}
	}
	return out, nil
}

// scheduleFields reads a schedule's create or edit from JSON or a form.
func scheduleFields(r *http.Request) (schedules.Change, error) {
	var c schedules.Change
	if isForm(r) {
		if err := parseForm(r); err != nil {
			return c, err
		}
		for key, vals := range r.Form {
			v := vals[len(vals)-1]
			switch key {
			case "description":
				c.Description = &v
			case "ref":
				c.Ref = &v
			case "cron":
				c.Cron = &v
			case "cron_timezone":
				c.CronTimezone = &v
			case "active":
				b, err := parseBool(v)
				if err != nil {
					return c, badRequest("active: expected true or false")
				}
				c.Active = &b
			}
		}
		return c, nil
	}
	var body struct {
		Description  *string  `json:"description"`
		Ref          *string  `json:"ref"`
		Cron         *string  `json:"cron"`
		CronTimezone *string  `json:"cron_timezone"`
		Active       *boolish `json:"active"`
	}
	if err := decodeJSON(r, &body, true); err != nil {
		return c, err
	}
	c = schedules.Change{Description: body.Description, Ref: body.Ref, Cron: body.Cron, CronTimezone: body.CronTimezone}
	if body.Active != nil {
		a := bool(*body.Active)
		c.Active = &a
	}
	return c, nil
}

func (h *Handler) listSchedules(w http.ResponseWriter, r *http.Request) error {
	scope := r.URL.Query().Get("scope")
	list := func(ctx context.Context, pid int64, pg builds.Page) ([]schedules.Schedule, int, error) {
		return h.schedules.List(ctx, pid, scope, pg)
	}
	base := h.externalBase(r)
	return writeProjectPage(w, r, list, func(s schedules.Schedule) api.PipelineSchedule { return scheduleView(base, s) })
}

// schedulePipelines lists the pipelines a schedule started (GitLab's basic pipeline
// fields, and jobapi's others), oldest first unless sort=desc.
func (h *Handler) schedulePipelines(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "schedule_id")
	if err != nil {
		return err
	}
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	ids, total, err := h.schedules.Pipelines(r.Context(), pid, id, pg, r.URL.Query().Get("sort"))
	if err != nil {
		return err
	}
	out := make([]api.Pipeline, 0, len(ids))
	for _, pipelineID := range ids {
		p, err := h.svc.Pipeline(r.Context(), pid, pipelineID)
		if errors.Is(err, builds.ErrNotFound) {
			continue // deleted since
		}
		if err != nil {
			return err
		}
		out = append(out, pipelineView(p))
	}
	writePage(w, pg, total, out)
	return nil
}

func (h *Handler) getSchedule(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "schedule_id")
	if err != nil {
		return err
	}
	s, err := h.schedules.Get(r.Context(), pid, id)
	if err != nil {
		return err
	}
	out, err := h.scheduleDetail(r, s)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) createSchedule(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	c, err := scheduleFields(r)
	if err != nil {
		return err
	}
	if c.Ref != nil {
		if err := h.mayRunOn(r.Context(), pid, *c.Ref); err != nil {
			return err
		}
	}
	s, err := h.schedules.Create(r.Context(), pid, c)
	if err != nil {
		return err
	}
	out, err := h.scheduleDetail(r, s)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (h *Handler) updateSchedule(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "schedule_id")
	if err != nil {
		return err
	}
	c, err := scheduleFields(r)
	if err != nil {
		return err
	}
	if c.Ref != nil { // the schedule's own ref was checked by the route (h.can)
		if err := h.mayRunOn(r.Context(), pid, *c.Ref); err != nil {
			return err
		}
	}
	s, err := h.schedules.Update(r.Context(), pid, id, c)
	if err != nil {
		return err
	}
	out, err := h.scheduleDetail(r, s)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "schedule_id")
	if err != nil {
		return err
	}
	if err := h.schedules.Delete(r.Context(), pid, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// playSchedule creates the schedule's pipeline at once: 201 with GitLab's message, and the
// pipeline's id, which GitLab (that creates it in the background) cannot give.
func (h *Handler) playSchedule(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "schedule_id")
	if err != nil {
		return err
	}
	p, err := h.schedules.Play(r.Context(), pid, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{"message": "201 Created", "pipeline_id": p.ID})
	return nil
}

// takeScheduleOwnership answers GitLab's take_ownership: not done, a schedule's owner stays
// who created it (404 for a schedule that does not exist).
func (h *Handler) takeScheduleOwnership(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "schedule_id")
	if err != nil {
		return err
	}
	if _, err := h.schedules.Get(r.Context(), pid, id); err != nil {
		return err
	}
	return &httpError{code: http.StatusNotImplemented,
		msg: "501 Not Implemented - jobapi does not change a pipeline schedule's owner: it stays who created the schedule"}
}

// scheduleVariableFields reads a variable's key, value and variable_type from JSON or a form.
func scheduleVariableFields(r *http.Request) (key *string, c schedules.VariableChange, err error) {
	if isForm(r) {
		if err := parseForm(r); err != nil {
			return nil, c, err
		}
		for name, vals := range r.Form {
			v := vals[len(vals)-1]
			switch name {
			case "key":
				key = &v
			case "value":
				c.Value = &v
			case "variable_type":
				c.VariableType = &v
			}
		}
		return key, c, nil
	}
	var body struct {
		Key          *string `json:"key"`
		Value        *string `json:"value"`
		VariableType *string `json:"variable_type"`
	}
	if err := decodeJSON(r, &body, true); err != nil {
		return nil, c, err
	}
	return body.Key, schedules.VariableChange{Value: body.Value, VariableType: body.VariableType}, nil
}

func (h *Handler) createScheduleVariable(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "schedule_id")
	if err != nil {
		return err
	}
	key, c, err := scheduleVariableFields(r)
	if err != nil {
		return err
	}
	if key == nil {
		return badRequest("key is missing")
	}
	v, err := h.schedules.CreateVariable(r.Context(), pid, id, *key, c)
	if errors.Is(err, builds.ErrExists) {
		return badRequest("key %.60q has already been taken", *key)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.PipelineScheduleVariable(v))
	return nil
}

func (h *Handler) updateScheduleVariable(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "schedule_id")
	if err != nil {
		return err
	}
	key, c, err := scheduleVariableFields(r)
	if err != nil {
		return err
	}
	path := chi.URLParam(r, "key")
	if key != nil && *key != path {
		return badRequest("key in the body (%.60q) is not the one in the path (%.60q)", *key, path)
	}
	v, err := h.schedules.UpdateVariable(r.Context(), pid, id, path, c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.PipelineScheduleVariable(v))
	return nil
}

func (h *Handler) deleteScheduleVariable(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "schedule_id")
	if err != nil {
		return err
	}
	v, err := h.schedules.DeleteVariable(r.Context(), pid, id, chi.URLParam(r, "key"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, api.PipelineScheduleVariable(v))
	return nil
}

// scheduleRoutes are the pipeline schedule routes of the operator API (PRIVATE-TOKEN).
func (h *Handler) scheduleRoutes(r chi.Router) {
	r.With(h.can(access.ReadSchedules)).Get("/projects/{project_id}/pipeline_schedules", h.wrap(h.listSchedules))
	r.With(h.can(access.ManageSchedules)).Post("/projects/{project_id}/pipeline_schedules", h.wrap(h.createSchedule))
	r.With(h.can(access.ReadSchedules)).Get("/projects/{project_id}/pipeline_schedules/{schedule_id}", h.wrap(h.getSchedule))
	r.With(h.can(access.ManageSchedules)).Put("/projects/{project_id}/pipeline_schedules/{schedule_id}", h.wrap(h.updateSchedule))
	r.With(h.can(access.ManageSchedules)).Delete("/projects/{project_id}/pipeline_schedules/{schedule_id}", h.wrap(h.deleteSchedule))
	r.With(h.can(access.ManageSchedules)).Post("/projects/{project_id}/pipeline_schedules/{schedule_id}/play", h.wrap(h.playSchedule))
	r.With(h.can(access.ReadSchedules)).Get("/projects/{project_id}/pipeline_schedules/{schedule_id}/pipelines", h.wrap(h.schedulePipelines))
	r.With(h.can(access.ManageSchedules)).Post("/projects/{project_id}/pipeline_schedules/{schedule_id}/take_ownership", h.wrap(h.takeScheduleOwnership))
	r.With(h.can(access.ManageSchedules)).Post("/projects/{project_id}/pipeline_schedules/{schedule_id}/variables", h.wrap(h.createScheduleVariable))
	r.With(h.can(access.ManageSchedules)).Put("/projects/{project_id}/pipeline_schedules/{schedule_id}/variables/{key}", h.wrap(h.updateScheduleVariable))
	r.With(h.can(access.ManageSchedules)).Delete("/projects/{project_id}/pipeline_schedules/{schedule_id}/variables/{key}", h.wrap(h.deleteScheduleVariable))
}
