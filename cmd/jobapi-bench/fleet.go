package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/jobapi/jobapi/runnerclient"
)

// The idle fleet (a thousand runners, each with its own connection) can run in a child
// process of the bench, so that the bench process holds jobapi and little else: its peak RSS
// is then jobapi's own, which the memory target is about, rather than jobapi's plus a
// thousand runner clients'.

// fleetEnv, set to 1, makes the bench binary (or its test binary) play a fleet: a fleetSpec
// on stdin, "warm" on stdout after the warm-up, "go" awaited on stdin, a fleetResult on
// stdout at the end.
const fleetEnv = "JOBAPI_BENCH_FLEET"

type fleetSpec struct {
	BaseURL  string        `json:"base_url"`
	Runners  []fleetRunner `json:"runners"`
	Interval time.Duration `json:"interval"`
	Duration time.Duration `json:"duration"`
	// Pickup plays the pickup scenario's fleet instead (pickup_fleet.go); LongPoll says the
	// replica holds requests.
	Pickup   bool `json:"pickup,omitempty"`
	LongPoll bool `json:"long_poll,omitempty"`
}

type fleetRunner struct {
	Token    string `json:"token"`
	SystemID string `json:"system_id"`
	ID       int64  `json:"-"`
}

type fleetResult struct {
	Samples map[string][]time.Duration `json:"samples"`
	Errors  map[string]int             `json:"errors"`
	LastErr map[string]string          `json:"last_errors"`
}

// pollFleet runs an idle fleet: a warm-up in which every runner starts, spread over one
// interval, and polls once (no last_update yet: it asks Postgres); then between(); then the
// measured phase, each runner polling every interval and echoing last_update.
func pollFleet(ctx context.Context, clients []*runnerclient.Client, interval, duration time.Duration, rec *recorder, between func()) {
	phase := func(i int) time.Duration { return interval * time.Duration(i) / time.Duration(len(clients)) }
	poll := func(ctx context.Context, c *runnerclient.Client, endpoint string) {
		t := time.Now()
		job, res, err := c.RequestJob(withEndpoint(ctx, endpoint))
		d := time.Since(t)
		switch {
		case err != nil:
			rec.fail(endpoint, err)
		case job != nil:
			rec.fail(endpoint, fmt.Errorf("an idle runner got job %d", job.ID))
		case res.Code != http.StatusNoContent:
			rec.fail(endpoint, fmt.Errorf("HTTP %d", res.Code))
		default:
			rec.add(endpoint, d)
		}
	}
	loadgen(ctx, len(clients), func(ctx context.Context, i int) {
		sleepCtx(ctx, phase(i))
		poll(ctx, clients[i], "poll_first")
	})
	between()
	start := time.Now()
	loadgen(ctx, len(clients), func(ctx context.Context, i int) {
		next := start.Add(phase(i))
		end := start.Add(duration)
		for ctx.Err() == nil && next.Before(end) {
			sleepCtx(ctx, time.Until(next))
			poll(ctx, clients[i], "poll")
			next = next.Add(interval)
		}
	})
}

// fleetMain is the child's side.
func fleetMain(stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewReader(stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return err
	}
	var spec fleetSpec
	if err := json.Unmarshal(line, &spec); err != nil {
		return err
	}
	if spec.Pickup {
		return pickupFleetMain(spec, in, stdout)
	}
	clients := make([]*runnerclient.Client, len(spec.Runners))
	for i, r := range spec.Runners {
		clients[i] = runnerclient.New(spec.BaseURL, r.Token, r.SystemID)
	}
	rec := newRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), 10*spec.Interval+2*spec.Duration+time.Minute)
	defer cancel()
	pollFleet(ctx, clients, spec.Interval, spec.Duration, rec, func() {
		fmt.Fprintln(stdout, "warm")
		_, _ = in.ReadString('\n') // "go"
	})
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return json.NewEncoder(stdout).Encode(fleetResult{Samples: rec.samples, Errors: rec.errors, LastErr: rec.lastErr})
}

// fleetUsage is what the child process cost, from its rusage.
type fleetUsage struct {
	CPU    float64 `json:"cpu_s"`
	PeakMB float64 `json:"peak_rss_mb"`
}

// fleetProcess is the bench binary playing a fleet in a child process (fleetEnv): its
// stdin takes the fleetSpec and then commands a line each, its stdout answers.
type fleetProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startFleetProcess starts the child, its stderr going to the bench's log.
func (e *env) startFleetProcess(ctx context.Context) (*fleetProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), fleetEnv+"=1")
	cmd.Stderr = e.log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &fleetProcess{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdoutPipe)}, nil
}

// send writes one command line.
func (f *fleetProcess) send(line string) error {
	_, err := io.WriteString(f.stdin, line+"\n")
	return err
}

// runFleetProcess plays the fleet in a child process; between runs in this process after
// the child's warm-up, before its measured phase.
func (e *env) runFleetProcess(ctx context.Context, rs []*runner, rec *recorder, between func()) (fleetUsage, error) {
	spec := fleetSpec{BaseURL: e.baseURL, Interval: e.cfg.IdleInterval, Duration: e.cfg.IdleDuration}
	for _, r := range rs {
		spec.Runners = append(spec.Runners, fleetRunner{Token: r.Token, SystemID: r.SystemID})
	}
	fp, err := e.startFleetProcess(ctx)
	if err != nil {
		return fleetUsage{}, err
	}
	cmd, stdin, out := fp.cmd, fp.stdin, fp.out
	res, runErr := func() (fleetResult, error) {
		if err := json.NewEncoder(stdin).Encode(spec); err != nil {
			return fleetResult{}, err
		}
		if line, err := out.ReadString('\n'); err != nil || line != "warm\n" {
			return fleetResult{}, fmt.Errorf("fleet process: want warm, got %q: %v", line, err)
		}
		between()
		if err := fp.send("go"); err != nil {
			return fleetResult{}, err
		}
		var res fleetResult
		err := json.NewDecoder(out).Decode(&res)
		return res, err
	}()
	_ = stdin.Close()
	waitErr := cmd.Wait()
	if err := errors.Join(runErr, waitErr); err != nil {
		return fleetUsage{}, fmt.Errorf("fleet process: %w", err)
	}
	rec.mu.Lock()
	for k, v := range res.Samples {
		rec.samples[k] = append(rec.samples[k], v...)
	}
	for k, v := range res.Errors {
		rec.errors[k] += v
		rec.lastErr[k] = res.LastErr[k]
	}
	rec.mu.Unlock()
	var u fleetUsage
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		u = fleetUsage{CPU: round3(cpuSeconds(*ru)), PeakMB: round3(float64(ru.Maxrss) / 1024)}
	}
	return u, nil
}
