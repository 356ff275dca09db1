package testenv

import (
	"net/url"
	"testing"
	"time"

	"github.com/jobapi/jobapi/tcpproxy"
)

// Proxy is a TCP proxy to a server (Postgres, Redis) that a test can cut and restore, to
// make the server unreachable for one client without touching the server other tests share,
// or slow (SetLatency), to make it slow for that client alone.
type Proxy struct {
	*tcpproxy.Proxy
	t testing.TB
}

// StartProxy listens on a free local port and forwards each connection to target
// (host:port); it is stopped when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{Proxy: tcpproxy.New(target), t: t}
	p.Start()
	t.Cleanup(p.Stop)
	return p
}

// Start listens (again after Stop, on the same port) and forwards connections.
func (p *Proxy) Start() {
	p.t.Helper()
	if err := p.Proxy.Start(); err != nil {
		p.t.Fatal(err)
	}
}

// URL is serverURL (postgres://…, redis://…) with its host replaced by the proxy's address.
func (p *Proxy) URL(serverURL string) string {
	p.t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		p.t.Fatal(err)
	}
	u.Host = p.Addr()
	return u.String()
}

// Eventually polls cond every 10 ms until it holds, failing the test with what it waited for
// when limit passes first. Tests that break a backend wait with it for a consequence of the
// fault they hold, never for the fault itself.
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
