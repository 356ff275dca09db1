// Operator API, runners: administrators only: the admin token, or an admin user's token with
// the admin_mode scope. Routes declare access.CreateRunner, ReadRunners or ManageRunners
// (h.can in routes.go), whose rows let a token's runner scope (create_runner, manage_runner)
// stand in for api. What gitlab-runner itself calls is in
// runner_lifecycle.go.

package handlers

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
)

// deleteRunner answers the operator's DELETE /runners/:id: 204; the builds its machines
// hold have failed (see builds.RunnerDeletion).
func (h *Handler) deleteRunner(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "runner_id")
	if err != nil {
		return err
	}
	if err := h.runners.Delete(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// resetRunnerTokenByID answers the operator's POST /runners/:id/reset_authentication_token
// (also gitlab-runner reset-token --pat): 201 with the new token, shown once; every earlier
// token stops working (a revocation).
func (h *Handler) resetRunnerTokenByID(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "runner_id")
	if err != nil {
		return err
	}
	token, err := h.runners.ResetToken(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.TokenReset{Token: token.Token, TokenExpiresAt: expiryJSON(token.ExpiresAt)})
	return nil
}

// runnerFields is the body of POST /user/runners and PUT /runners/:id.
type runnerFields struct {
	Description *string  `json:"description"`
	TagList     *tagList `json:"tag_list"`
	RunUntagged *boolish `json:"run_untagged"`
	Paused      *boolish `json:"paused"`
	Active      *boolish `json:"active"`
	RunnerType  *string  `json:"runner_type"`
	Locked      *boolish `json:"locked"`
	AccessLevel *string  `json:"access_level"`
	MaxTimeout  *int     `json:"maximum_timeout"`
}

// tagList accepts ["a","b"] or "a,b" (GitLab's tag_list).
type tagList []string

func (t *tagList) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*t = list
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return badRequest("tag_list must be a list of strings or a comma-separated string")
	}
	*t = splitTags(s)
	return nil
}

