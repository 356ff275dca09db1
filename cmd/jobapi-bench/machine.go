package main

import (
	"os"
	"strconv"
	"strings"
)

// machineCPU is where the whole machine's CPU went during a window, from /proc: this
// process, the redis-server processes, and the rest, which on a machine running the bench
// against its local Postgres is Postgres (its backends, WAL writer, checkpointer) plus
// the kernel's network work. The targets are ratios on one shared machine, so a unit of
// work costs what all of them spent on it, not only jobapi's share. (Postgres is not
// counted by process: a backend that exits inside the window, as the baseline's do,
// takes its CPU time with it.)
type machineCPU struct {
	Busy  float64 `json:"busy_s"`
	Idle  float64 `json:"idle_s"`
	Redis float64 `json:"redis_s"`
	Bench float64 `json:"bench_process_s"`
	Rest  float64 `json:"database_and_rest_s"`
}

type machineSnapshot struct {
	busy, idle, redis float64
	ok                bool
}

// snapshotMachine reads /proc/stat's cpu line and the CPU time of the redis-server
// processes (long-lived, so their deltas are exact).
func snapshotMachine() machineSnapshot {
	var s machineSnapshot
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return s
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		if i == 3 || i == 4 { // idle, iowait
			s.idle += n / clockTicks
		} else if i < 8 { // user nice system irq softirq steal; not guest (counted in user)
			s.busy += n / clockTicks
		}
	}
	s.redis = redisCPU()
	s.ok = true
	return s
}

// machineSince is the machine's CPU between a snapshot and now; bench is this process's.
func machineSince(before machineSnapshot, bench float64) *machineCPU {
	after := snapshotMachine()
	if !before.ok || !after.ok {
		return nil
	}
	m := &machineCPU{
		Busy: round3(after.busy - before.busy), Idle: round3(after.idle - before.idle),
		Redis: round3(after.redis - before.redis), Bench: round3(bench),
	}
	m.Rest = round3(max(m.Busy-m.Redis-m.Bench, 0))
	return m
}

// perUnit spreads a window's machine CPU over count units of work, in microseconds, with
// the bench process split into jobapi, load generator and Go runtime when profiled.
func (m *machineCPU) perUnit(res Resources, count int) map[string]float64 {
	if m == nil || count <= 0 {
		return nil
	}
	us := func(s float64) float64 { return round3(s / float64(count) * 1e6) }
	out := map[string]float64{"database_and_rest": us(m.Rest), "redis": us(m.Redis),
		"idle": us(m.Idle), "total_busy": us(m.Busy)}
	if res.ServerCPU > 0 {
		out["jobapi"] = us(res.ServerCPU)
		out["load_generator"] = us(res.LoadGenCPU)
		out["go_runtime_shared"] = us(res.RuntimeCPU)
	} else {
		out["bench_process"] = us(m.Bench)
	}
	return out
}
