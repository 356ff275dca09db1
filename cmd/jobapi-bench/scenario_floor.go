package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"bytes"

	"github.com/jobapi/jobapi/runnerclient"
)

// floor measures, in the same run, the cost of the work a job cannot do without (the efficiency table's denominator):
// `update`, one single-row primary-key UPDATE with its commit, on as many connections as
// jobapi's pool (what baseline does); and `http`, one runner-shaped HTTP round trip, a Go
// net/http handler decoding the JSON body runnerclient sends with a job request (about
// 1 KB) and answering a small JSON object, over loopback keep-alive from 32 clients. A job
// is at least 4 × http + 4 × update (request, ack, trace, finish), an ack http + update.
// With --repeat, each part is measured that many times and the medians are the floor.

// floorCost is the floor in microseconds of CPU per unit, of the whole machine and of the
// tested processes (tested.go), with the rates.
type floorCost struct {
	UpdateMachineUS float64 `json:"update_machine_us"`
	UpdateTestedUS  float64 `json:"update_tested_us"`
	UpdatesPerS     float64 `json:"updates_per_s"`
	HTTPMachineUS   float64 `json:"http_machine_us"`
	HTTPTestedUS    float64 `json:"http_tested_us"`
	HTTPPerS        float64 `json:"http_per_s"`
	HTTPBodyBytes   int     `json:"http_body_bytes"`
	JobMachineUS    float64 `json:"job_machine_us"`
	JobTestedUS     float64 `json:"job_tested_us"`
	AckMachineUS    float64 `json:"ack_machine_us"`
	AckTestedUS     float64 `json:"ack_tested_us"`
}

// floorHTTPClients is how many keep-alive clients the http floor runs (docs/performance.md,
// scenario floor).
const floorHTTPClients = 32

// floorPart is one measurement of one part of the floor.
type floorPart struct {
	n              int
	wall           time.Duration
	machine, tried float64 // CPU seconds
}

func (p floorPart) perUnit() (machine, tested, perS float64) {
	if p.n == 0 {
		return 0, 0, 0
	}
	return round3(p.machine / float64(p.n) * 1e6), round3(p.tried / float64(p.n) * 1e6), round3(float64(p.n) / p.wall.Seconds())
}

func (e *env) floor(ctx context.Context) (*Result, error) {
	rec := newRecorder()
	body, err := floorBody()
	if err != nil {
		return nil, err
	}
	var updates, https [][3]float64
	var updateN, httpN int
	var loads []float64
	for range e.cfg.Repeat {
		u, err := e.floorUpdates(ctx, rec)
		if err != nil {
			return nil, err
		}
		h, err := e.floorHTTP(ctx, rec, body)
		if err != nil {
			return nil, err
		}
		m, t, s := u.perUnit()
		updates = append(updates, [3]float64{m, t, s})
		m, t, s = h.perUnit()
		https = append(https, [3]float64{m, t, s})
		updateN += u.n
		httpN += h.n
		loads = append(loads, loadAvg())
	}
	med := func(rows [][3]float64, k int) float64 {
		v := make([]float64, len(rows))
		for i, r := range rows {
			v[i] = r[k]
		}
		return median(v)
	}
	f := floorCost{
		UpdateMachineUS: med(updates, 0), UpdateTestedUS: med(updates, 1), UpdatesPerS: med(updates, 2),
		HTTPMachineUS: med(https, 0), HTTPTestedUS: med(https, 1), HTTPPerS: med(https, 2), HTTPBodyBytes: len(body),
	}
	f.JobMachineUS = round3(4*f.HTTPMachineUS + 4*f.UpdateMachineUS)
	f.JobTestedUS = round3(4*f.HTTPTestedUS + 4*f.UpdateTestedUS)
	f.AckMachineUS = round3(f.HTTPMachineUS + f.UpdateMachineUS)
	f.AckTestedUS = round3(f.HTTPTestedUS + f.UpdateTestedUS)
	e.floorCost = &f

	r := e.result("floor", Resources{LoadAvg: loadAvg()}, rec)
	r.Unit = "updates/s"
	r.Count = updateN + httpN
	r.Throughput = f.UpdatesPerS
	r.Params = map[string]any{"update_connections": e.cfg.BaselineConns, "http_clients": floorHTTPClients,
		"duration_s": e.cfg.FloorDuration.Seconds(), "repeat": e.cfg.Repeat}
	r.Extra["floor"] = f
	r.Extra["http_per_s"] = f.HTTPPerS
	r.Extra["loadavg_1m_each_run"] = loads
	return r, nil
}

// floorUpdates is one measurement of the update floor.
func (e *env) floorUpdates(ctx context.Context, rec *recorder) (floorPart, error) {
	var p floorPart
	var machine machineSnapshot
	var tested testedSnapshot
	n, took, err := e.pgUpdates(ctx, e.cfg.FloorDuration, rec, "update", func() func() {
		machine, tested = snapshotMachine(), e.snapshotTested(ctx)
		return func() {
			if m := machineSince(machine, 0); m != nil {
				p.machine = m.Busy
			}
			if t := e.testedSince(ctx, tested); t != nil {
				p.tried = t.Total
			}
		}
	})
	p.n, p.wall = n, took
	return p, err
}

// floorRequest is the body's shape: runnerclient's job request.
type floorRequest struct {
	Info       runnerclient.Info `json:"info,omitempty"`
	Token      string            `json:"token,omitempty"`
	SystemID   string            `json:"system_id,omitempty"`
	LastUpdate string            `json:"last_update,omitempty"`
}

// floorBody is what runnerclient sends on a job request.
func floorBody() ([]byte, error) {
	c := runnerclient.New("http://127.0.0.1", "glrt-"+randHex(10), "s_"+randHex(6))
	return json.Marshal(floorRequest{Info: c.Info, Token: c.Token, SystemID: c.SystemID, LastUpdate: randHex(16)})
}

// floorHTTP is one measurement of the http floor, the server in this process.
func (e *env) floorHTTP(ctx context.Context, rec *recorder, body []byte) (floorPart, error) {
	var p floorPart
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return p, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req floorRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"message":"bad body"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": 1, "status": "ok", "last_update": req.LastUpdate})
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/api/v4/jobs/request"
	clients := make([]*http.Client, floorHTTPClients)
	for i := range clients {
		clients[i] = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	}
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()
	call := func(ctx context.Context, c *http.Client) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return callErr(nil, resp.StatusCode)
		}
		return nil
	}
	// Connect every client before the clock starts.
	loadgen(ctx, len(clients), func(ctx context.Context, i int) { _ = call(ctx, clients[i]) })
	var n atomic.Int64
	machine, tested := snapshotMachine(), e.snapshotTested(ctx)
	start := time.Now()
	deadline := start.Add(e.cfg.FloorDuration)
	loadgen(ctx, len(clients), func(ctx context.Context, i int) {
		for time.Now().Before(deadline) && ctx.Err() == nil && rec.totalErrors() <= maxErrors {
			t := time.Now()
			if err := call(ctx, clients[i]); err != nil {
				rec.fail("http", err)
				continue
			}
			rec.add("http", time.Since(t))
			n.Add(1)
		}
	})
	p.wall = time.Since(start)
	if m := machineSince(machine, 0); m != nil {
		p.machine = m.Busy
	}
	if t := e.testedSince(ctx, tested); t != nil {
		p.tried = t.Total
	}
	p.n = int(n.Load())
	return p, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return round3((v[len(v)/2-1] + v[len(v)/2]) / 2)
}
