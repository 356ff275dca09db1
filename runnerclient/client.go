package runnerclient

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Job states the runner sends in PUT /jobs/:id. StatePending is jobapi's
// two-phase keep-alive; the real runner never sends it.
const (
	StatePending = "pending"
	StateRunning = "running"
	StateSuccess = "success"
	StateFailed  = "failed"
)

// ErrNotJSON is returned when a success response that should carry JSON has
// another Content-Type; the runner treats that response as an error.
var ErrNotJSON = errors.New("server should return application/json")

// maxResponseBody bounds what the client reads from one response.
const maxResponseBody = 64 << 20

// Client talks to a jobapi (or GitLab) server as one runner manager would.
// Create it with New; its exported fields may be changed before first use.
// A Client is safe for concurrent use and must not be copied.
type Client struct {
	BaseURL  string // as in config.toml: "/api/v4/" is appended, a trailing "/ci" dropped
	HTTP     *http.Client
	Token    string // runner authentication token (glrt-… or glrtr-…)
	SystemID string // s_... or r_...; omitted from requests when empty
	Info     Info   // sent with verify, jobs/request and every job update

	// ID, TokenObtainedAt and TokenExpiresAt are what config.toml keeps beside the token
	// (common.RunnerCredentials): RegisterCommand and ResetToken set them, and
	// NextTokenReset reads them as gitlab-runner run does. A zero expiry: never.
	ID              int64
	TokenObtainedAt time.Time
	TokenExpiresAt  time.Time

	UserAgent string

	// MaxWait, when > 0, caps every wait RunJob makes: the trace period
	// (3 s, then X-GitLab-Trace-Update-Interval), the 30 s keep-alive touch
	// period and the pauses between final-update retries. Tests set it to a
	// few milliseconds; 0 keeps gitlab-runner's timings.
	MaxWait time.Duration

	mu         sync.Mutex
	lastUpdate string
}

// New returns a client that presents itself as gitlab-runner 19.4 with the
// shell executor (DefaultInfo).
func New(baseURL, token, systemID string) *Client {
	info := DefaultInfo()
	return &Client{
		BaseURL: baseURL,
		// Like the runner (client.createTransport), a transport of its own:
		// connections are not shared with other clients, and closing an
		// httptest.Server (which resets http.DefaultTransport) cannot break
		// them. The timeout is DefaultNetworkClientTimeout, long enough for
		// long polls.
		HTTP: &http.Client{
			Transport: http.DefaultTransport.(*http.Transport).Clone(),
			Timeout:   60 * time.Minute,
		},
		Token:    token,
		SystemID: systemID,
		Info:     info,
		// AppVersionInfo.UserAgent
		UserAgent: fmt.Sprintf("%s %s (%s; %s; %s/%s)",
			info.Name, info.Version, runnerBranch, runnerGo, info.Platform, info.Architecture),
	}
}

// LastUpdate is the last X-GitLab-Last-Update seen; RequestJob sends it back
// as last_update.
func (c *Client) LastUpdate() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastUpdate
}

// CloseIdleConnections closes the client's idle keep-alive connections.
// Call it when done with a client in tests that check for leaked goroutines.
func (c *Client) CloseIdleConnections() {
	if c.HTTP != nil {
		c.HTTP.CloseIdleConnections()
	}
}

// StatusError is a response with a status code the call does not accept.
type StatusError struct {
	Request string // e.g. "POST /api/v4/jobs/request"
	Code    int
	Message string // the body's "message", or the status text
	Header  http.Header
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: %d %s", e.Request, e.Code, e.Message)
}

// Verify calls POST /runners/verify, as `gitlab-runner verify` and
// `register` with a glrt- token do.
func (c *Client) Verify(ctx context.Context) (VerifyResult, error) {
	var res VerifyResult
	body := verifyRunnerRequest{Token: c.Token, SystemID: c.SystemID, Info: c.Info}
	rep, err := c.doJSON(ctx, http.MethodPost, "runners/verify", runnerToken(c.Token), body, http.StatusOK, &res)
	res.Header = rep.header
	if err != nil {
		return res, err
	}
	if rep.code != http.StatusOK {
		return res, rep.statusError()
	}
	if res.ID == 0 {
		// commands/register.go verifyRunner panics on it.
		return res, fmt.Errorf("verify: id is 0, gitlab-runner register would panic")
	}
	return res, nil
}

