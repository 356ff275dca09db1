// Runner protocol, artifacts. POST /jobs/:id/artifacts takes the uploading job's token and GET
// /jobs/:id/artifacts the token of a running job that depends on :id (JOB-TOKEN). The
// operator's downloads and deletion are in op_artifacts.go.

package handlers

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/artifacts"
)

// multipartSlack is what the multipart framing and small form fields may add to an upload
// beyond the file itself.
const multipartSlack = 1 << 20

// uploadArtifact is gitlab-runner's UploadRawArtifacts: POST /jobs/:id/artifacts with
// artifact_format, artifact_type and expire_in in the query, JOB-TOKEN, and a
// multipart/form-data body (chunked, length unknown) whose part "file" is the archive. The
// part streams through to the object store; nothing is read into memory or onto disk here.
// 201 stored (or the same bytes again); 403 wrong token or job not running; 413 over
// JOBAPI_MAX_ARTIFACT_SIZE; 400 bad parameters, a damaged archive, another artifact of the
// type; 503 with Retry-After when the object store fails (the runner retries).
func (h *Handler) uploadArtifact(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	token := jobToken(r, "")
	if err := h.limitJob(r, "job_artifacts", id, token); err != nil {
		return err
	}
	limit := h.arts.Config().MaxSize
	if limit > 0 {
		if r.ContentLength > limit+multipartSlack {
			return &artifacts.TooLargeError{Limit: limit}
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit+multipartSlack)
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return badRequest("the body must be multipart/form-data with the artifact in a part named file: %s", err.Error())
	}
	var file *bodyReader
	var filename string
	for file == nil {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return badRequest("the multipart body has no part named file")
		}
		if err != nil {
			return bodyError(err)
		}
		if part.FormName() == "file" {
			file, filename = &bodyReader{r: part}, part.FileName()
			break
		}
		// Other fields (GitLab knows metadata, which gitlab-runner no longer sends) are
		// small: read past them.
		if n, err := io.Copy(io.Discard, io.LimitReader(part, 64<<10+1)); err != nil {
			return bodyError(err)
		} else if n > 64<<10 {
			return badRequest("form field %q is larger than 64 KiB", clip(part.FormName()))
		}
	}
	q := r.URL.Query()
	a, err := h.arts.UploadArtifact(r.Context(), artifacts.Upload{JobID: id, Token: token,
		Type: q.Get("artifact_type"), Format: q.Get("artifact_format"), ExpireIn: q.Get("expire_in"),
		Filename: filename, Body: file})
	if file.err != nil {
		// The body failed to arrive (cut off, too slow, past the byte limit): the client's
		// failure, never an outage of ours.
		return bodyError(file.err)
	}
	if err != nil {
		drainRefused(r, err)
		return err
	}
	writeJSON(w, http.StatusCreated, artifactJSON(a))
	return nil
}

// drainRefused reads the rest of a refused upload's body (bounded by the size limit and the
// body deadline) before the answer goes out, when the runner acts on that answer: a 503 it
// retries six times, a 400 it logs. Answering mid-body and closing makes the kernel reset
// the connection, and the runner would see a transport error instead of the status.
// Refusals of the token or the size are answered at once: nothing is owed to that client.
func drainRefused(r *http.Request, err error) {
	var forbidden *builds.JobForbiddenError
	var tooLarge *artifacts.TooLargeError
	var maxBytes *http.MaxBytesError
	if errors.As(err, &forbidden) || errors.As(err, &tooLarge) || errors.As(err, &maxBytes) || r.Context().Err() != nil {
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
}

func artifactJSON(a builds.Artifact) api.JobArtifact {
	return api.JobArtifact{FileType: a.FileType, FileFormat: a.FileFormat, Filename: a.Filename, Size: a.Size,
		SHA256: hex.EncodeToString(a.SHA256), ExpireAt: a.ExpireAt, Access: a.Access, ExposeAs: a.ExposeAs}
}

// downloadArtifact is gitlab-runner's DownloadArtifacts: GET /jobs/:id/artifacts with the
// dependent job's own token in JOB-TOKEN (GitLab's dependency token). 200 and the archive;
// 403 when the token's job is not running, is in another pipeline or does not depend on
// job :id; 404 when job :id does not exist or has no archive. With direct_download=true
// and an object store that can presign (S3), a 302 to a URL of the object valid for
// artifacts.DirectDownloadExpiry, as GitLab answers: the runner's HTTP client follows it and
// reads the archive from the store itself. The directory store streams it through jobapi.
func (h *Handler) downloadArtifact(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	a, err := h.arts.DependencyArtifact(r.Context(), id, jobToken(r, ""))
	if err != nil {
		return err
	}
	if direct, _ := strconv.ParseBool(r.URL.Query().Get("direct_download")); direct {
		u, err := h.arts.ArtifactURL(r.Context(), a)
		if err != nil {
			return err
		}
		if u != "" {
			w.Header().Set("Cache-Control", "no-store") // the URL is a credential until it expires
			http.Redirect(w, r, u, http.StatusFound)
			return nil
		}
	}
	rc, err := h.arts.OpenArtifact(r.Context(), a, 0, -1)
	if err != nil {
		return err
	}
	defer rc.Close()
	setArtifactHeaders(w, a)
	w.Header().Set("Content-Length", strconv.FormatInt(a.Size, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil && r.Context().Err() == nil {
		// The status is sent: the runner sees a short body, fails this try and retries.
		h.log.WarnContext(r.Context(), "artifact download cut short", "job_id", id, "error", err)
	}
	return nil
}

func setArtifactHeaders(w http.ResponseWriter, a builds.Artifact) {
	ct := "application/octet-stream"
	switch a.FileFormat {
	case builds.ArtifactFormatZip:
		ct = "application/zip"
	case builds.ArtifactFormatGzip:
		ct = "application/gzip"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": a.Filename}))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("ETag", `"`+hex.EncodeToString(a.SHA256)+`"`)
}

// artifactTooLarge is the 413 text, as GitLab words it.
func artifactTooLarge(e *artifacts.TooLargeError) string {
	return fmt.Sprintf("413 Request Entity Too Large - file size has reached maximum size limit (%d bytes)", e.Limit)
}
