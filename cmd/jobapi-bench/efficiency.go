package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// efficiencyRow is one of the efficiency targets as this run measured it: a CPU target is the
// unit's CPU ÷ the same run's floor (scenario_floor.go), of the whole machine (what the targets
// are stated in) and of the tested processes (tested.go: steadier on a shared machine); the
// others are the idle poll's and the pickup's latency and cost at 10,000 runners.
type efficiencyRow struct {
	Target string `json:"target"`
	Want   string `json:"want"`
	// Machine and Tested: the ratio to the floor, or for a latency, count or share target
	// the value itself (Tested then unused).
	Machine float64 `json:"machine"`
	Tested  float64 `json:"tested,omitempty"`
	Unit    string  `json:"unit,omitempty"`
	Met     bool    `json:"met"`
	Rate    string  `json:"rate"`
}

// efficiency collects the table from the run's results (nil when the run measured none of it).
func (e *env) efficiency(results []*Result) *Result {
	by := map[string]*Result{}
	for _, r := range results {
		by[r.Scenario] = r
	}
	var rows []efficiencyRow
	f := e.floorCost
	ratioRow := func(name, scenario string, want float64, machineFloor, testedFloor float64) {
		r := by[scenario]
		if r == nil || r.unit == nil || f == nil || machineFloor <= 0 {
			return
		}
		row := efficiencyRow{Target: name, Want: fmt.Sprintf("≤ %g × floor", want), Unit: "× floor",
			Machine: round3(r.unit.Machine / machineFloor), Rate: fmtF(r.Throughput) + " " + r.Unit}
		if testedFloor > 0 {
			row.Tested = round3(r.unit.Tested / testedFloor)
		}
		row.Met = row.Machine > 0 && row.Machine <= want
		rows = append(rows, row)
	}
	if f != nil {
		ratioRow("full job (request → ack → trace → success)", "cycle", 2.0, f.JobMachineUS, f.JobTestedUS)
		ratioRow("ack", "ack", 1.5, f.AckMachineUS, f.AckTestedUS)
		ratioRow("idle poll CPU ÷ http floor", "idle", 3.0, f.HTTPMachineUS, f.HTTPTestedUS)
	}
	if r := by["idle"]; r != nil {
		runners, _ := r.Params["runners"].(int)
		interval, _ := r.Params["interval_s"].(float64)
		p := r.Endpoints["poll"]
		rate := fmtF(r.Throughput) + " " + r.Unit
		rows = append(rows, efficiencyRow{Target: fmt.Sprintf("idle poll p99, %d runners every %gs", runners, interval),
			Want: "< 20 ms (10,000 runners every 3s)", Machine: p.P99, Unit: "ms", Met: p.N > 0 && p.P99 < 20 && runners >= 10_000, Rate: rate})
		if q, ok := r.QueriesPerRequest["poll"]; ok {
			rows = append(rows, efficiencyRow{Target: "Postgres queries per idle poll", Want: "0", Machine: q,
				Met: p.N > 0 && q == 0, Rate: rate})
		}
	}
	if r := by["pickup"]; r != nil && r.pickup != nil {
		for _, m := range r.pickup.Modes {
			if m.Mode != "long_poll" {
				continue
			}
			rate := fmt.Sprintf("%d jobs, %s requests/job", m.Jobs, fmtF(m.RequestsPerJob))
			rows = append(rows, efficiencyRow{Target: fmt.Sprintf("pickup p99 (pending → 201), long poll, %d runners", m.Runners),
				Want: "< 50 ms (10,000 runners)", Machine: m.Latency.P99, Unit: "ms",
				Met: m.Latency.N > 0 && m.Latency.P99 < 50 && m.Runners >= 10_000, Rate: rate})
			rows = append(rows, efficiencyRow{Target: fmt.Sprintf("idle fleet, long poll, %d runners (tested cores)", m.Runners),
				Want: "< 0.1 core (10,000 runners)", Machine: m.IdleTestedCores, Unit: "cores",
				Met: m.IdleTestedCores > 0 && m.IdleTestedCores < 0.1 && m.Runners >= 10_000, Rate: rate})
		}
	}
	if len(rows) == 0 {
		return nil
	}
	out := &Result{Scenario: "efficiency", Count: len(rows), Unit: "targets", Params: map[string]any{},
		Extra: map[string]any{"rows": rows, "loadavg_1m": loadAvg()}}
	if f != nil {
		out.Extra["floor"] = *f
	}
	for _, row := range rows {
		out.Targets = append(out.Targets, Target{Name: row.Target, Want: row.Want, Got: row.Machine, Unit: row.Unit, Met: row.Met})
	}
	return out
}

// writeEfficiency prints the efficiency table.
func writeEfficiency(w io.Writer, r *Result) {
	rows, _ := r.Extra["rows"].([]efficiencyRow)
	fmt.Fprintln(w)
	if f, ok := r.Extra["floor"].(floorCost); ok {
		fmt.Fprintf(w, "floor (µs of CPU, machine / tested): update %s / %s (%s/s), http %s / %s (%s/s); job %s / %s, ack %s / %s\n",
			fmtF(f.UpdateMachineUS), fmtF(f.UpdateTestedUS), fmtF(f.UpdatesPerS), fmtF(f.HTTPMachineUS), fmtF(f.HTTPTestedUS),
			fmtF(f.HTTPPerS), fmtF(f.JobMachineUS), fmtF(f.JobTestedUS), fmtF(f.AckMachineUS), fmtF(f.AckTestedUS))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "efficiency target\twant\tmachine\ttested\tmet\trate\t")
	for _, row := range rows {
		met := "MISSED"
		if row.Met {
			met = "met"
		}
		tested := "-"
		if row.Tested > 0 {
			tested = fmtF(row.Tested)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%s\t%s\t\n", row.Target, row.Want, fmtF(row.Machine), row.Unit, tested, met, row.Rate)
	}
	_ = tw.Flush()
}
