// Package tcpproxy is a TCP proxy to a server (Postgres, Redis, S3) that can be cut and
// restored, to make the server unreachable for the clients behind it without touching the
// server, or slowed (SetLatency), to make it slow for them alone. The tests reach it through
// testenv.Proxy; jobapi-bench's overload scenario uses it to slow Redis for one replica.
package tcpproxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards each connection it accepts to its target.
type Proxy struct {
	addr   string
	target string
	// latency delays every answer the server sends (nanoseconds).
	latency atomic.Int64

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
}

// New is a proxy to target (host:port) that will listen on a free local port once started.
func New(target string) *Proxy {
	return &Proxy{addr: "127.0.0.1:0", target: target}
}

// Start listens (again after Stop, on the same port) and forwards connections.
func (p *Proxy) Start() error {
	p.mu.Lock()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.mu.Unlock()
		return err
	}
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
	return nil
}

// Addr is the host:port the proxy listens on (the first Start picks it).
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
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

// SetLatency delays each answer the server sends by d from now on (0: none), as a slow or
// overloaded server would: a request/response protocol's every round trip takes d longer.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

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
