package handlers

import (
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/builds"
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
	id, err := h.svc.LatestSuccessfulJob(r.Context(), pid, ref, job)
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
	if err := builds.CheckRefName("ref_name", ref); err != nil {
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
