package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jobapi/jobapi/server"
)

// pickup: how soon a waiting runner gets a new job, and what an idle fleet costs: a fleet of --pickup-runners runners, played by a child process so that
// its CPU is not jobapi's, first polling one replica every --pickup-interval, then
// long-polling (JOBAPI_LONG_POLL=--pickup-long-poll) a second replica, so that a wake-up
// crosses Redis: the jobs are created through the first. Each mode has an idle phase (no
// jobs: what the fleet costs, in tested cores) and a job phase (one single-job pipeline
// every --pickup-every: the time from creating it to the 201 that hands it out, and the
// job requests sent per job).

// pickupSummary is the scenario's result, one entry per mode.
type pickupSummary struct {
	Modes []pickupMode `json:"modes"`
}

type pickupMode struct {
	Mode     string  `json:"mode"` // poll or long_poll
	Runners  int     `json:"runners"`
	Interval float64 `json:"interval_s"`
	Jobs     int     `json:"jobs"`
	// Latency is pending → 201: from just before the create call (the job is pending when
	// it returns) to the runner's receipt of the job.
	Latency       Latency `json:"pickup_latency"`
	CreateLatency Latency `json:"create_latency"`
	// RequestsPerJob: job requests the fleet sent in the job phase ÷ jobs.
	RequestsPerJob float64 `json:"requests_per_job"`
	// The idle phase: tested and machine cores, job requests per second, and Postgres
	// statements on behalf of requests (the idle fleet's should be none).
	IdleTestedCores  float64    `json:"idle_tested_cores"`
	IdleMachineCores float64    `json:"idle_machine_cores"`
	IdleRequestsPerS float64    `json:"idle_requests_per_s"`
	IdlePGQueries    int64      `json:"idle_pg_queries"`
	IdleTested       *testedCPU `json:"idle_tested"`
	JobPhaseTested   *testedCPU `json:"job_phase_tested"`
	JobPhaseCores    float64    `json:"job_phase_tested_cores"`
	// JobPhasePGQueries: Postgres statements on behalf of requests in the job phase ÷ jobs.
	JobPhasePGQueries float64 `json:"job_phase_pg_queries_per_job"`
	WarmupS           float64 `json:"warmup_s"`
	FleetCPU          float64 `json:"fleet_process_cpu_s"`
	PollLatency       Latency `json:"poll_204_latency"`
	// Answers counts the fleet's answers by class: 201, 204, "503+Retry-After" (what
	// gitlab-runner retries after the delay), any other status, transport.
	Answers map[string]int `json:"answers,omitempty"`
	// The overload mode's (scenario_overload.go).
	Overload *overloadStats `json:"overload,omitempty"`
}

const pickupYAML = "pickup:\n  script: [echo pickup]\n"

func (e *env) pickup(ctx context.Context, rs []*runner) (*Result, error) {
	cfg := e.cfg
	if e.srv == nil {
		return nil, errors.New("pickup needs the in-process jobapi (it starts a second replica)")
	}
	rec := newRecorder()
	sum := &pickupSummary{}
	var firstErr error
	for _, mode := range cfg.PickupModes {
		if ctx.Err() != nil {
			break
		}
		m, err := e.pickupMode(ctx, rs, mode, rec)
		if err != nil {
			firstErr = errors.Join(firstErr, fmt.Errorf("%s: %w", mode, err))
			continue
		}
		sum.Modes = append(sum.Modes, m)
		e.logf("  %s: %d runners, pickup p50 %s p99 %s max %s ms, %s requests/job, %s Postgres statements/job, idle fleet %s tested cores",
			mode, m.Runners, fmtF(m.Latency.P50), fmtF(m.Latency.P99), fmtF(m.Latency.Max), fmtF(m.RequestsPerJob),
			fmtF(m.JobPhasePGQueries), fmtF(m.IdleTestedCores))
	}
	r := e.result("pickup", Resources{LoadAvg: loadAvg()}, rec)
	r.pickup = sum
	r.Unit = "jobs/s"
	for _, m := range sum.Modes {
		r.Count += m.Jobs
	}
	r.Throughput = round3(1 / cfg.PickupEvery.Seconds())
	r.Params = map[string]any{"runners": len(rs), "interval_s": cfg.PickupInterval.Seconds(), "long_poll_s": cfg.PickupLongPoll.Seconds(),
		"jobs": cfg.PickupJobs, "every_s": cfg.PickupEvery.Seconds(), "idle_s": cfg.PickupIdle.Seconds()}
	r.Extra["modes"] = sum.Modes
	return r, firstErr
}

