package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

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
	tested   testedSnapshot
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
	// Tested is what jobapi, its Postgres backends and Redis spent meanwhile (tested.go).
	Tested  *testedCPU `json:"tested_cpu,omitempty"`
	queries queryCounts
}

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
	w.tested = e.snapshotTested(context.Background())
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
	res.Tested = w.env.testedSince(context.Background(), w.tested)
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

// rssPID is the process whose memory is jobapi's (0: unknown, a remote jobapi).
func (e *env) rssPID() int {
	switch {
	case e.serverPID > 0:
		return e.serverPID
	case e.srv != nil:
		return osGetpid()
	}
	return 0
}
