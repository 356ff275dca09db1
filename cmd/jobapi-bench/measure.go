package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/jobapi/jobapi/handlers"
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

// queryCounter is a pgx.QueryTracer for the in-process server's pool. It counts the
// statements of each runner call the bench tagged (see taggingTransport), tells other request
// statements (by route) from background ones (sweeper, reapers, flag refreshes), and sums
// the database time of statements whose context carries a dbClock.
type queryCounter struct {
	mu       sync.Mutex
	inflight map[string]int64        // tagged request id → statements so far
	calls    map[callKey]callQueries // settled tagged calls
	byRoute  map[string]int64        // every request statement, by route pattern
	other    atomic.Int64
	// bySQL counts statements by their text (--debug-queries), request ones and background.
	bySQL map[string]int64
}

// callKey is a runner call (the endpoint name the scenario gave it) and its HTTP status.
type callKey struct {
	endpoint string
	status   int
}

type callQueries struct{ calls, queries int64 }

func newQueryCounter() *queryCounter {
	return &queryCounter{inflight: map[string]int64{}, calls: map[callKey]callQueries{}, byRoute: map[string]int64{}}
}

type dbClockKey struct{}
type queryStartKey struct{}

// dbClock accumulates the time of the queries run with its context.
type dbClock struct {
	queries atomic.Int64
	nanos   atomic.Int64
}

func withDBClock(ctx context.Context, c *dbClock) context.Context {
	return context.WithValue(ctx, dbClockKey{}, c)
}

// tagPrefix starts the X-Request-Id of tagged calls: "bench.<endpoint>.<random hex>", which
// jobapi keeps (it accepts up to 64 of [A-Za-z0-9._-]) and puts in the request context.
const tagPrefix = "bench."

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	id := handlers.RequestID(ctx)
	if q.bySQL != nil {
		key := strings.Join(strings.Fields(data.SQL), " ")
		if id == "" {
			key = "background: " + key
		}
		q.mu.Lock()
		q.bySQL[key]++
		q.mu.Unlock()
	}
	if id != "" {
		route := "request"
		if rc := chi.RouteContext(ctx); rc != nil {
			if p := rc.RoutePattern(); p != "" {
				route = p
			}
		}
		q.mu.Lock()
		q.byRoute[route]++
		if strings.HasPrefix(id, tagPrefix) {
			q.inflight[id]++
		}
		q.mu.Unlock()
	} else {
		q.other.Add(1)
	}
	if _, ok := ctx.Value(dbClockKey{}).(*dbClock); ok {
		return context.WithValue(ctx, queryStartKey{}, time.Now())
	}
	return ctx
}

// A pipelined batch (pgx.Batch) is traced per statement too: each counts as one.
func (q *queryCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (q *queryCounter) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	q.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: data.SQL, Args: data.Args})
}

func (q *queryCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (q *queryCounter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	c, ok := ctx.Value(dbClockKey{}).(*dbClock)
	if !ok {
		return
	}
	if start, ok := ctx.Value(queryStartKey{}).(time.Time); ok {
		c.queries.Add(1)
		c.nanos.Add(int64(time.Since(start)))
	}
}

// settle moves a finished call's statements to its endpoint and status. jobapi's handlers
// run their statements before they write the answer, so all are counted by then.
func (q *queryCounter) settle(id string, k callKey) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.calls[k]
	c.calls++
	c.queries += q.inflight[id]
	q.calls[k] = c
	delete(q.inflight, id)
}

type endpointKey struct{}

// withEndpoint names the runner call made with ctx, for the statement count of each call.
func withEndpoint(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, endpointKey{}, name)
}

// taggingTransport gives each call named by withEndpoint an X-Request-Id of the form
// bench.<endpoint>.<hex> (the runner sends 32 hex; jobapi echoes and logs either), and settles
// the call's statement count when the answer arrives.
type taggingTransport struct {
	base http.RoundTripper
	q    *queryCounter
}

