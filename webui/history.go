package webui

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/jobapi/jobapi/builds"
)

// Who did what: the "By" of a job's events, a pipeline's history and the audit page. Every
// action names its actor (builds.ActorFrom at the time it was taken); what runners and
// jobapi's own passes do is named from the event itself, so the runner's hot path records
// nothing more for it.

// historyRow is one action on a pipeline or in the audit log.
type historyRow struct {
	builds.AuditEvent
	// Link is the page of the target ("" when it has none).
	Link   string
	Detail string
}

// eventActor names who caused a job's event: the actor the event recorded (an operator's
// cancel, retry or play), else the job's runner for what its runner reported (assigned,
// acknowledged, updates; runner_manager is set on those), else jobapi itself (queued, a
// reaper's or the sweeper's decision).
func eventActor(e builds.Event, b builds.Build) string {
	if a, ok := e.Detail["actor"].(string); ok && a != "" {
		return a
	}
	if e.RunnerManager != "" && b.RunnerID != 0 {
		return "runner #" + strconv.FormatInt(b.RunnerID, 10) + " (" + e.RunnerManager + ")"
	}
	if e.RunnerManager != "" {
		return "runner (" + e.RunnerManager + ")"
	}
	return "jobapi"
}

// withoutActor is an event's detail without the actor its By column shows.
func withoutActor(d map[string]any) map[string]any {
	if _, ok := d["actor"]; !ok {
		return d
	}
	out := make(map[string]any, len(d))
	for k, v := range d {
		if k != "actor" {
			out[k] = v
		}
	}
	return out
}

func historyRows(events []builds.AuditEvent) []historyRow {
	rows := make([]historyRow, len(events))
	for i, e := range events {
		rows[i] = historyRow{AuditEvent: e, Link: targetLink(e), Detail: detailText(e.Detail)}
	}
	return rows
}

// targetLink is the page of an audit event's target, where the UI has one.
func targetLink(e builds.AuditEvent) string {
	kind, id, ok := strings.Cut(e.Target, ":")
	if !ok {
		return ""
	}
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		// project:1/resource_group:x and the like: the project's page.
		if kind == "project" {
			if pid, _, ok := strings.Cut(id, "/"); ok {
				return "/projects/" + pid
			}
		}
		return ""
	}
	switch kind {
	case "project":
		return "/projects/" + id
	case "runner":
		return "/runners#runner-" + id
	case "pipeline":
		if pid, ok := e.Detail["project_id"]; ok {
			return fmt.Sprintf("/projects/%v/pipelines/%s", pid, id)
		}
	}
	return ""
}

type auditData struct {
	Events []historyRow
	Total  int
	Page   int
	// Prev and Next are the neighbouring pages' numbers (0: none).
	Prev, Next int
}

const auditPerPage = 50

// auditPage shows the audit log, newest first, to administrators.
func (u *UI) auditPage(w http.ResponseWriter, r *http.Request) {
	if a, _ := builds.ActorFrom(r.Context()); !a.Admin {
		u.errorPage(w, r, http.StatusNotFound, "There is no page here.")
		return
	}
	page := 1
	if p := r.URL.Query().Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 10000 {
			u.errorPage(w, r, http.StatusBadRequest, "page must be a number from 1 to 10000.")
			return
		}
		page = n
	}
	events, total, err := u.audit.Events(r.Context(), builds.Page{Page: page, PerPage: auditPerPage})
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d := auditData{Events: historyRows(events), Total: total, Page: page}
	if page > 1 {
		d.Prev = page - 1
	}
	if page*auditPerPage < total {
		d.Next = page + 1
	}
	u.render(w, r, http.StatusOK, "audit", view{Title: "Audit log", Nav: "audit", Data: d})
}
