package main

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// latencyProxy is a TCP proxy that delays every answer of its target (Redis, in the
// overload scenario) by a set latency: a server that is slow, not down. (testenv.Proxy
// does the same for tests; the bench has no testing.TB to give it.)
type latencyProxy struct {
	ln      net.Listener
	target  string
	latency atomic.Int64 // nanoseconds
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
}

func startLatencyProxy(target string) (*latencyProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &latencyProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
	return p, nil
}

func (p *latencyProxy) addr() string { return p.ln.Addr().String() }

func (p *latencyProxy) setLatency(d time.Duration) { p.latency.Store(int64(d)) }

func (p *latencyProxy) forward(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go func() { _, _ = io.Copy(server, client); server.Close() }()
	// The answers, each chunk held for the latency in force when it arrived, in order.
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 1024)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := server.Read(buf)
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
		if _, err := client.Write(c.b); err != nil {
			server.Close()
			for range ch {
			}
			break
		}
	}
	client.Close()
}

func (p *latencyProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}
