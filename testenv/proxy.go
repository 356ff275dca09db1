package testenv

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy to a server (Postgres, Redis) that a test can cut and restore, to
// make the server unreachable for one client without touching the server other tests share,
// or slow (SetLatency), to make it slow for that client alone.
type Proxy struct {
	t      testing.TB
	addr   string
	target string
	// latency delays every answer the server sends (nanoseconds).
	latency atomic.Int64

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
}

// StartProxy listens on a free local port and forwards each connection to target
// (host:port); it is stopped when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{t: t, addr: "127.0.0.1:0", target: target}
	p.Start()
	t.Cleanup(p.Stop)
	return p
}

// Start listens (again after Stop, on the same port) and forwards connections.
func (p *Proxy) Start() {
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

func (p *Proxy) forward(client net.Conn) {
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
	p.copyDelayed(client, server)
	client.Close()
}

// SetLatency delays each answer the server sends by d from now on (0: none), as a slow or
// overloaded server would: a request/response protocol's every round trip takes d longer.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// copyDelayed copies the server's answers to the client, each chunk held for the latency
// in force when it arrived; chunks keep their order, so a pipelined client sees each
// answer late rather than out of order.
func (p *Proxy) copyDelayed(dst, src net.Conn) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 1024)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{buf[:n], time.Now().Add(time.Duration(p.latency.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(c.b); err != nil {
			src.Close()
			for range ch { // let the reader end
			}
			return
		}
	}
}

// Stop refuses new connections and cuts the open ones, as a crash of the server would.
func (p *Proxy) Stop() {
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

// URL is serverURL (postgres://…, redis://…) with its host replaced by the proxy's address.
func (p *Proxy) URL(serverURL string) string {
	p.t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	u.Host = p.addr
	p.mu.Unlock()
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
