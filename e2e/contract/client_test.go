package contract_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// client sends the scenario's requests through the validator.
type client struct {
	t    *testing.T
	base string
	http *http.Client
}

// body is a request body with its content type.
type body struct {
	contentType string
	data        []byte
}

func jsonBody(t *testing.T, v any) *body {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return &body{contentType: "application/json", data: b}
}

func formBody(v url.Values) *body {
	return &body{contentType: "application/x-www-form-urlencoded", data: []byte(v.Encode())}
}

func rawBody(contentType string, data []byte) *body {
	return &body{contentType: contentType, data: data}
}

// opt adjusts a request before it is sent.
type opt func(*http.Request) *http.Request

func admin(r *http.Request) *http.Request {
	r.Header.Set("PRIVATE-TOKEN", jobapitest.AdminToken)
	return r
}

func header(k, v string) opt {
	return func(r *http.Request) *http.Request {
		r.Header.Set(k, v)
		return r
	}
}

func jobToken(token string) opt { return header("JOB-TOKEN", token) }

// invalid marks a deliberate client error that openapi.yaml must reject as well.
func invalid(r *http.Request) *http.Request { return expectInvalid(r) }

// do sends a request and fails the test unless the answer has status want.
func (c *client) do(want int, method, path string, b *body, opts ...opt) (*http.Response, []byte) {
	c.t.Helper()
	var rd io.Reader
	if b != nil {
		rd = bytes.NewReader(b.data)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if b != nil && b.contentType != "" {
		req.Header.Set("Content-Type", b.contentType)
	}
	for _, o := range opts {
		req = o(req)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	if resp.StatusCode != want {
		c.t.Fatalf("%s %s: status %d, want %d: %.500s", method, path, resp.StatusCode, want, out)
	}
	return resp, out
}

// decode sends a request like do and decodes the JSON answer into out.
func (c *client) decode(out any, want int, method, path string, b *body, opts ...opt) *http.Response {
	c.t.Helper()
	resp, data := c.do(want, method, path, b, opts...)
	if err := json.Unmarshal(data, out); err != nil {
		c.t.Fatalf("%s %s: decode %.300s: %v", method, path, data, err)
	}
	return resp
}

// wantHeader fails unless resp carries header k with value v.
func wantHeader(t *testing.T, what string, resp *http.Response, k, v string) {
	t.Helper()
	if got, ok := resp.Header[http.CanonicalHeaderKey(k)]; !ok || len(got) == 0 || got[0] != v {
		t.Errorf("%s: header %s = %q, want %q", what, k, resp.Header.Values(k), v)
	}
}

func path(format string, args ...any) string { return fmt.Sprintf(format, args...) }
