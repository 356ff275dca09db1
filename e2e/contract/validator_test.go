package contract_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// unimplementedKey marks an operation that SPEC defines but handlers/routes.go does not
// serve yet; the route check fails as soon as it is served with the marker still set.
const unimplementedKey = "x-jobapi-unimplemented"

// loadSpec loads and validates openapi.yaml.
func loadSpec(t testing.TB) *openapi3.T {
	t.Helper()
	specPath := filepath.Join(jobapitest.ModuleRoot(t), "openapi.yaml")
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(specPath)
	if err != nil {
		t.Fatalf("load %s: %v", specPath, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", specPath, err)
	}
	return doc
}

func unimplemented(op *openapi3.Operation) bool {
	v, ok := op.Extensions[unimplementedKey]
	b, isBool := v.(bool)
	return ok && isBool && b
}

// operationKey names an operation as "METHOD /path/{template}".
func operationKey(method, path string) string { return strings.ToUpper(method) + " " + path }

// validator is an http.RoundTripper that checks every exchange with the replica against
// openapi.yaml: the request must match (unless the test marks it as a deliberate client
// error, which the document must then reject), and the response must match the operation:
// a documented status, its headers, its content type and its schema.
type validator struct {
	t      testing.TB
	doc    *openapi3.T
	router routers.Router
	next   http.RoundTripper
	opts   *openapi3filter.Options

	mu   sync.Mutex
	seen map[string]map[int]int // operation → status → count
}

// yamlText decodes an application/yaml body as the text it is: the server compiles a
// .gitlab-ci.yml from it (the schema says string), and a body that is not even YAML is the
// server's to refuse, not the validator's.
func yamlText(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	b, err := io.ReadAll(body)
	return string(b), err
}

func init() { openapi3filter.RegisterBodyDecoder("application/yaml", yamlText) }

func newValidator(t testing.TB) *validator {
	t.Helper()
	doc := loadSpec(t)
	// The document names the dev server; the router must match the test replica's address.
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatalf("router: %v", err)
	}
	return &validator{
		t: t, doc: doc, router: router, next: http.DefaultTransport,
		opts: &openapi3filter.Options{
			IncludeResponseStatus: true, // an undocumented status is a failure
			MultiError:            true,
			SkipSettingDefaults:   true, // never alter what is sent
			AuthenticationFunc:    headerAuth,
		},
		seen: map[string]map[int]int{},
	}
}

// headerAuth accepts an apiKey header scheme when its header is present, and an http bearer
// scheme when Authorization carries a Bearer token: whether the value is right is the
// server's business (and answered with a documented 401/403).
func headerAuth(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	s := in.SecurityScheme
	h := in.RequestValidationInput.Request.Header
	if s.Type == "apiKey" && s.In == "header" && h.Get(s.Name) != "" {
		return nil
	}
	if s.Type == "http" && strings.EqualFold(s.Scheme, "bearer") && strings.HasPrefix(strings.ToLower(h.Get("Authorization")), "bearer ") {
		return nil
	}
	if s.Type == "http" {
		return fmt.Errorf("no Authorization: Bearer header")
	}
	return fmt.Errorf("no %s header", s.Name)
}

type invalidRequestKey struct{}

// expectInvalid marks a request as a deliberate client error: openapi.yaml must reject it
// too (so the document is as strict as the server), and the response is still validated.
func expectInvalid(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), invalidRequestKey{}, true))
}

