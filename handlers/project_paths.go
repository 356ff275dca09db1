package handlers

import (
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

const projectsPrefix = "/api/v4/projects/"

// unknownProjectID stands for a path no project has: no project has this id, so the route
// answers what it answers for any unknown id (401 without a token, 404 with one), and a
// caller cannot tell a path that exists from one that does not by the answer.
const unknownProjectID = math.MaxInt64

// projectPaths lets a project be named by its path where GitLab's API takes "the ID or
// URL-encoded path of the project" (python-gitlab's gl.projects.get("jobapi/app") sends
// /projects/jobapi%2Fapp): before routing, the encoded "jobapi/<path>" after
// /api/v4/projects/ is replaced by the project's id. Anything else in that place is left to
// the route, which refuses what is not an id.
func (h *Handler) projectPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw := r.URL.EscapedPath()
		rest, ok := strings.CutPrefix(raw, projectsPrefix)
		if !ok || h.prj == nil {
			next.ServeHTTP(w, r)
			return
		}
		segment, tail, hasTail := strings.Cut(rest, "/")
		name, err := url.PathUnescape(segment)
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		path, ok := strings.CutPrefix(name, projectNamespace+"/")
		if !ok || path == "" {
			next.ServeHTTP(w, r)
			return
		}
		id, err := h.projectIDByPath(r, path)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		newRaw := projectsPrefix + strconv.FormatInt(id, 10)
		if hasTail {
			newRaw += "/" + tail
		}
		p, err := url.PathUnescape(newRaw)
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		u := *r.URL
		u.Path, u.RawPath = p, newRaw
		r = r.Clone(r.Context())
		r.URL = &u
		next.ServeHTTP(w, r)
	})
}

// projectIDByPath is the id of the project with path, or unknownProjectID.
func (h *Handler) projectIDByPath(r *http.Request, path string) (int64, error) {
	id, found, err := h.prj.IDByPath(r.Context(), path)
	if err != nil || !found {
		return unknownProjectID, err
	}
	return id, nil
}