func (t *taggingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ep, _ := req.Context().Value(endpointKey{}).(string)
	if ep == "" {
		return t.base.RoundTrip(req)
	}
	id := tagPrefix + ep + "." + randHex(8)
	r := req.Clone(req.Context())
	r.Header.Set("X-Request-Id", id)
	resp, err := t.base.RoundTrip(r)
	status := 0
	if err == nil {
		status = resp.StatusCode
	}
	t.q.settle(id, callKey{ep, status})
	return resp, err
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the wrapped transport.
func (t *taggingTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// queryCounts is a snapshot of a queryCounter.
type queryCounts struct {
	calls   map[callKey]callQueries
	byRoute map[string]int64
	other   int64
	bySQL   map[string]int64
}

func (q *queryCounter) snapshot() queryCounts {
	if q == nil {
		return queryCounts{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return queryCounts{calls: maps.Clone(q.calls), byRoute: maps.Clone(q.byRoute), other: q.other.Load(),
		bySQL: maps.Clone(q.bySQL)}
}

func (c queryCounts) sub(before queryCounts) queryCounts {
	out := queryCounts{calls: map[callKey]callQueries{}, byRoute: map[string]int64{}, other: c.other - before.other}
	for k, v := range c.calls {
		b := before.calls[k]
		if v.calls != b.calls {
			out.calls[k] = callQueries{calls: v.calls - b.calls, queries: v.queries - b.queries}
		}
	}
	for k, v := range c.byRoute {
		if d := v - before.byRoute[k]; d != 0 {
			out.byRoute[k] = d
		}
	}
	if c.bySQL != nil {
		out.bySQL = map[string]int64{}
		for k, v := range c.bySQL {
			if d := v - before.bySQL[k]; d != 0 {
				out.bySQL[k] = d
			}
		}
	}
	return out
}

// per returns the statements per call of an endpoint, over the given statuses (all when
// none), and whether any such call was counted.
func (c queryCounts) per(endpoint string, statuses ...int) (float64, bool) {
	var n callQueries
	for k, v := range c.calls {
		if k.endpoint == endpoint && (len(statuses) == 0 || slices.Contains(statuses, k.status)) {
			n.calls += v.calls
			n.queries += v.queries
		}
	}
	if n.calls == 0 {
		return 0, false
	}
	return round3(float64(n.queries) / float64(n.calls)), true
}

// requestQueries is every statement run on behalf of an HTTP request.
func (c queryCounts) requestQueries() int64 {
	var n int64
	for _, v := range c.byRoute {
		n += v
	}
	return n
}

// logStatements prints a window's statements by count (--debug-queries).
func (e *env) logStatements(name string, q queryCounts) {
	if q.bySQL == nil {
		return
	}
	type kv struct {
		sql string
		n   int64
	}
	var list []kv
	for k, v := range q.bySQL {
		list = append(list, kv{k, v})
	}
	slices.SortFunc(list, func(a, b kv) int { return int(b.n - a.n) })
	for _, x := range list[:min(len(list), 25)] {
		e.logf("%s: %8d  %.150s", name, x.n, x.sql)
	}
}

// window measures what one scenario's measured phase cost the server: process CPU
// (getrusage), the server's own goroutines' CPU (a CPU profile whose samples are split by the
// pprof label every server goroutine inherits), peak RSS and Postgres queries.
type window struct {
	env      *env
	name     string
	start    time.Time
	rusage   syscall.Rusage
	profile  bytes.Buffer
	profiled bool
	queries  queryCounts
	remote   procStat
	wal      walStats
	machine  machineSnapshot
}

// walStats is pg_stat_wal (Postgres 14+): the whole server's WAL, which on a quiet machine
// is what the scenario wrote.
type walStats struct {
	Records int64   `json:"records"`
	FPI     int64   `json:"full_page_images"`
	MB      float64 `json:"mb"`
	ok      bool
}

func (e *env) walSnapshot(ctx context.Context) walStats {
	var w walStats
	var bytes float64
	if err := e.db.QueryRow(ctx, `SELECT wal_records, wal_fpi, wal_bytes::float8 FROM pg_stat_wal`).Scan(&w.Records, &w.FPI, &bytes); err != nil {
		return w
	}
	w.MB, w.ok = bytes/(1<<20), true
	return w
}

// Resources is what a window measured.
type Resources struct {
	WallSeconds    float64 `json:"wall_s"`
	ProcessCPU     float64 `json:"process_cpu_s"`
	ServerCPU      float64 `json:"server_cpu_s"`
	LoadGenCPU     float64 `json:"loadgen_cpu_s,omitempty"`
	RuntimeCPU     float64 `json:"runtime_cpu_s,omitempty"`
	PeakRSSMB      float64 `json:"peak_rss_mb"`
	CPUAttribution string  `json:"cpu_attribution"`
	// Go runtime memory at the end of the window (the whole process): heap in use, goroutine
	// stacks, and what the runtime holds from the OS; and the goroutines then alive.
	GoHeapMB   float64 `json:"go_heap_inuse_mb"`
	GoStackMB  float64 `json:"go_stack_inuse_mb"`
	GoSysMB    float64 `json:"go_sys_mb"`
	Goroutines int     `json:"goroutines"`
	// WAL is what Postgres wrote to its log meanwhile (pg_stat_wal, the whole server).
	WAL *walStats `json:"wal,omitempty"`
	// LoadAvg is the machine's 1-minute load average at the end: other work on the same
	// 2 cores shows here.
	LoadAvg float64 `json:"loadavg_1m"`
	// Machine is where all of the machine's CPU went meanwhile (machine.go).
	Machine *machineCPU `json:"machine_cpu,omitempty"`
	queries queryCounts
}

const labelKey = "jobapi_bench"

// runtimeReset returns freed memory to the OS, so that the next peak is the next phase's.
func runtimeReset() {
	runtime.GC()
	debug.FreeOSMemory()
}

func osGetpid() int { return os.Getpid() }

// startWindow starts measuring; resetPeak restarts the peak RSS from the current RSS (the
// idle scenario keeps the peak of its warm-up, when every runner connects).
func (e *env) startWindow(name string, resetPeak bool) *window {
	w := &window{env: e, name: name}
	if resetPeak {
		// A clean heap, then a fresh peak: VmHWM measures this phase, not the seeding before it.
		runtimeReset()
		if pid := e.rssPID(); pid > 0 {
			resetPeakRSS(pid)
		}
	}
	if e.serverPID > 0 {
		w.remote, _ = readProcStat(e.serverPID)
	} else if e.srv != nil {
		if err := pprof.StartCPUProfile(&w.profile); err == nil {
			w.profiled = true
		}
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &w.rusage)
	w.queries = e.queries.snapshot()
	w.wal = e.walSnapshot(context.Background())
	w.machine = snapshotMachine()
	w.start = time.Now()
	return w
}

func (w *window) stop() Resources {
	var res Resources
	res.WallSeconds = round3(time.Since(w.start).Seconds())
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	res.ProcessCPU = round3(cpuSeconds(ru) - cpuSeconds(w.rusage))
	res.Machine = machineSince(w.machine, res.ProcessCPU)
	res.queries = w.env.queries.snapshot().sub(w.queries)
	if after := w.env.walSnapshot(context.Background()); after.ok && w.wal.ok {
		res.WAL = &walStats{Records: after.Records - w.wal.Records, FPI: after.FPI - w.wal.FPI, MB: round3(after.MB - w.wal.MB)}
	}
	w.env.logStatements(w.name, res.queries)
	res.LoadAvg = loadAvg()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.GoHeapMB, res.GoStackMB, res.GoSysMB = mb(ms.HeapInuse), mb(ms.StackInuse), mb(ms.Sys)
	res.Goroutines = runtime.NumGoroutine()
	if w.env.cfg.ProfileDir != "" {
		var heap bytes.Buffer
		if err := pprof.Lookup("heap").WriteTo(&heap, 0); err == nil {
			w.env.saveFile(w.name+".heap.pprof", heap.Bytes())
		}
	}
	switch {
	case w.env.serverPID > 0:
		if st, err := readProcStat(w.env.serverPID); err == nil {
			res.ServerCPU = round3(st.cpu - w.remote.cpu)
			res.PeakRSSMB = st.hwmMB
			res.CPUAttribution = fmt.Sprintf("/proc/%d of the --server-pid process", w.env.serverPID)
		}
	case w.env.srv != nil:
		res.PeakRSSMB = peakRSSMB(os.Getpid())
		res.CPUAttribution = "process (jobapi and load generator share it); server_cpu_s unavailable: CPU profiling is busy"
		if w.profiled {
			pprof.StopCPUProfile()
			w.env.saveProfile(w.name, w.profile.Bytes())
			if by, err := cpuByLabel(w.profile.Bytes(), labelKey); err == nil {
				res.ServerCPU = round3(by["server"])
				res.LoadGenCPU = round3(by["loadgen"] + by["bench"])
				res.RuntimeCPU = round3(by[""])
				res.CPUAttribution = "CPU profile samples of the jobapi goroutines (pprof label); runtime_cpu_s is unlabelled GC and scheduler work of the shared process"
			}
		}
	default:
		res.CPUAttribution = "remote jobapi: pass --server-pid to measure its CPU and RSS"
	}
	return res
}

func mb(b uint64) float64 { return round3(float64(b) / (1 << 20)) }

func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func cpuSeconds(ru syscall.Rusage) float64 {
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// resetPeakRSS makes VmHWM restart from the current RSS (Linux clear_refs "5").
func resetPeakRSS(pid int) {
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

func peakRSSMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return statusKB(string(b), "VmHWM:") / 1024
}

func statusKB(status, field string) float64 {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, _ := strconv.ParseFloat(f[0], 64)
				return round3(v)
			}
		}
	}
	return 0
}

type procStat struct {
	cpu   float64 // utime + stime, seconds
	hwmMB float64
}

// clockTicks is USER_HZ, 100 on every Linux platform Go supports.
const clockTicks = 100

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name may hold spaces: fields start after its closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, errors.New("unreadable /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return procStat{}, errors.New("short /proc stat")
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return procStat{cpu: (utime + stime) / clockTicks, hwmMB: round3(peakRSSMB(pid))}, nil
}

func (e *env) saveProfile(name string, data []byte) {
	if path := e.saveFile(name+".cpu.pprof", data); path != "" {
		e.logf("%s: CPU profile in %s (jobapi only: go tool pprof -tagfocus=%s=server %s)", name, path, labelKey, path)
	}
}

// saveFile writes a file into --profile-dir and returns its path ("" when not written).
func (e *env) saveFile(name string, data []byte) string {
	if e.cfg.ProfileDir == "" || len(data) == 0 {
		return ""
	}
	if err := os.MkdirAll(e.cfg.ProfileDir, 0o755); err != nil {
		e.logf("profile: %v", err)
		return ""
	}
	path := filepath.Join(e.cfg.ProfileDir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		e.logf("profile: %v", err)
		return ""
	}
	return path
}

// cpuByLabel sums a CPU profile's samples (seconds) by the value of one pprof label; samples
// without it are under "". It reads the profile.proto wire format directly.
func cpuByLabel(gz []byte, key string) (map[string]float64, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	var (
		samples     []profSample
		strs        []string
		sampleTypes []int64 // type string index of each value
	)
	b := raw
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		switch num {
		case 1: // sample_type: ValueType{type = 1, unit = 2}
			fields, err := varintFields(v)
			if err != nil {
				return nil, err
			}
			sampleTypes = append(sampleTypes, first(fields[1]))
		case 2: // sample
			s, err := parseSample(v)
			if err != nil {
				return nil, err
			}
			samples = append(samples, s)
		case 6: // string_table
			strs = append(strs, string(v))
		}
	}
	str := func(i int64) string {
		if i >= 0 && int(i) < len(strs) {
			return strs[i]
		}
		return ""
	}
	cpu := -1
	for i, t := range sampleTypes {
		if str(t) == "cpu" {
			cpu = i
		}
	}
	if cpu < 0 {
		return nil, errors.New("profile has no cpu sample type")
	}
	out := map[string]float64{}
	for _, s := range samples {
		if cpu >= len(s.values) {
			continue
		}
		role := ""
		for _, l := range s.labels {
			if str(l[0]) == key {
				role = str(l[1])
			}
		}
		out[role] += float64(s.values[cpu]) / 1e9
	}
	return out, nil
}

func first(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// varintFields reads a message whose fields are all varints (or packed varints).
func varintFields(b []byte) (map[protowire.Number][]int64, error) {
	out := map[protowire.Number][]int64{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			b = b[n:]
			out[num] = append(out[num], int64(v))
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			b = b[n:]
			for len(v) > 0 {
				x, m := protowire.ConsumeVarint(v)
				if m < 0 {
					return nil, protowire.ParseError(m)
				}
				v = v[m:]
				out[num] = append(out[num], int64(x))
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return out, nil
}

type profSample struct {
	values []int64
	labels [][2]int64 // key, str: string table indexes
}

// parseSample reads Sample{location_id = 1, value = 2, label = 3 (Label{key = 1, str = 2})}.
func parseSample(b []byte) (s profSample, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return s, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return s, protowire.ParseError(n)
			}
			b = b[n:]
			s.values = append(s.values, int64(v))
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return s, protowire.ParseError(n)
			}
			b = b[n:]
			for len(v) > 0 {
				x, m := protowire.ConsumeVarint(v)
				if m < 0 {
					return s, protowire.ParseError(m)
				}
				v = v[m:]
				s.values = append(s.values, int64(x))
			}
		case num == 3 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return s, protowire.ParseError(n)
			}
			b = b[n:]
			f, err := varintFields(v)
			if err != nil {
				return s, err
			}
			s.labels = append(s.labels, [2]int64{first(f[1]), first(f[2])})
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return s, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return s, nil
}

var (
	_ pgx.QueryTracer = (*queryCounter)(nil)
	_ pgx.BatchTracer = (*queryCounter)(nil)
	_ pgx.BatchTracer = (*stmtCounter)(nil)
)
