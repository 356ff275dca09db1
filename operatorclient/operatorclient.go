// Package operatorclient is a small Go client for jobapi's operator API. Its WaitPipeline
// loops on the wait endpoint until every job of a pipeline finished, riding out replica
// restarts and backend faults (503, connection errors) with backoff.
package operatorclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// Client talks to one jobapi base URL with an admin token.
type Client struct {
	BaseURL string
	Token   string
	HTTP    *http.Client
}

// New returns a client; the HTTP client has no overall timeout because waits are long.
func New(baseURL, token string) *Client {
	return &Client{BaseURL: baseURL, Token: token, HTTP: &http.Client{}}
}

// Progress is one answer of the wait endpoint.
type Progress struct {
	Status        string  `json:"status"`
	JobsRemaining int     `json:"jobs_remaining"`
	Finished      []int64 `json:"finished"`
}

// Done reports whether the pipeline has nothing left to run.
func (p Progress) Done() bool { return p.JobsRemaining == 0 }

// StatusError is an answer the client does not retry (4xx).
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string { return fmt.Sprintf("jobapi answered %d: %s", e.Code, e.Message) }

// WaitOptions tune WaitPipeline.
type WaitOptions struct {
	// PerCall is the server-side wait of one request (default 30s).
	PerCall time.Duration
	// OnProgress is called after every answer.
	OnProgress func(Progress)
	// MaxBackoff caps the pause after a failed call (default 5s).
	MaxBackoff time.Duration
}

// WaitPipeline loops until jobs_remaining is 0 or ctx ends. Transient failures (5xx,
// connection refused while a replica restarts) are retried; the finished ids of the last
// answer are complete, since the server reads them from Postgres each time.
func (c *Client) WaitPipeline(ctx context.Context, projectID, pipelineID int64, o WaitOptions) (Progress, error) {
	if o.PerCall <= 0 {
		o.PerCall = 30 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	backoff := 50 * time.Millisecond
	var last Progress
	for {
		p, err := c.waitOnce(ctx, projectID, pipelineID, o.PerCall)
		var se *StatusError
		switch {
		case err == nil:
			backoff = 50 * time.Millisecond
			last = p
			if o.OnProgress != nil {
				o.OnProgress(p)
			}
			if p.Done() {
				return p, nil
			}
			continue
		case errors.As(err, &se) && se.Code < 500 && se.Code != http.StatusTooManyRequests:
			return last, err
		case ctx.Err() != nil:
			return last, ctx.Err()
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, o.MaxBackoff)
	}
}

func (c *Client) waitOnce(ctx context.Context, projectID, pipelineID int64, perCall time.Duration) (Progress, error) {
	// The endpoint takes whole seconds: round up, so that a PerCall under a second still
	// waits on the server instead of answering at once and looping hot.
	url := fmt.Sprintf("%s/api/v4/projects/%d/pipelines/%d/wait?timeout=%s", c.BaseURL, projectID, pipelineID,
		strconv.Itoa(int((perCall+time.Second-1)/time.Second)))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Progress{}, err
	}
	req.Header.Set("PRIVATE-TOKEN", c.Token)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return Progress{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return Progress{}, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(body, &e)
		return Progress{}, &StatusError{Code: resp.StatusCode, Message: e.Message}
	}
	var p Progress
	if err := json.Unmarshal(body, &p); err != nil {
		return Progress{}, fmt.Errorf("decode wait answer: %w", err)
	}
	slices.Sort(p.Finished)
	return p, nil
}
