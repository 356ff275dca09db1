package handlers

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/listings"
)

// Runner types, GitLab's names: every jobapi runner is the instance's.
const (
	runnerTypeInstance = "instance_type"
	runnerTypeGroup    = "group_type"
	runnerTypeProject  = "project_type"
)

// listAllRunners is GitLab's GET /runners/all: every runner, filtered by type, status,
// paused and tag_list; paged.
func (h *Handler) listAllRunners(w http.ResponseWriter, r *http.Request) error {
	return h.writeRunnerList(w, r)
}

// listProjectRunners is GitLab's GET /projects/:id/runners: the runners the project's jobs
// may run on, which in jobapi are all of them (instance runners); the same filters.
func (h *Handler) listProjectRunners(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	if err := h.requireProject(r, pid); err != nil {
		return err
	}
	return h.writeRunnerList(w, r)
}

func (h *Handler) writeRunnerList(w http.ResponseWriter, r *http.Request) error {
	f, none, err := runnerFilter(r.URL.Query())
	if err != nil {
		return err
	}
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	out := []api.ListedRunner{}
	total := 0
	if !none {
		list, n, err := h.lists.RunnerListing(r.Context(), f, pg)
		if err != nil {
			return err
		}
		total = n
		for _, rn := range list {
			out = append(out, listedRunnerView(rn))
		}
	}
	writePage(w, pg, total, out)
	return nil
}

// runnerFilter reads GitLab's runner list filters: type (instance_type, group_type,
// project_type), status (online, offline, stale, never_contacted; GitLab's deprecated
// active and paused too), its deprecated twin scope, paused, and tag_list (comma-separated,
// every tag required). none: the filter matches no jobapi runner (group or project type).
func runnerFilter(q url.Values) (f listings.RunnerFilter, none bool, err error) {
	switch t := q.Get("type"); t {
	case "", runnerTypeInstance:
	case runnerTypeGroup, runnerTypeProject:
		none = true
	default:
		return f, false, badRequest("type does not have a valid value: %.40q is not one of %s, %s, %s", t, runnerTypeInstance, runnerTypeGroup, runnerTypeProject)
	}
	for _, key := range []string{"status", "scope"} {
		v := q.Get(key)
		switch {
		case v == "":
		case v == "active" || v == "paused":
			paused := v == "paused"
			f.Paused = &paused
		case slices.Contains(listings.RunnerStatuses, v):
			f.Status = v
		default:
			return f, false, badRequest("%s does not have a valid value: %.40q is not one of %s, active, paused", key, v, strings.Join(listings.RunnerStatuses, ", "))
		}
	}
	if v := q.Get("paused"); v != "" {
		b, err := parseBool(v)
		if err != nil {
			return f, false, badRequest("paused: expected true or false, got %.40q", v)
		}
		if f.Paused != nil && *f.Paused != b {
			none = true
		}
		f.Paused = &b
	}
	if v, ok := q["tag_list"]; ok {
		f.Tags = splitTags(strings.Join(v, ","))
	}
	if v, ok := q["tag_list[]"]; ok {
		f.Tags = append(f.Tags, splitTags(strings.Join(v, ","))...)
	}
	return f, none, nil
}

// listedRunnerView is GitLab's short runner form.
func listedRunnerView(r listings.ListedRunner) api.ListedRunner {
	tags := r.Tags
	if tags == nil {
		tags = []string{}
	}
	return api.ListedRunner{ID: r.ID, Description: r.Description, IPAddress: r.IPAddress, Active: !r.Paused,
		Paused: r.Paused, IsShared: true, RunnerType: runnerTypeInstance,
		Online: r.Status == listings.RunnerOnline, Status: r.Status, TagList: tags, CreatedAt: r.CreatedAt,
		ContactedAt: r.ContactedAt}
}

// hasRunnerFilter reports whether a runner list request names any of GitLab's filters.
func hasRunnerFilter(q url.Values) bool {
	for _, key := range []string{"type", "status", "scope", "paused", "tag_list", "tag_list[]"} {
		if _, ok := q[key]; ok {
			return true
		}
	}
	return false
}

// listFilteredRunners is GET /runners with GitLab's filters (those of /runners/all): the
// runners the filter selects, in the full form GET /runners answers, with their managers.
func (h *Handler) listFilteredRunners(w http.ResponseWriter, r *http.Request, pg builds.Page) error {
	f, none, err := runnerFilter(r.URL.Query())
	if err != nil {
		return err
	}
	out := []api.Runner{}
	total := 0
	if !none {
		list, n, err := h.lists.RunnerListing(r.Context(), f, pg)
		if err != nil {
			return err
		}
		ids := make([]int64, len(list))
		for i, rn := range list {
			ids[i] = rn.ID
		}
		managers, err := h.lists.RunnerManagers(r.Context(), ids)
		if err != nil {
			return err
		}
		total = n
		for _, rn := range list {
			rn.Managers = managers[rn.ID]
			out = append(out, runnerView(rn.Runner))
		}
	}
	writePage(w, pg, total, out)
	return nil
}
