package main

import (
	"context"
	"os"
	"strconv"
	"strings"
)

// The "tested CPU" of a window is what the system under test spent, read per process from
// /proc/<pid>/stat: jobapi (this process, or --server-pid), the Postgres backends connected
// to the bench's database, and the redis-server processes. Unlike the machine's busy time
// it leaves out other work sharing the machine (other databases' backends, builds, tests),
// so it holds up better on a shared machine; it also leaves out the kernel's softirq work
// and Postgres's shared WAL writer and checkpointer, so it is a little lower than what the
// work costs on a machine of its own. A backend that ends inside the window takes its CPU
// with it: scenarios measure with their pools still open.

// testedCPU is a window's tested CPU, by part, in seconds.
type testedCPU struct {
	Total    float64 `json:"total_s"`
	Process  float64 `json:"jobapi_process_s"`
	Postgres float64 `json:"postgres_backends_s"`
	Redis    float64 `json:"redis_s"`
	// Backends is how many of the database's backends were read at the end.
	Backends int `json:"postgres_backends"`
}

type testedSnapshot struct {
	process, redis float64
	backends       map[int]float64
	ok             bool
}

// snapshotTested reads the tested processes' CPU now.
func (e *env) snapshotTested(ctx context.Context) testedSnapshot {
	s := testedSnapshot{backends: map[int]float64{}}
	pid := os.Getpid()
	if e.serverPID > 0 {
		pid = e.serverPID
	}
	st, err := readProcStat(pid)
	if err != nil {
		return s
	}
	s.process = st.cpu
	s.redis = redisCPU()
	for _, p := range e.backendPIDs(ctx) {
		if st, err := readProcStat(p); err == nil {
			s.backends[p] = st.cpu
		}
	}
	s.ok = true
	return s
}

// backendPIDs lists the Postgres backends connected to the bench's database (none when
// Postgres runs on another machine: their pids are not ours to read).
func (e *env) backendPIDs(ctx context.Context) []int {
	if e.db == nil {
		return nil
	}
	rows, err := e.db.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var p int
		if rows.Scan(&p) == nil {
			out = append(out, p)
		}
	}
	return out
}

// testedSince is the tested CPU from before to now; a backend that started inside the window
// counts all of its CPU.
func (e *env) testedSince(ctx context.Context, before testedSnapshot) *testedCPU {
	after := e.snapshotTested(ctx)
	if !before.ok || !after.ok {
		return nil
	}
	t := &testedCPU{Process: round3(after.process - before.process), Redis: round3(max(after.redis-before.redis, 0)),
		Backends: len(after.backends)}
	pg := 0.0
	for p, cpu := range after.backends {
		pg += cpu - before.backends[p]
	}
	t.Postgres = round3(pg)
	t.Total = round3(t.Process + t.Postgres + t.Redis)
	return t
}

// redisCPU is the CPU time of every redis-server process.
func redisCPU() float64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	total := 0.0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "redis-server" {
			continue
		}
		if st, err := readProcStat(pid); err == nil {
			total += st.cpu
		}
	}
	return total
}

// perUnit is the tested CPU of one of n units, in microseconds.
func (t *testedCPU) perUnit(n int) float64 {
	if t == nil || n <= 0 {
		return 0
	}
	return round3(t.Total / float64(n) * 1e6)
}
