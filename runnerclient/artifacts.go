package runnerclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The artifact calls as gitlab-runner v17.9.3 makes them (network/gitlab.go
// UploadRawArtifacts, DownloadArtifacts, determineUploadState; the retries of
// commands/helpers artifacts_uploader.go and artifacts_downloader.go). Later
// runners through 19.x send the same requests.

// Artifact formats and the archive type (common.ArtifactFormat, spec.Artifact).
const (
	ArtifactFormatZip   = "zip"
	ArtifactFormatGzip  = "gzip"
	ArtifactFormatRaw   = "raw"
	ArtifactTypeArchive = "archive"
)

// ArtifactsOptions mirrors common.ArtifactsOptions: what the artifacts-uploader
// command passes to UploadRawArtifacts.
type ArtifactsOptions struct {
	BaseName string // the multipart file name, e.g. "artifacts.zip"
	ExpireIn string // expire_in, omitted when empty
	Format   string // artifact_format, omitted when empty
	Type     string // artifact_type, omitted when empty
}

// UploadState mirrors common.UploadState.
type UploadState int

const (
	UploadSucceeded          UploadState = iota + 1 // 201
	UploadTooLarge                                  // 413: not retried
	UploadForbidden                                 // 403: not retried
	UploadFailed                                    // anything else: retried
	UploadServiceUnavailable                        // 503: retried, six tries
	UploadRedirected                                // 307 with Location: retried there
)

func (s UploadState) String() string {
	switch s {
	case UploadSucceeded:
		return "succeeded"
	case UploadTooLarge:
		return "too-large"
	case UploadForbidden:
		return "forbidden"
	case UploadFailed:
		return "failed"
	case UploadServiceUnavailable:
		return "service-unavailable"
	case UploadRedirected:
		return "redirected"
	}
	return fmt.Sprintf("UploadState(%d)", int(s))
}

// UploadResult is the answer to one POST /jobs/:id/artifacts, classified.
type UploadResult struct {
	Code     int // HTTP status; 0 when no response arrived
	State    UploadState
	Message  string // getMessageFromJSONResponse: the error's message, or the status
	Location string // for UploadRedirected
	Header   http.Header
}

// Content gives a fresh reader of an upload's bytes for each attempt, as the
// runner's StreamProvider does (it re-archives the files every time).
type Content func() (io.ReadCloser, error)

// UploadArtifacts mirrors GitLabClient.UploadRawArtifacts: POST
// jobs/:id/artifacts?artifact_format=&artifact_type=&expire_in= with JOB-TOKEN and
// a multipart/form-data body whose only part, "file" named BaseName, is
// written through a pipe as the content is read: chunked, of unknown length,
// never held in memory. The error is set only when no response arrived (the
// state is then UploadFailed, as for the runner).
func (c *Client) UploadArtifacts(ctx context.Context, job *Job, content Content, opts ArtifactsOptions) (UploadResult, error) {
	q := url.Values{}
	if opts.ExpireIn != "" {
		q.Set("expire_in", opts.ExpireIn)
	}
	if opts.Format != "" {
		q.Set("artifact_format", opts.Format)
	}
	if opts.Type != "" {
		q.Set("artifact_type", opts.Type)
	}
	u, err := c.url(fmt.Sprintf("jobs/%d/artifacts?%s", job.ID, q.Encode()))
	if err != nil {
		return UploadResult{State: UploadFailed}, err
	}
	src, err := content()
	if err != nil {
		return UploadResult{State: UploadFailed}, fmt.Errorf("%w: %w", errContent, err)
	}
	pr, pw := io.Pipe()
	mpw := multipart.NewWriter(pw)
	go func() {
		defer src.Close()
		part, err := mpw.CreateFormFile("file", opts.BaseName)
		if err == nil {
			_, err = io.Copy(part, src)
		}
		if err == nil {
			err = mpw.Close()
		}
		_ = pw.CloseWithError(err) // nil: EOF
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, pr)
	if err != nil {
		_ = pr.CloseWithError(err)
		return UploadResult{State: UploadFailed}, err
	}
	req.Header.Set("User-Agent", c.UserAgent)
	req.Header.Set("X-Request-Id", newRequestID())
	req.Header.Set("Content-Type", mpw.FormDataContentType())
	req.Header.Set("JOB-TOKEN", job.Token)
	rep, err := c.do(req)
	_ = pr.CloseWithError(errors.New("request done")) // stops the writer if the server answered early
	if err != nil {
		return UploadResult{State: UploadFailed}, err
	}
	return classifyUpload(rep), nil
}

// classifyUpload mirrors determineUploadState.
func classifyUpload(rep reply) UploadResult {
	r := UploadResult{Code: rep.code, Message: rep.message(), Header: rep.header}
	switch rep.code {
	case http.StatusCreated:
		r.State = UploadSucceeded
	case http.StatusTemporaryRedirect:
		r.State, r.Location = UploadRedirected, rep.header.Get("Location")
		if r.Location == "" {
			r.State = UploadFailed
		}
	case http.StatusForbidden:
		r.State = UploadForbidden
	case http.StatusRequestEntityTooLarge:
		r.State = UploadTooLarge
	case http.StatusServiceUnavailable:
		r.State = UploadServiceUnavailable
	default:
		r.State = UploadFailed
	}
	return r
}

// The artifacts-uploader's tries (artifacts_uploader.go): 3, or 6 when the
// server answered 503; its retry waits 1 s, doubling up to 5 s
// (helpers/retry defaultRetryMinBackoff, defaultRetryMaxBackoff).
const (
	uploadTries            = 3
	uploadUnavailableTries = 6
	uploadBackoffMin       = time.Second
	uploadBackoffMax       = 5 * time.Second
)

// UploadArtifactsRetrying uploads as `gitlab-runner artifacts-uploader` does:
// UploadArtifacts again after UploadFailed (up to 3 tries in all) or
// UploadServiceUnavailable (up to 6), never after 403 or 413, with the
// runner's backoff (capped by MaxWait). A redirect, which the runner follows to
// its Location, ends the tries here: jobapi never redirects uploads. It returns every try's result, the
// last one last; the error is ctx's, or that of content.
func (c *Client) UploadArtifactsRetrying(ctx context.Context, job *Job, content Content, opts ArtifactsOptions) ([]UploadResult, error) {
	var tries []UploadResult
	wait := uploadBackoffMin
	for {
		res, err := c.UploadArtifacts(ctx, job, content, opts)
		tries = append(tries, res)
		if ctx.Err() != nil {
			return tries, ctx.Err()
		}
		if errors.Is(err, errContent) {
			return tries, err
		}
		limit := 0
		switch res.State {
		case UploadFailed:
			limit = uploadTries
		case UploadServiceUnavailable:
			limit = uploadUnavailableTries
		}
		if len(tries) >= limit {
			return tries, nil
		}
		if err := c.sleep(ctx, wait); err != nil {
			return tries, err
		}
		wait = min(wait*2, uploadBackoffMax)
	}
}

// errContent marks a failure to open the upload's content.
var errContent = errors.New("couldn't get original body")

// DownloadState mirrors common.DownloadState.
type DownloadState int

const (
	DownloadSucceeded    DownloadState = iota + 1 // 200, body copied
	DownloadForbidden                             // 403: not retried
	DownloadUnauthorized                          // 401: not retried
	DownloadFailed                                // anything else, or a body cut short: retried
	DownloadNotFound                              // 404: not retried
)

func (s DownloadState) String() string {
	switch s {
	case DownloadSucceeded:
		return "succeeded"
	case DownloadForbidden:
		return "forbidden"
	case DownloadUnauthorized:
		return "unauthorized"
	case DownloadFailed:
		return "failed"
	case DownloadNotFound:
		return "not-found"
	}
	return fmt.Sprintf("DownloadState(%d)", int(s))
}

// DownloadResult is the answer to one GET /jobs/:id/artifacts, classified.
type DownloadResult struct {
	Code    int
	State   DownloadState
	Message string
	Bytes   int64 // copied to the writer
	Header  http.Header
}

// DownloadArtifacts mirrors GitLabClient.DownloadArtifacts for one dependency:
// GET jobs/:id/artifacts (direct_download when set) with the dependency's token
// in JOB-TOKEN, and on 200 the body streamed to w. The error is set only when
// no response arrived or the body broke off (the state is then DownloadFailed).
func (c *Client) DownloadArtifacts(ctx context.Context, dep Dependency, w io.Writer, directDownload *bool) (DownloadResult, error) {
	q := url.Values{}
	if directDownload != nil {
		q.Set("direct_download", strconv.FormatBool(*directDownload))
	}
	u, err := c.url(fmt.Sprintf("jobs/%d/artifacts?%s", dep.ID, q.Encode()))
	if err != nil {
		return DownloadResult{State: DownloadFailed}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return DownloadResult{State: DownloadFailed}, err
	}
	req.Header.Set("User-Agent", c.UserAgent)
	req.Header.Set("X-Request-Id", newRequestID())
	req.Header.Set("JOB-TOKEN", dep.Token)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return DownloadResult{State: DownloadFailed}, err
	}
	defer res.Body.Close()
	r := DownloadResult{Code: res.StatusCode, Header: res.Header}
	switch res.StatusCode {
	case http.StatusOK:
		// downloadArtifactFile: straight into the file, nothing held.
		r.Bytes, err = io.Copy(w, res.Body)
		if err != nil {
			r.State = DownloadFailed
			return r, fmt.Errorf("GET %s: body cut short after %d bytes: %w", req.URL.Path, r.Bytes, err)
		}
		r.State = DownloadSucceeded
		return r, nil
	case http.StatusForbidden:
		r.State = DownloadForbidden
	case http.StatusUnauthorized:
		r.State = DownloadUnauthorized
	case http.StatusNotFound:
		r.State = DownloadNotFound
	default:
		r.State = DownloadFailed
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	r.Message = reply{code: res.StatusCode, header: res.Header, body: body}.message()
	return r, nil
}

// BytesContent is Content of b, for small uploads in tests.
func BytesContent(b []byte) Content {
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}