func (e *env) pickupMode(ctx context.Context, rs []*runner, mode string, rec *recorder) (pickupMode, error) {
	cfg := e.cfg
	m := pickupMode{Mode: mode, Runners: len(rs), Interval: cfg.PickupInterval.Seconds()}
	if err := e.truncate(ctx); err != nil {
		return m, err
	}
	url := e.baseURL
	var ov *overloadRig
	if mode == "overload" {
		var err error
		if ov, err = e.newOverloadRig(); err != nil {
			return m, err
		}
		defer ov.close()
	}
	if mode == "long_poll" || mode == "overload" {
		srv, err := e.startReplica(func(c *server.Config) {
			c.LongPoll = cfg.PickupLongPoll
			if ov != nil {
				ov.configure(c)
			}
		}, ov.logger())
		if err != nil {
			return m, err
		}
		if ov != nil {
			ov.replicaURL = srv.URL
		}
		defer func() {
			if err := srv.Close(); err != nil {
				e.logf("second jobapi stopped: %v", err)
			}
		}()
		url = srv.URL
	}
	spec := fleetSpec{BaseURL: url, Interval: cfg.PickupInterval, Pickup: true, LongPoll: mode != "poll"}
	for _, r := range rs {
		spec.Runners = append(spec.Runners, fleetRunner{Token: r.Token, SystemID: r.SystemID})
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.ScenarioTimeout)
	defer cancel()
	fp, err := e.startFleetProcess(sctx)
	if err != nil {
		return m, err
	}
	cmd, stdin, out, send := fp.cmd, fp.stdin, fp.out, fp.send
	count := func() (int64, error) {
		if err := send("count"); err != nil {
			return 0, err
		}
		line, err := out.ReadString('\n')
		var n int64
		if err == nil {
			_, err = fmt.Sscanf(line, "count %d\n", &n)
		}
		return n, err
	}
	created := map[int64]time.Time{} // pipeline id → when its create call started
	createRec := newRecorder()
	res, runErr := func() (pickupFleetResult, error) {
		var res pickupFleetResult
		warmStart := time.Now()
		if err := json.NewEncoder(stdin).Encode(spec); err != nil {
			return res, err
		}
		if line, err := out.ReadString('\n'); err != nil || line != "warm\n" {
			return res, fmt.Errorf("fleet process: want warm, got %q: %v", line, err)
		}
		m.WarmupS = round3(time.Since(warmStart).Seconds())
		if err := send("go"); err != nil {
			return res, err
		}
		if ov != nil {
			// Redis slowed and the CPU saturated from here on, the fleet warm.
			if err := ov.start(); err != nil {
				return res, err
			}
			defer ov.stop()
		}
		// Let the fleet settle into its rhythm (in long poll, every runner held) first.
		sleepCtx(sctx, cfg.PickupInterval+200*time.Millisecond)

		// The idle phase.
		n0, err := count()
		if err != nil {
			return res, err
		}
		q0 := e.queries.snapshot()
		machine, tested := snapshotMachine(), e.snapshotTested(sctx)
		start := time.Now()
		sleepCtx(sctx, cfg.PickupIdle)
		wall := time.Since(start).Seconds()
		if mc := machineSince(machine, 0); mc != nil {
			m.IdleMachineCores = round3(mc.Busy / wall)
		}
		if t := e.testedSince(sctx, tested); t != nil {
			m.IdleTested, m.IdleTestedCores = t, round3(t.Total/wall)
		}
		m.IdlePGQueries = e.queries.snapshot().sub(q0).requestQueries()
		n1, err := count()
		if err != nil {
			return res, err
		}
		m.IdleRequestsPerS = round3(float64(n1-n0) / wall)

		// The job phase.
		q1 := e.queries.snapshot()
		tested = e.snapshotTested(sctx)
		start = time.Now()
		for k := range cfg.PickupJobs {
			sleepCtx(sctx, time.Until(start.Add(time.Duration(k)*cfg.PickupEvery)))
			t := time.Now()
			id, err := e.createFromYAML(sctx, []byte(pickupYAML))
			if err != nil {
				createRec.fail("create", err)
				continue
			}
			createRec.add("create", time.Since(t))
			created[id] = t
		}
		// Until every job is taken, or long enough that one that is not never will be.
		deadline := time.Now().Add(2*cfg.PickupInterval + 10*time.Second)
		if ov != nil {
			deadline = time.Now().Add(cfg.PickupLongPoll + 30*time.Second)
		}
		for time.Now().Before(deadline) && sctx.Err() == nil {
			var pending int
			if err := e.db.QueryRow(sctx, `SELECT count(*) FROM builds WHERE status = 'pending'`).Scan(&pending); err != nil {
				return res, err
			}
			if pending == 0 {
				break
			}
			sleepCtx(sctx, 50*time.Millisecond)
		}
		if ov != nil {
			// A claimed build reaches its runner only after the claim's Redis calls (ack key,
			// live log), each up to its timeout with Redis slow: give the last 201s time to
			// arrive before the fleet stops.
			sleepCtx(sctx, 3*time.Second)
		}
		wall = time.Since(start).Seconds()
		if t := e.testedSince(sctx, tested); t != nil {
			m.JobPhaseTested, m.JobPhaseCores = t, round3(t.Total/wall)
		}
		jq := e.queries.snapshot().sub(q1).requestQueries()
		n2, err := count()
		if err != nil {
			return res, err
		}
		if len(created) > 0 {
			m.RequestsPerJob = round3(float64(n2-n1) / float64(len(created)))
			m.JobPhasePGQueries = round3(float64(jq) / float64(len(created)))
		}
		if ov != nil {
			ov.stop()
			m.Overload = ov.stats(n2-n0, m.IdlePGQueries+jq)
		}
		if err := send("stop"); err != nil {
			return res, err
		}
		err = json.NewDecoder(out).Decode(&res)
		return res, err
	}()
	_ = stdin.Close()
	waitErr := cmd.Wait()
	if err := errors.Join(runErr, waitErr); err != nil {
		return m, fmt.Errorf("fleet process: %w", err)
	}
	if ru := cmd.ProcessState; ru != nil {
		m.FleetCPU = round3((ru.UserTime() + ru.SystemTime()).Seconds())
	}
	m.CreateLatency = createRec.summary()["create"]
	m.Answers = res.Answers
	var polls []time.Duration
	for _, d := range res.Polls {
		polls = append(polls, time.Duration(d))
	}
	m.PollLatency = summarize(polls)

	// Which pipeline each picked build is in, and so when it was created.
	pipelineOf := map[int64]int64{}
	rows, err := e.db.Query(ctx, `SELECT id, pipeline_id FROM builds`)
	if err != nil {
		return m, err
	}
	for rows.Next() {
		var b, p int64
		if err := rows.Scan(&b, &p); err != nil {
			rows.Close()
			return m, err
		}
		pipelineOf[b] = p
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return m, err
	}
	seen := map[int64]bool{}
	var lat []time.Duration
	var problems []string
	for _, p := range res.Pickups {
		if seen[p.BuildID] {
			problems = append(problems, fmt.Sprintf("build %d handed out twice", p.BuildID))
		}
		seen[p.BuildID] = true
		t0, ok := created[pipelineOf[p.BuildID]]
		if !ok {
			problems = append(problems, fmt.Sprintf("build %d is not one of the created jobs", p.BuildID))
			continue
		}
		d := time.Unix(0, p.At).Sub(t0)
		lat = append(lat, d)
		rec.add("pickup_"+mode, d)
	}
	m.Jobs = len(lat)
	m.Latency = summarize(lat)
	if len(lat) < len(created) {
		problems = append(problems, fmt.Sprintf("%d of %d jobs never picked up", len(created)-len(lat), len(created)))
	}
	for what, n := range res.Errors {
		rec.fail("fleet_"+what, fmt.Errorf("%d failed, the last: %s", n, res.LastErr[what]))
		problems = append(problems, fmt.Sprintf("%d fleet %s calls failed (last: %s)", n, what, res.LastErr[what]))
	}
	for what, n := range createRec.errors {
		problems = append(problems, fmt.Sprintf("%d %s calls failed (last: %s)", n, what, createRec.lastErr[what]))
	}
	if len(problems) > 0 {
		return m, errors.New(strings.Join(problems, "; "))
	}
	return m, nil
}
