package handlers

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/gitref"
)

// getRefArtifacts is GitLab's GET /projects/:id/jobs/artifacts/:ref_name/download?job=name:
// the archive of the named job in the newest successful pipeline of the ref (or of one of
// its child pipelines), with ranges and conditional requests as a download by job id.
func (h *Handler) getRefArtifacts(w http.ResponseWriter, r *http.Request) error {
	pid, ref, job, err := refArtifactParams(r)
	if err != nil {
		return err
	}
	a, err := h.refArchive(r, pid, ref, job)
	if err != nil {
		return err
	}
	return h.serveArchive(w, r, a)
}

// getRefArtifactFile is GitLab's GET /projects/:id/jobs/artifacts/:ref_name/raw/*path?job=
// name: one file of that archive.
func (h *Handler) getRefArtifactFile(w http.ResponseWriter, r *http.Request) error {
	pid, ref, job, err := refArtifactParams(r)
	if err != nil {
		return err
	}
	name, err := unescapedParam(r, "*", "artifact_path")
	if err != nil {
		return err
	}
	a, err := h.refArchive(r, pid, ref, job)
	if err != nil {
		return err
	}
	return h.serveArchiveFile(w, r, pid, a.BuildID, name)
}

// refArchive is the archive of the job artifacts-by-ref serve; a 403 when its
// artifacts:access is none, as a download by job id.
func (h *Handler) refArchive(r *http.Request, pid int64, ref, job string) (builds.Artifact, error) {
	id, err := h.lists.LatestSuccessfulJob(r.Context(), pid, ref, job)
	if err != nil {
		return builds.Artifact{}, err
	}
	return h.arts.DownloadableArchive(r.Context(), pid, id)
}

// refArtifactParams reads the project, the ref (a name with / in it arrives encoded) and
// the job's name, which is required.
func refArtifactParams(r *http.Request) (pid int64, ref, job string, err error) {
	if pid, err = projectID(r); err != nil {
		return 0, "", "", err
	}
	if ref, err = unescapedParam(r, "ref_name", "ref_name"); err != nil {
		return 0, "", "", err
	}
	if err := gitref.CheckName("ref_name", ref); err != nil {
		return 0, "", "", err
	}
	job = r.URL.Query().Get("job")
	if job == "" {
		return 0, "", "", badRequest("job is missing: name the job whose artifacts to download (?job=name)")
	}
	return pid, ref, job, nil
}

// unescapedParam is a path parameter as the client meant it: chi matched the raw path when
// the request had escapes (a ref's %2F stays in one segment), so it is unescaped here.
func unescapedParam(r *http.Request, key, name string) (string, error) {
	v := chi.URLParam(r, key)
	if r.URL.RawPath == "" {
		return v, nil
	}
	out, err := url.PathUnescape(v)
	if err != nil {
		return "", badRequest("%s is not validly URL-encoded", name)
	}
	return out, nil
}

// refArtifactsPrefix and the ref's end mark GitLab's artifacts-by-ref paths:
// /api/v4/projects/:id/jobs/artifacts/:ref_name/download and …/:ref_name/raw/*path.
const refArtifactsPrefix = "/api/v4/projects/"

// refSlashes lets the artifacts-by-ref calls name a ref with an unencoded / in it, as
// GitLab's route does (python-gitlab 3.x sends feature/x as it is): before routing, the
// ref's slashes are encoded, so that the router takes the ref as one segment as it takes
// feature%2Fx. The ref ends at the first /raw/, or else before a final /download.
func refSlashes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if raw, ok := encodeRefSlashes(r.URL.EscapedPath()); ok {
			if p, err := url.PathUnescape(raw); err == nil {
				u := *r.URL
				u.Path, u.RawPath = p, raw
				r = r.Clone(r.Context())
				r.URL = &u
			}
		}
		next.ServeHTTP(w, r)
	})
}

// encodeRefSlashes rewrites an artifacts-by-ref path whose ref has unencoded slashes;
// ok false leaves every other path alone.
func encodeRefSlashes(raw string) (string, bool) {
	rest, ok := strings.CutPrefix(raw, refArtifactsPrefix)
	if !ok {
		return "", false
	}
	project, rest, ok := strings.Cut(rest, "/")
	if !ok || project == "" {
		return "", false
	}
	rest, ok = strings.CutPrefix(rest, "jobs/artifacts/")
	if !ok {
		return "", false
	}
	var ref, tail string
	if i := strings.Index(rest, "/raw/"); i > 0 {
		ref, tail = rest[:i], rest[i:]
	} else if r, ok := strings.CutSuffix(rest, "/download"); ok {
		ref, tail = r, "/download"
	}
	if !strings.Contains(ref, "/") {
		return "", false
	}
	return refArtifactsPrefix + project + "/jobs/artifacts/" + strings.ReplaceAll(ref, "/", "%2F") + tail, true
}
