package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Result is one scenario's outcome: one JSON line, and rows of the table.
type Result struct {
	Scenario   string  `json:"scenario"`
	Throughput float64 `json:"throughput"`
	Unit       string  `json:"unit"`
	Count      int     `json:"count"`
	// Endpoints are the latencies the runners saw, by call.
	Endpoints map[string]Latency `json:"endpoints"`
	// QueriesPerRequest: Postgres statements (BEGIN and COMMIT included) run on behalf of each
	// request, by route, from the counting tracer on jobapi's pool.
	QueriesPerRequest map[string]float64 `json:"pg_queries_per_request,omitempty"`
	// BackgroundQueries: statements of the sweeper, reapers and flag refreshes meanwhile.
	BackgroundQueries int64 `json:"pg_queries_background"`
	Resources
	// RatioToBaseline: throughput ÷ baseline single-row UPDATEs per second.
	RatioToBaseline float64        `json:"ratio_to_baseline,omitempty"`
	Targets         []Target       `json:"targets,omitempty"`
	Params          map[string]any `json:"params,omitempty"`
	Extra           map[string]any `json:"extra,omitempty"`
	Errors          int            `json:"errors"`

	order  []string       // table rows, when not the default order
	unit   *unitCost      // CPU per unit of work (costPer), medians under --repeat
	pickup *pickupSummary // the pickup scenario's modes
}

// unitCost is a scenario's CPU per unit of work in microseconds: the whole machine's busy
// time and the tested processes' (tested.go).
type unitCost struct {
	Unit    string
	Machine float64
	Tested  float64
}

// Target is one of a scenario's performance targets (docs/performance.md), checked.
type Target struct {
	Name string  `json:"name"`
	Want string  `json:"want"`
	Got  float64 `json:"got"`
	Unit string  `json:"unit,omitempty"`
	Met  bool    `json:"met"`
}

func writeJSONLines(w io.Writer, results []*Result) error {
	enc := json.NewEncoder(w)
	for _, r := range results {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

func fmtF(f float64) string {
	switch {
	case f == 0:
		return "0"
	case f >= 100:
		return fmt.Sprintf("%.0f", f)
	case f >= 10:
		return fmt.Sprintf("%.1f", f)
	default:
		return fmt.Sprintf("%.2f", f)
	}
}

func writeTable(w io.Writer, results []*Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tthroughput\tendpoint\tn\terr\tp50 ms\tp95 ms\tp99 ms\tpg q/req\tsrv CPU s\tpeak RSS MB\tvs baseline\t")
	for _, r := range results {
		names := r.order
		if len(names) == 0 {
			for k := range r.Endpoints {
				names = append(names, k)
			}
			slices.SortFunc(names, func(a, b string) int {
				if d := endpointOrder(a) - endpointOrder(b); d != 0 {
					return d
				}
				return strings.Compare(a, b)
			})
		}
		for i, name := range names {
			l := r.Endpoints[name]
			scen, thr, cpu, rss, ratio := "", "", "", "", ""
			if i == 0 {
				scen = r.Scenario
				thr = fmtF(r.Throughput) + " " + r.Unit
				cpu = fmtF(r.ServerCPU)
				rss = fmtF(r.PeakRSSMB)
				if r.RatioToBaseline > 0 {
					ratio = fmt.Sprintf("%.3f", r.RatioToBaseline)
				}
			}
			q := "-"
			if v, ok := r.QueriesPerRequest[name]; ok {
				q = fmtF(v)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", scen, thr, name, l.N, l.Errors,
				fmtF(l.P50), fmtF(l.P95), fmtF(l.P99), q, cpu, rss, ratio)
		}
	}
	_ = tw.Flush()

	var targets []string
	for _, r := range results {
		for _, t := range r.Targets {
			met := "MISSED"
			if t.Met {
				met = "met"
			}
			targets = append(targets, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t", r.Scenario, t.Name, t.Want, fmtF(t.Got)+" "+t.Unit, met))
		}
	}
	if len(targets) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "scenario\ttarget\twant\tgot\t\t")
		fmt.Fprintln(tw, strings.Join(targets, "\n"))
		_ = tw.Flush()
	}
}

// endpointOrder keeps a scenario's rows in the order a job goes through.
func endpointOrder(name string) int {
	order := []string{"pg_update", "update", "http", "redis_set", "redis_get", "request", "ack", "trace", "finish", "request_204",
		"cycle_store_only", "ack_store_only",
		"poll_first", "poll", "sweep_expired", "sweep_empty"}
	if i := slices.Index(order, name); i >= 0 {
		return i
	}
	return len(order)
}