// RequestResult describes one POST /jobs/request.
type RequestResult struct {
	Code   int // HTTP status; 0 when no response arrived
	Header http.Header
	// Healthy is false where gitlab-runner counts the poll towards its
	// unhealthy limit (3 in a row stop polling for an hour): 403, transport
	// errors and unreadable 201 bodies.
	Healthy bool
	Message string // error text from the body, for logs
}

// RequestJob asks for a job like GitLabClient.RequestJob: 201 gives a job,
// 204 none. The error is non-nil exactly when the runner would mark itself
// unhealthy (403, no response, 201 without a JSON job). Other codes (409,
// 422, 429, 503, ...) are "failed, ask again later": no job, no error, and
// the code in RequestResult. Unlike the runner's transport, the client does
// not retry 429 and 5xx by itself, so tests see every answer.
func (c *Client) RequestJob(ctx context.Context) (*Job, RequestResult, error) {
	body := jobRequest{Info: c.Info, Token: c.Token, SystemID: c.SystemID, LastUpdate: c.LastUpdate()}
	var job Job
	rep, err := c.doJSON(ctx, http.MethodPost, "jobs/request", runnerToken(c.Token), body, http.StatusCreated, &job)
	res := RequestResult{Code: rep.code, Header: rep.header, Message: rep.message()}
	if err != nil {
		return nil, res, err
	}
	switch rep.code {
	case http.StatusCreated:
		res.Healthy = true
		job.Raw = rep.body
		return &job, res, nil
	case http.StatusForbidden:
		return nil, res, rep.statusError()
	default:
		res.Healthy = true
		return nil, res, nil
	}
}

// UpdateOptions are the optional fields of a job update.
type UpdateOptions struct {
	FailureReason string
	ExitCode      int    // omitted from the body when 0, as the runner does
	Checksum      string // "crc32:%08x" of the whole trace
	Bytesize      int
}

// UpdateJob sends PUT /jobs/:id with the given state and classifies the
// answer like createUpdateJobResult. The error is set only when no response
// arrived (then State is UpdateAbort, as for the runner).
func (c *Client) UpdateJob(ctx context.Context, job *Job, state string, opts UpdateOptions) (UpdateResult, error) {
	body := updateJobRequest{
		Info:          c.Info,
		Token:         job.Token,
		State:         state,
		FailureReason: opts.FailureReason,
		Checksum:      opts.Checksum,
		Output:        jobTraceOutput{Checksum: opts.Checksum, Bytesize: opts.Bytesize},
		ExitCode:      opts.ExitCode,
	}
	rep, err := c.doJSON(ctx, http.MethodPut, fmt.Sprintf("jobs/%d", job.ID), jobToken(job.Token), body, http.StatusOK, nil)
	if err != nil {
		return classifyUpdate(0, nil), err
	}
	return classifyUpdate(rep.code, rep.header), nil
}

// Keepalive sends PUT /jobs/:id with state=pending: jobapi's two-phase
// keep-alive for a runner still provisioning. gitlab-runner has no such call.
func (c *Client) Keepalive(ctx context.Context, job *Job) (UpdateResult, error) {
	return c.UpdateJob(ctx, job, StatePending, UpdateOptions{})
}

// PatchTrace sends data as the trace bytes starting at offset, like
// GitLabClient.PatchTrace. An empty patch sends nothing and succeeds. The
// error is set only when no response arrived (State is then PatchFailed:
// the runner retries, it does not abort).
func (c *Client) PatchTrace(ctx context.Context, job *Job, offset int, data []byte) (PatchResult, error) {
	if len(data) == 0 {
		return PatchResult{State: PatchSucceeded, Offset: offset}, nil
	}
	req, err := c.newRequest(ctx, http.MethodPatch, fmt.Sprintf("jobs/%d/trace?debug_trace=false", job.ID), data, "text/plain")
	if err != nil {
		return PatchResult{State: PatchFailed, Offset: offset}, err
	}
	req.Header.Set("JOB-TOKEN", job.Token)
	req.Header.Set("Content-Range", contentRange(offset, len(data)))
	rep, err := c.do(req)
	if err != nil {
		return PatchResult{State: PatchFailed, Offset: offset}, err
	}
	return classifyPatch(rep.code, rep.header, offset, offset+len(data)), nil
}

