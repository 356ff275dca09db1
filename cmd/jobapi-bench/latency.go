package main

import (
	"math"
	"slices"
	"sync"
	"time"
)

// recorder keeps every latency sample of a scenario, by endpoint.
type recorder struct {
	mu      sync.Mutex
	samples map[string][]time.Duration
	errors  map[string]int
	lastErr map[string]string
}

func newRecorder() *recorder {
	return &recorder{samples: map[string][]time.Duration{}, errors: map[string]int{}, lastErr: map[string]string{}}
}

func (r *recorder) add(endpoint string, d time.Duration) {
	r.mu.Lock()
	r.samples[endpoint] = append(r.samples[endpoint], d)
	r.mu.Unlock()
}

func (r *recorder) fail(endpoint string, err error) {
	r.mu.Lock()
	r.errors[endpoint]++
	r.lastErr[endpoint] = err.Error()
	r.mu.Unlock()
}

func (r *recorder) count(endpoint string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.samples[endpoint])
}

// Latency summarises one endpoint's samples in milliseconds.
type Latency struct {
	N      int     `json:"n"`
	Errors int     `json:"errors,omitempty"`
	P50    float64 `json:"p50_ms"`
	P95    float64 `json:"p95_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
	// LastError is the last failure seen, for the reader of a failed run.
	LastError string `json:"last_error,omitempty"`
}

func summarize(s []time.Duration) Latency {
	if len(s) == 0 {
		return Latency{}
	}
	s = slices.Clone(s)
	slices.Sort(s)
	pct := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		i = min(max(i, 0), len(s)-1)
		return ms(s[i])
	}
	return Latency{N: len(s), P50: pct(0.50), P95: pct(0.95), P99: pct(0.99), Max: ms(s[len(s)-1])}
}

func (r *recorder) summary() map[string]Latency {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]Latency{}
	for k, s := range r.samples {
		out[k] = summarize(s)
	}
	for k, n := range r.errors {
		l := out[k]
		l.Errors, l.LastError = n, r.lastErr[k]
		out[k] = l
	}
	return out
}

func (r *recorder) totalErrors() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.errors {
		n += e
	}
	return n
}

func ms(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
