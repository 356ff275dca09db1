// What handlers of both audiences read from a request: path ids and bodies sent as JSON or as
// forms, as GitLab accepts both.

package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// decodeBody reads a JSON or form body into v (unknown fields refused). A form becomes a
// JSON object of strings first: the boolish fields accept "true"/"false" as GitLab does.
func decodeBody(r *http.Request, v any) error {
	if !isForm(r) {
		return decodeJSON(r, v, true)
	}
	if err := r.ParseForm(); err != nil {
		return badRequest("malformed form body: %s", err.Error())
	}
	return decodeValues(r.PostForm, v)
}

// decodeValues decodes form (or query) values into v as decodeBody does a form body.
func decodeValues(values url.Values, v any) error {
	m := make(map[string]string, len(values))
	for k, vals := range values {
		m[k] = vals[len(vals)-1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var he *httpError
		if errors.As(err, &he) {
			return he
		}
		return badRequest("malformed form body: %s", err.Error())
	}
	return nil
}

// isForm reports whether the body is form-encoded (GitLab accepts both forms and JSON).
func isForm(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt == "application/x-www-form-urlencoded" || mt == "multipart/form-data"
}

// boolish accepts true/false as JSON booleans or strings, as GitLab does.
type boolish bool

func (b *boolish) UnmarshalJSON(data []byte) error {
	v, err := parseBool(strings.Trim(string(data), `"`))
	if err != nil {
		return err
	}
	*b = boolish(v)
	return nil
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no":
		return false, nil
	}
	return false, badRequest("expected true or false, got %.40q", s)
}

func projectID(r *http.Request) (int64, error) { return pathID(r, "project_id") }

// projectAndID reads a project-scoped path: the project id and the id named name.
func projectAndID(r *http.Request, name string) (int64, int64, error) {
	pid, err := projectID(r)
	if err != nil {
		return 0, 0, err
	}
	id, err := pathID(r, name)
	return pid, id, err
}

// onlyBytes reports whether s holds only ASCII letters, digits and the bytes of extra.
func onlyBytes(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(extra, c) >= 0 {
			continue
		}
		return false
	}
	return true
}

func jobID(r *http.Request) (int64, error) {
	return pathID(r, "job_id")
}

func pathID(r *http.Request, name string) (int64, error) {
	v := chi.URLParam(r, name)
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("%s must be a positive integer, got %.40q", name, v)
	}
	return id, nil
}
