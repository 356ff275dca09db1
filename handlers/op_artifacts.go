// Operator API, artifacts: a member's personal access token, or an administrator's (or the
// admin token), in PRIVATE-TOKEN or Authorization: Bearer; each route's action (h.can in
// routes.go) decides by the caller's role (builds/access). The runner's upload and download are
// in runner_artifacts.go.

package handlers

import (
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/builds"
)

// getJobArtifacts is the operator's download of a job's archive (GitLab's GET
// /projects/:id/jobs/:job_id/artifacts), with HTTP ranges and conditional requests.
func (h *Handler) getJobArtifacts(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := h.jobIDs(r)
	if err != nil {
		return err
	}
	a, err := h.arts.DownloadableArchive(r.Context(), pid, id)
	if err != nil {
		return err
	}
	return h.serveArchive(w, r, a)
}

// getJobArtifactFile is the operator's download of one file out of a job's zip archive
// (GitLab's GET /projects/:id/jobs/:job_id/artifacts/*artifact_path).
func (h *Handler) getJobArtifactFile(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := h.jobIDs(r)
	if err != nil {
		return err
	}
	return h.serveArchiveFile(w, r, pid, id, chi.URLParam(r, "*"))
}

// deleteJobArtifacts is GitLab's DELETE /projects/:id/jobs/:job_id/artifacts: every
// artifact of the job goes; their objects leave the store now or with the next pass.
func (h *Handler) deleteJobArtifacts(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := h.jobIDs(r)
	if err != nil {
		return err
	}
	if err := h.arts.DeleteJobArtifacts(r.Context(), pid, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// serveArchive answers with an artifact archive: ranges, If-None-Match (the ETag is its
// SHA-256) and If-Modified-Since; a range it cannot serve is a 416 in plain text.
func (h *Handler) serveArchive(w http.ResponseWriter, r *http.Request, a builds.Artifact) error {
	content, err := h.arts.ArtifactContent(r.Context(), a)
	if err != nil {
		return err
	}
	defer content.Close()
	setArtifactHeaders(w, a)
	http.ServeContent(w, r, a.Filename, a.CreatedAt, content)
	return nil
}

// serveArchiveFile answers with one file out of a job's zip archive.
func (h *Handler) serveArchiveFile(w http.ResponseWriter, r *http.Request, pid, id int64, name string) error {
	m, err := h.arts.ArchiveFile(r.Context(), pid, id, name)
	if err != nil {
		return err
	}
	defer m.Close()
	ct := mime.TypeByExtension(path.Ext(m.Name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(m.Name)}))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.FormatInt(m.Size, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, m); err != nil && r.Context().Err() == nil {
		h.log.WarnContext(r.Context(), "artifact file download cut short", "job_id", id, "file", m.Name, "error", err)
	}
	return nil
}