func runnerToken(t string) http.Header { return http.Header{"Runner-Token": {t}} }
func jobToken(t string) http.Header    { return http.Header{"Job-Token": {t}} }

// reply is a response read in full.
type reply struct {
	req    string
	code   int
	header http.Header
	body   []byte
}

func (r reply) statusError() *StatusError {
	return &StatusError{Request: r.req, Code: r.code, Message: r.message(), Header: r.header}
}

// message mirrors getMessageFromJSONResponse: the "message" of a JSON error
// body, which is a string or {"field": ["error", ...]}, else the status text.
func (r reply) message() string {
	if r.code == 0 || r.code/100 == 2 {
		return ""
	}
	var body struct {
		Message json.RawMessage `json:"message"`
	}
	if checkJSON(r.header) == nil && json.Unmarshal(r.body, &body) == nil && len(body.Message) > 0 {
		var s string
		if json.Unmarshal(body.Message, &s) == nil {
			return s
		}
		var fields map[string][]any
		if json.Unmarshal(body.Message, &fields) == nil {
			var parts []string
			for k, v := range fields {
				vs := make([]string, len(v))
				for i, e := range v {
					vs[i] = fmt.Sprint(e)
				}
				parts = append(parts, k+": "+strings.Join(vs, "; "))
			}
			slices.Sort(parts)
			return strings.Join(parts, ", ")
		}
	}
	return http.StatusText(r.code)
}

// doJSON mirrors client.doJSON: a JSON body, Accept only when a JSON answer
// is expected, the answer decoded only when the code is the expected one,
// and X-GitLab-Last-Update remembered from any answer that got that far.
func (c *Client) doJSON(ctx context.Context, method, path string, auth http.Header, in any, want int, out any) (reply, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return reply{}, err
	}
	req, err := c.newRequest(ctx, method, path, body, "application/json")
	if err != nil {
		return reply{}, err
	}
	for k, v := range auth {
		req.Header[k] = v
	}
	if out != nil {
		req.Header.Set("Accept", "application/json")
	}
	rep, err := c.do(req)
	if err != nil {
		return rep, err
	}
	if rep.code == want && out != nil {
		if err := checkJSON(rep.header); err != nil {
			return rep, fmt.Errorf("%s: %w", rep.req, err)
		}
		if err := json.NewDecoder(bytes.NewReader(rep.body)).Decode(out); err != nil {
			return rep, fmt.Errorf("%s: decoding json payload: %w", rep.req, err)
		}
	}
	if lu := rep.header.Get(headerLastUpdate); lu != "" {
		c.mu.Lock()
		c.lastUpdate = lu
		c.mu.Unlock()
	}
	return rep, nil
}

// checkJSON mirrors isResponseApplicationJSON: parameters such as charset
// are fine, any other media type is not.
func checkJSON(h http.Header) error {
	ct := h.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return fmt.Errorf("%w, got %q", ErrNotJSON, ct)
	}
	return nil
}

// newRequest builds a request with the headers the runner puts on every
// call (client.do and addCorrelationID).
func (c *Client) newRequest(ctx context.Context, method, path string, body []byte, contentType string) (*http.Request, error) {
	u, err := c.url(path)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", c.UserAgent)
	req.Header.Set("X-Request-Id", newRequestID())
	req.Header.Set("Content-Type", contentType)
	return req, nil
}

// url mirrors newClient and fixCIURL.
func (c *Client) url(path string) (string, error) {
	base := strings.TrimSuffix(strings.TrimRight(c.BaseURL, "/"), "/ci")
	u, err := url.Parse(base + "/api/v4/" + path)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("runnerclient: only http or https scheme supported, got %q", c.BaseURL)
	}
	return u.String(), nil
}

func (c *Client) do(req *http.Request) (reply, error) {
	rep := reply{req: req.Method + " " + req.URL.Path}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return rep, err
	}
	defer res.Body.Close()
	rep.code, rep.header = res.StatusCode, res.Header
	rep.body, err = io.ReadAll(io.LimitReader(res.Body, maxResponseBody))
	if err != nil {
		return rep, fmt.Errorf("%s: reading response: %w", rep.req, err)
	}
	return rep, nil
}

// newRequestID is a correlation id like the runner's: a UUID without dashes.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
