// Operator API, feature flags (GitLab's Features API): administrators only: the admin token, or
// an admin user's token with the admin_mode scope (access.ReadInstance to list,
// ManageInstance to set or delete; h.can in routes.go).

package handlers

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// FeatureChange is POST /api/v4/features/:name, GitLab's shape: value true/false or a
// percentage (with key=percentage_of_actors), optionally for one actor.
type FeatureChange struct {
	// Boolean is set for value=true|false.
	Boolean *bool
	// Percentage is set for an integer value (with key=percentage_of_actors, or alone).
	Percentage *int
	// Actor is "project:<id>" or "runner:<id>" when the change targets one actor.
	Actor string
}

// ErrFeatureNotFound and FeatureInvalidError are what a Flags implementation returns for an
// unknown flag and a rejected change (its message goes to the client).
var ErrFeatureNotFound = errors.New("feature not found")

// FeatureInvalidError is a rejected feature change.
type FeatureInvalidError struct{ Msg string }

func (e *FeatureInvalidError) Error() string { return e.Msg }

func (h *Handler) flagsOr501() error {
	if h.flags == nil {
		return &httpError{code: http.StatusNotImplemented, msg: "the configured flag provider is read-only here"}
	}
	return nil
}

func (h *Handler) mapFlagErr(err error) error {
	var inv *FeatureInvalidError
	switch {
	case errors.As(err, &inv):
		return badRequest("%s", inv.Msg)
	case errors.Is(err, ErrFeatureNotFound):
		return &httpError{code: http.StatusNotFound, msg: "404 Feature Not Found"}
	}
	return err
}

func (h *Handler) listFeatures(w http.ResponseWriter, r *http.Request) error {
	if err := h.flagsOr501(); err != nil {
		return err
	}
	list, err := h.flags.List(r)
	if err != nil {
		return h.mapFlagErr(err)
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (h *Handler) setFeature(w http.ResponseWriter, r *http.Request) error {
	if err := h.flagsOr501(); err != nil {
		return err
	}
	change, err := decodeFeatureChange(r)
	if err != nil {
		return err
	}
	f, err := h.flags.Set(r, chi.URLParam(r, "name"), change)
	if err != nil {
		return h.mapFlagErr(err)
	}
	h.audit.FeatureSet(r.Context(), chi.URLParam(r, "name"), change.detail())
	writeJSON(w, http.StatusCreated, f)
	return nil
}

func (h *Handler) deleteFeature(w http.ResponseWriter, r *http.Request) error {
	if err := h.flagsOr501(); err != nil {
		return err
	}
	if err := h.flags.Delete(r, chi.URLParam(r, "name")); err != nil {
		return h.mapFlagErr(err)
	}
	h.audit.FeatureDeleted(r.Context(), chi.URLParam(r, "name"))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// decodeFeatureChange reads value, key, project and runner from a form or a JSON body.
func decodeFeatureChange(r *http.Request) (FeatureChange, error) {
	fields := map[string]string{}
	if isForm(r) {
		if err := r.ParseForm(); err != nil {
			return FeatureChange{}, badRequest("malformed form body: %s", err.Error())
		}
		for k, v := range r.PostForm {
			fields[k] = v[len(v)-1]
		}
	} else {
		var body map[string]any
		if err := decodeJSON(r, &body, false); err != nil {
			return FeatureChange{}, err
		}
		for k, v := range body {
			switch t := v.(type) {
			case string:
				fields[k] = t
			case bool:
				fields[k] = strconv.FormatBool(t)
			case float64:
				fields[k] = strconv.FormatFloat(t, 'f', -1, 64)
			default:
				return FeatureChange{}, badRequest("%s must be a string, number or boolean", k)
			}
		}
	}
	var c FeatureChange
	value, ok := fields["value"]
	if !ok {
		return c, badRequest("value is required: true, false or a percentage")
	}
	key := fields["key"]
	switch strings.ToLower(value) {
	case "true", "false":
		if key == "percentage_of_actors" {
			return c, badRequest("key=percentage_of_actors needs an integer value")
		}
		b := strings.EqualFold(value, "true")
		c.Boolean = &b
	default:
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 || n > 100 {
			return c, badRequest("value must be true, false or an integer percentage 0-100, got %.40q", value)
		}
		if key != "" && key != "percentage_of_actors" {
			return c, badRequest("key must be percentage_of_actors, got %.40q", key)
		}
		c.Percentage = &n
	}
	project, runner := fields["project"], fields["runner"]
	switch {
	case project != "" && runner != "":
		return c, badRequest("give either project or runner, not both")
	case project != "":
		if _, err := strconv.ParseUint(project, 10, 63); err != nil || project == "0" {
			return c, badRequest("project must be a positive integer id")
		}
		c.Actor = "project:" + project
	case runner != "":
		if _, err := strconv.ParseUint(runner, 10, 63); err != nil || runner == "0" {
			return c, badRequest("runner must be a positive integer id")
		}
		c.Actor = "runner:" + runner
	}
	if c.Actor != "" && c.Percentage != nil {
		return c, badRequest("a percentage applies to all actors; drop project/runner")
	}
	for k := range fields {
		switch k {
		case "value", "key", "project", "runner", "feature_group", "user", "group", "namespace", "repository", "force":
		default:
			return c, badRequest("unknown field %.40q", k)
		}
	}
	return c, nil
}

func (c FeatureChange) detail() map[string]any {
	d := map[string]any{}
	if c.Boolean != nil {
		d["value"] = *c.Boolean
	}
	if c.Percentage != nil {
		d["percentage_of_actors"] = *c.Percentage
	}
	if c.Actor != "" {
		d["actor"] = c.Actor
	}
	return d
}