func splitTags(s string) []string {
	out := []string{}
	for _, part := range strings.Split(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (h *Handler) decodeRunnerFields(r *http.Request) (runnerFields, error) {
	var f runnerFields
	if !isForm(r) {
		if r.ContentLength == 0 && r.Header.Get("Content-Type") == "" {
			return f, nil
		}
		return f, decodeJSON(r, &f, true)
	}
	if err := r.ParseForm(); err != nil {
		return f, badRequest("malformed form body: %s", err.Error())
	}
	for key, vals := range r.PostForm {
		v := vals[len(vals)-1]
		switch key {
		case "description":
			f.Description = &v
		case "tag_list", "tag_list[]":
			var tags tagList
			if key == "tag_list[]" {
				tags = vals
			} else {
				tags = splitTags(v)
			}
			f.TagList = &tags
		case "run_untagged", "paused", "active", "locked":
			b, err := parseBool(v)
			if err != nil {
				return f, badRequest("%s: expected true or false", key)
			}
			bb := boolish(b)
			switch key {
			case "run_untagged":
				f.RunUntagged = &bb
			case "paused":
				f.Paused = &bb
			case "active":
				f.Active = &bb
			case "locked":
				f.Locked = &bb
			}
		case "access_level":
			f.AccessLevel = &v
		case "runner_type", "maximum_timeout", "token":
			// Accepted for GitLab compatibility; jobapi has one runner type.
		default:
			return f, badRequest("unknown field %.40q", key)
		}
	}
	return f, nil
}

func (f runnerFields) update() (builds.RunnerUpdate, error) {
	var u builds.RunnerUpdate
	if f.Description != nil {
		if len(*f.Description) > 1024 {
			return u, badRequest("description is longer than 1024 characters")
		}
		u.Description = f.Description
	}
	if f.TagList != nil {
		tags := []string(*f.TagList)
		if len(tags) > builds.MaxTags {
			return u, badRequest("at most %d tags", builds.MaxTags)
		}
		for _, t := range tags {
			if t == "" || len(t) > builds.MaxNameLength {
				return u, badRequest("tags must be 1 to %d characters", builds.MaxNameLength)
			}
		}
		u.Tags = &tags
	}
	if f.RunUntagged != nil {
		v := bool(*f.RunUntagged)
		u.RunUntagged = &v
	}
	if f.Active != nil { // GitLab's older name: active=false means paused
		v := !bool(*f.Active)
		u.Paused = &v
	}
	if f.Paused != nil {
		v := bool(*f.Paused)
		u.Paused = &v
	}
	if f.AccessLevel != nil {
		if !builds.ValidAccessLevel(*f.AccessLevel) {
			return u, badRequest("access_level must be not_protected or ref_protected, got %.40q", *f.AccessLevel)
		}
		u.AccessLevel = f.AccessLevel
	}
	return u, nil
}

func (h *Handler) createRunner(w http.ResponseWriter, r *http.Request) error {
	f, err := h.decodeRunnerFields(r)
	if err != nil {
		return err
	}
	u, err := f.update()
	if err != nil {
		return err
	}
	created, token, err := h.svc.RegisterRunner(r.Context(), newRunner(u))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.RunnerCreated{ID: created.ID, Token: token, TokenExpiresAt: expiryJSON(created.TokenExpiresAt)})
	return nil
}

// newRunner is a runner with the settings of u, GitLab's defaults elsewhere.
func newRunner(u builds.RunnerUpdate) builds.Runner {
	runner := builds.Runner{RunUntagged: true, AccessLevel: builds.AccessNotProtected}
	if u.Description != nil {
		runner.Description = *u.Description
	}
	if u.Tags != nil {
		runner.Tags = *u.Tags
	}
	if u.RunUntagged != nil {
		runner.RunUntagged = *u.RunUntagged
	}
	if u.Paused != nil {
		runner.Paused = *u.Paused
	}
	if u.AccessLevel != nil {
		runner.AccessLevel = *u.AccessLevel
	}
	return runner
}

func runnerView(r builds.Runner) api.Runner {
	out := api.Runner{ID: r.ID, Description: r.Description, TagList: r.Tags, RunUntagged: r.RunUntagged,
		Paused: r.Paused, Active: !r.Paused, AccessLevel: r.AccessLevel, CreatedAt: r.CreatedAt, ContactedAt: r.ContactedAt, Managers: []api.Manager{}}
	if out.TagList == nil {
		out.TagList = []string{}
	}
	for _, m := range r.Managers {
		features := map[string]bool{}
		_ = json.Unmarshal(m.Features, &features)
		out.Managers = append(out.Managers, api.Manager{SystemID: m.SystemID, Version: m.Version, Revision: m.Revision,
			Platform: m.Platform, Architecture: m.Architecture, Executor: m.Executor, Features: features, ContactedAt: m.ContactedAt, IPAddress: m.IPAddress})
	}
	return out
}

func (h *Handler) listRunners(w http.ResponseWriter, r *http.Request) error {
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	if hasRunnerFilter(r.URL.Query()) {
		return h.listFilteredRunners(w, r, p)
	}
	list, total, err := h.runners.List(r.Context(), p)
	if err != nil {
		return err
	}
	out := make([]api.Runner, len(list))
	for i, rn := range list {
		out[i] = runnerView(rn)
	}
	writePage(w, p, total, out)
	return nil
}

func (h *Handler) getRunner(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "runner_id")
	if err != nil {
		return err
	}
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	rn, managers, err := h.runners.Get(r.Context(), id, p)
	if err != nil {
		return err
	}
	// The pagination headers are the managers': the one list in the answer that grows.
	writePage(w, p, managers, runnerView(rn))
	return nil
}

func (h *Handler) updateRunner(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "runner_id")
	if err != nil {
		return err
	}
	f, err := h.decodeRunnerFields(r)
	if err != nil {
		return err
	}
	u, err := f.update()
	if err != nil {
		return err
	}
	rn, err := h.runners.Update(r.Context(), id, u)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, runnerView(rn))
	return nil
}