func (v *validator) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	name := req.Method + " " + req.URL.RequestURI()
	ctx := req.Context()

	find := req
	if req.URL.RawPath != "" {
		// An encoded / in a path parameter (a protected ref's name, release%2F%2A) keeps it
		// one segment, as the server's router (chi) matches the raw path; kin-openapi's
		// router matches the decoded one.
		u := *req.URL
		u.Path, u.RawPath = req.URL.RawPath, ""
		find = req.Clone(ctx)
		find.URL = &u
	}
	route, params, err := v.router.FindRoute(find)
	if err != nil {
		v.t.Errorf("%s: no operation in openapi.yaml: %v", name, err)
		return v.next.RoundTrip(withBody(req, body))
	}
	in := &openapi3filter.RequestValidationInput{Request: withBody(req, body), PathParams: params, Route: route, Options: v.opts}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	in.Request = withBody(req, body) // validation consumed the body; the response check may look again
	invalid, _ := ctx.Value(invalidRequestKey{}).(bool)
	switch {
	case invalid && reqErr == nil:
		v.t.Errorf("%s: openapi.yaml accepts a request the server must reject (body %.200q)", name, body)
	case !invalid && reqErr != nil:
		v.t.Errorf("%s: request does not match openapi.yaml: %v", name, reqErr)
	}

	resp, err := v.next.RoundTrip(withBody(req, body))
	if err != nil {
		return nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if err != nil {
		return nil, err
	}
	v.checkResponse(ctx, name, in, resp, respBody)

	v.mu.Lock()
	key := operationKey(route.Method, route.Path)
	if v.seen[key] == nil {
		v.seen[key] = map[int]int{}
	}
	v.seen[key][resp.StatusCode]++
	v.mu.Unlock()
	return resp, nil
}

// contractHeaders are the response headers clients act on; each must be declared wherever
// it is sent (kin-openapi only checks the declared ones).
var contractHeaders = []string{"Job-Status", "X-GitLab-Last-Update", "Range", "X-GitLab-Trace-Update-Interval",
	"Retry-After", "X-Page", "X-Per-Page", "X-Total", "X-Total-Pages", "X-Next-Page"}

func (v *validator) checkResponse(ctx context.Context, name string, in *openapi3filter.RequestValidationInput, resp *http.Response, body []byte) {
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(body)), Options: v.opts,
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		v.t.Errorf("%s: %d response does not match openapi.yaml: %v\nbody: %.500s", name, resp.StatusCode, err, body)
		return
	}
	// kin-openapi checks only what the document declares: a body or a header it does not
	// mention passes, and either would hide drift.
	ref := in.Route.Operation.Responses.Status(resp.StatusCode)
	if ref == nil || ref.Value == nil {
		return
	}
	for _, h := range contractHeaders {
		if _, documented := ref.Value.Headers[h]; !documented && resp.Header.Get(h) != "" {
			v.t.Errorf("%s: %d sends header %s, which openapi.yaml does not declare for it", name, resp.StatusCode, h)
		}
	}
	if len(ref.Value.Content) == 0 && len(body) > 0 {
		v.t.Errorf("%s: %d carries a body openapi.yaml does not declare: %.200q", name, resp.StatusCode, body)
	}
}

// checkCoverage fails for every implemented operation the scenario never called.
func (v *validator) checkCoverage(t testing.TB) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	var missing []string
	for path, item := range v.doc.Paths.Map() {
		for method, op := range item.Operations() {
			if unimplemented(op) {
				continue
			}
			if len(v.seen[operationKey(method, path)]) == 0 {
				missing = append(missing, operationKey(method, path))
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the scenario never exercised: %s", strings.Join(missing, ", "))
	}
	var lines []string
	for op, codes := range v.seen {
		var cs []string
		for c := range codes {
			cs = append(cs, fmt.Sprint(c))
		}
		slices.Sort(cs)
		lines = append(lines, op+" → "+strings.Join(cs, " "))
	}
	slices.Sort(lines)
	t.Logf("exercised:\n%s", strings.Join(lines, "\n"))
}

func withBody(r *http.Request, body []byte) *http.Request {
	c := r.Clone(r.Context())
	if body == nil {
		c.Body = nil
		return c
	}
	c.Body = io.NopCloser(bytes.NewReader(body))
	c.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	c.ContentLength = int64(len(body))
	return c
}
