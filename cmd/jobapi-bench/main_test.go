package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(burnEnv) == "1" {
		burnMain()
	}
	if os.Getenv(fleetEnv) == "1" {
		// The idle scenario re-runs this binary as its fleet of runners.
		if err := fleetMain(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "fleet:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testenv.Main(m)
}

// TestSmoke runs every scenario at toy sizes, so that the tool keeps working as jobapi
// changes (the real run is `make bench`, not part of the tests).
func TestSmoke(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	rdb, prefix := testenv.Redis(t)
	ropt := rdb.Options()
	redisURL := fmt.Sprintf("redis://%s/%d", ropt.Addr, ropt.DB)
	if ropt.Password != "" {
		redisURL = fmt.Sprintf("redis://:%s@%s/%d", url.QueryEscape(ropt.Password), ropt.Addr, ropt.DB)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{
		"--database-url", dbURL, "--reuse-database",
		"--redis-url", redisURL, "--redis-prefix", prefix,
		"--flag-refresh", "200ms", "--sweep-interval", "200ms", "--db-max-conns", "5",
		"--baseline-duration", "200ms", "--baseline-conns", "2", "--adjacent-baseline", "200ms",
		"--runners", "3", "--cycle-jobs", "30", "--ack-jobs", "30", "--jobs-per-pipeline", "4", "--repeat", "2",
		"--idle-runners", "10", "--idle-interval", "200ms", "--idle-duration", "600ms", "--idle-backlog", "50",
		"--floor-duration", "200ms",
		"--pickup-runners", "6", "--pickup-interval", "200ms", "--pickup-long-poll", "2s", "--pickup-idle", "300ms",
		"--pickup-jobs", "3", "--pickup-every", "100ms", "--overload-burners", "1", "--overload-redis-latency", "600ms",
		"--sweep-waiting", "60", "--sweep-expired", "15",
		"--scale-sizes", "20,40", "--scale-history", "50", "--scale-claims", "10", "--scale-runners", "2",
		"--artifact-size", "3MB", "--yaml-jobs", "60", "--yaml-repeat", "2", "--trace-patches", "40", "--archive-jobs", "20",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}

	results := map[string]Result{}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 1<<20)
	var table []string
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			table = append(table, line)
			continue
		}
		var r Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("JSON line %q: %v", line, err)
		}
		results[r.Scenario] = r
	}
	t.Logf("table:\n%s", strings.Join(table, "\n"))
	for _, name := range allScenarios {
		r, ok := results[name]
		if !ok {
			t.Errorf("no JSON line for %s", name)
			continue
		}
		if r.Throughput <= 0 || r.Count <= 0 || r.Errors != 0 {
			t.Errorf("%s: throughput %v, count %d, errors %d", name, r.Throughput, r.Count, r.Errors)
		}
		if name != "baseline" && name != "sweep" && r.RatioToBaseline <= 0 && (name == "cycle" || name == "ack") {
			t.Errorf("%s: no ratio to baseline", name)
		}
		if !strings.Contains(strings.Join(table, "\n"), name) {
			t.Errorf("table has no row for %s", name)
		}
	}
	if c := results["cycle"]; c.QueriesPerRequest["request"] <= 0 || c.ServerCPU <= 0 && strings.Contains(c.CPUAttribution, "profile samples") {
		t.Errorf("cycle: queries per request %v, server CPU %v (%s)", c.QueriesPerRequest, c.ServerCPU, c.CPUAttribution)
	}
	for name, unit := range map[string]string{"cycle": "job", "ack": "ack"} {
		r := results[name]
		if ratios, _ := r.Extra["repeat_ratios"].([]any); len(ratios) != 2 {
			t.Errorf("%s: repeat_ratios %v, want one ratio per run of --repeat 2", name, r.Extra["repeat_ratios"])
		}
		per, _ := r.Extra["machine_cpu_us_per_"+unit].(map[string]any)
		if busy, _ := per["total_busy"].(float64); busy <= 0 {
			t.Errorf("%s: machine_cpu_us_per_%s %v, want the machine's CPU per %s", name, unit, per, unit)
		}
	}
	if a := results["artifacts"]; a.Count != 2 || a.Extra["download_mb_per_s"] == nil || len(a.Targets) != 2 {
		t.Errorf("artifacts: count %d, extra %v, targets %v; want an upload and a download with their RSS targets", a.Count, a.Extra, a.Targets)
	}
	if y := results["yaml"]; y.Count != 2 || y.Extra["create_median_ms"] == nil || len(y.Targets) != 1 {
		t.Errorf("yaml: count %d, extra %v, targets %v; want two pipelines and the creation target", y.Count, y.Extra, y.Targets)
	}
	if f, _ := results["floor"].Extra["floor"].(map[string]any); f["job_machine_us"] == nil || f["http_per_s"].(float64) <= 0 {
		t.Errorf("floor: %v, want the update and http floors and a job's", f)
	}
	modes, _ := results["pickup"].Extra["modes"].([]any)
	if len(modes) != 2 {
		t.Errorf("pickup: modes %v, want poll and long_poll", modes)
	}
	for _, m := range modes {
		m := m.(map[string]any)
		if m["jobs"].(float64) != 3 || m["requests_per_job"].(float64) <= 0 {
			t.Errorf("pickup %s: jobs %v, requests per job %v; want all 3 jobs picked up", m["mode"], m["jobs"], m["requests_per_job"])
		}
	}
	if m, _ := results["memory"].Extra["memory"].(map[string]any); m["peak_rss_mb"].(float64) <= 0 || m["goroutines"].(float64) <= 0 {
		t.Errorf("memory: %v, want the peak RSS and the runtime's figures", m)
	}
	if i16 := results["efficiency"]; len(i16.Targets) < 6 {
		t.Errorf("efficiency: targets %v, want the ratio, idle and pickup targets", i16.Targets)
	}
	if s := results["scale"]; len(s.Endpoints) != 4 {
		t.Errorf("scale: want 2 sizes, the history point and the first size again, got %v", s.Endpoints)
	}
}
