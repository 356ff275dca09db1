// Operator API, protected branches and tags: a member's personal access token, or an
// administrator's (or the admin token), in PRIVATE-TOKEN or Authorization: Bearer; each route's
// action (h.can in routes.go) decides by the caller's role (builds/access).

package handlers

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/projects"
)

// GitLab's /projects/:id/protected_branches and /projects/:id/protected_tags: a
// ref they protect gives its pipelines CI_COMMIT_REF_PROTECTED, protected variables, the
// -protected cache keys, and ref_protected runners.

// protectedRefFields is the create body, GitLab's parameters. GitLab's documented calls send
// them in the query string; a JSON or form body works as well.
type protectedRefFields struct {
	Name                      *string   `json:"name"`
	PushAccessLevel           *levelish `json:"push_access_level"`
	MergeAccessLevel          *levelish `json:"merge_access_level"`
	CreateAccessLevel         *levelish `json:"create_access_level"`
	AllowForcePush            *boolish  `json:"allow_force_push"`
	CodeOwnerApprovalRequired *boolish  `json:"code_owner_approval_required"`
	// GitLab's, taken for its clients: jobapi has no unprotect permission of its own.
	UnprotectAccessLevel *levelish `json:"unprotect_access_level"`
}

// levelish is an access level as a JSON number or a string of one (form and query values).
type levelish int

func (l *levelish) UnmarshalJSON(b []byte) error {
	n, err := strconv.Atoi(strings.Trim(string(b), `"`))
	if err != nil {
		return badRequest("an access level must be an integer (0, 30, 40 or 60), got %.20s", b)
	}
	*l = levelish(n)
	return nil
}

func levelPtr(l *levelish) *int {
	if l == nil {
		return nil
	}
	n := int(*l)
	return &n
}

func boolPtr(b *boolish) *bool {
	if b == nil {
		return nil
	}
	v := bool(*b)
	return &v
}

// fields lists the parameters a ref type takes: a tag has only create_access_level.
func (f protectedRefFields) change(refType string) (projects.ProtectedRefChange, error) {
	if refType == projects.RefTag {
		for name, set := range map[string]bool{"push_access_level": f.PushAccessLevel != nil,
			"merge_access_level": f.MergeAccessLevel != nil, "allow_force_push": f.AllowForcePush != nil,
			"code_owner_approval_required": f.CodeOwnerApprovalRequired != nil} {
			if set {
				return projects.ProtectedRefChange{}, badRequest("%s is a protected branch's parameter, not a protected tag's", name)
			}
		}
	} else if f.CreateAccessLevel != nil {
		return projects.ProtectedRefChange{}, badRequest("create_access_level is a protected tag's parameter, not a protected branch's")
	}
	return projects.ProtectedRefChange{Name: f.Name, PushAccessLevel: levelPtr(f.PushAccessLevel),
		MergeAccessLevel: levelPtr(f.MergeAccessLevel), CreateAccessLevel: levelPtr(f.CreateAccessLevel),
		AllowForcePush: boolPtr(f.AllowForcePush), CodeOwnerApprovalRequired: boolPtr(f.CodeOwnerApprovalRequired)}, nil
}

func refAccess(id int64, level int) []api.RefAccessLevel {
	return []api.RefAccessLevel{{ID: id, AccessLevel: level, AccessLevelDescription: projects.AccessLevelDescription(level)}}
}

func protectedBranchView(p projects.ProtectedRef) api.ProtectedBranch {
	return api.ProtectedBranch{ID: p.ID, Name: p.Name, PushAccessLevels: refAccess(p.ID, p.PushAccessLevel),
		MergeAccessLevels: refAccess(p.ID, p.MergeAccessLevel), AllowForcePush: p.AllowForcePush,
		CodeOwnerApprovalRequired: p.CodeOwnerApprovalRequired}
}

func protectedTagView(p projects.ProtectedRef) api.ProtectedTag {
	return api.ProtectedTag{Name: p.Name, CreateAccessLevels: refAccess(p.ID, p.CreateAccessLevel)}
}

// protectedRefView is the answer's shape for a ref type.
func protectedRefView(p projects.ProtectedRef) any {
	if p.RefType == projects.RefTag {
		return protectedTagView(p)
	}
	return protectedBranchView(p)
}

// protectedRefError words the sentinels: 409 for a name protected already, as GitLab.
func protectedRefError(err error) error {
	if errors.Is(err, builds.ErrExists) {
		return &httpError{code: http.StatusConflict, msg: "409 " + err.Error()}
	}
	return projectError(err)
}

// refNameParam is the {name} path parameter, URL-encoded by clients (release%2F%2A): chi
// matched the raw path when the request had escapes, so it is unescaped here.
func refNameParam(r *http.Request) (string, error) {
	v := chi.URLParam(r, "name")
	if r.URL.RawPath == "" {
		return v, nil
	}
	name, err := url.PathUnescape(v)
	if err != nil {
		return "", badRequest("name is not a valid URL-encoded ref name")
	}
	return name, nil
}

func (h *Handler) listProtectedRefs(refType string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		pid, err := projectID(r)
		if err != nil {
			return err
		}
		pg, err := pageOf(r)
		if err != nil {
			return err
		}
		list, err := h.prj.ProtectedRefs(r.Context(), pid, refType)
		if err != nil {
			return projectError(err)
		}
		from := min((pg.Page-1)*pg.PerPage, len(list))
		out := []any{}
		for _, p := range list[from:min(from+pg.PerPage, len(list))] {
			out = append(out, protectedRefView(p))
		}
		writePage(w, pg, len(list), out)
		return nil
	}
}

func (h *Handler) getProtectedRef(refType string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		pid, err := projectID(r)
		if err != nil {
			return err
		}
		name, err := refNameParam(r)
		if err != nil {
			return err
		}
		p, err := h.prj.ProtectedRef(r.Context(), pid, refType, name)
		if err != nil {
			return projectError(err)
		}
		writeJSON(w, http.StatusOK, protectedRefView(p))
		return nil
	}
}

func (h *Handler) createProtectedRef(refType string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		pid, err := projectID(r)
		if err != nil {
			return err
		}
		var f protectedRefFields
		if err := decodeBodyOrQuery(r, &f); err != nil {
			return err
		}
		c, err := f.change(refType)
		if err != nil {
			return err
		}
		p, err := h.prj.CreateProtectedRef(r.Context(), pid, refType, c)
		if err != nil {
			return protectedRefError(err)
		}
		writeJSON(w, http.StatusCreated, protectedRefView(p))
		return nil
	}
}

func (h *Handler) deleteProtectedRef(refType string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		pid, err := projectID(r)
		if err != nil {
			return err
		}
		name, err := refNameParam(r)
		if err != nil {
			return err
		}
		if err := h.prj.DeleteProtectedRef(r.Context(), pid, refType, name); err != nil {
			return projectError(err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// decodeBodyOrQuery reads a JSON or form body, or without one the query string, as GitLab
// takes its parameters from either.
func decodeBodyOrQuery(r *http.Request, v any) error {
	if r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
		return decodeBody(r, v)
	}
	return decodeValues(r.URL.Query(), v)
}
