package jobapitest

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
)

// SwitchProxy is a load balancer in front of one replica at a time: tests point it at
// another replica to play a restart behind a stable address. While its replica is down it
// answers 502, as a real balancer does.
type SwitchProxy struct {
	*httptest.Server
	target atomic.Pointer[url.URL]
	errors atomic.Int64
	calls  atomic.Int64
}

// NewSwitchProxy starts a proxy to the replica at baseURL, stopped when the test ends.
func NewSwitchProxy(t testing.TB, baseURL string) *SwitchProxy {
	t.Helper()
	sp := &SwitchProxy{}
	sp.Point(t, baseURL)
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(sp.target.Load()) },
		Transport: http.DefaultTransport.(*http.Transport).Clone(),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			sp.errors.Add(1)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	sp.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sp.calls.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(sp.Close)
	return sp
}

// Point sends the following requests to the replica at baseURL.
func (sp *SwitchProxy) Point(t testing.TB, baseURL string) {
	t.Helper()
	u, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	sp.target.Store(u)
}

// Errors counts the requests that found no replica (answered 502).
func (sp *SwitchProxy) Errors() int64 { return sp.errors.Load() }

// Calls counts every request.
func (sp *SwitchProxy) Calls() int64 { return sp.calls.Load() }
