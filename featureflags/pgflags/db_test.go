package pgflags_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testDB is a fresh migrated database for one test, dropped at cleanup. Tests open their own
// pools on it: a second pool is a second replica, a pool through the proxy a cut-off one.
func testDB(t *testing.T) string {
	t.Helper()
	return testenv.DatabaseURL(t)
}

// testPool opens a pool on databaseURL, closed at cleanup.
func testPool(t *testing.T, databaseURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// proxy is a TCP proxy to Postgres that a test can cut and restore, to make Postgres
// unreachable for one Provider without touching the server the other tests share.
type proxy struct {
	t      *testing.T
	addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	p := &proxy{t: t, addr: "127.0.0.1:0", target: target}
	p.start()
	t.Cleanup(p.stop)
	return p
}

// start listens (again, on the same port after stop) and forwards connections.
func (p *proxy) start() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr, p.conns = ln, ln.Addr().String(), map[net.Conn]struct{}{}
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

func (p *proxy) forward(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	if p.conns == nil { // stopped meanwhile
		p.mu.Unlock()
		client.Close()
		server.Close()
		return
	}
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go func() { _, _ = io.Copy(server, client); server.Close() }()
	_, _ = io.Copy(client, server)
	client.Close()
}

// stop refuses new connections and cuts the open ones, as a Postgres crash would.
func (p *proxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// url is databaseURL with its host replaced by the proxy's address.
func (p *proxy) url(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	u.Host = p.addr
	p.mu.Unlock()
	return u.String()
}

// eventually polls cond every 10ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
