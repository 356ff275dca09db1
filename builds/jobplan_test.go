package builds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// pj is a plan job in a test: name, stage index and status, then options.
func pj(name string, stage int, st Status, opts ...func(*PlanJob)) PlanJob {
	j := PlanJob{Name: name, StageIdx: stage, Status: st}
	for _, o := range opts {
		o(&j)
	}
	return j
}

func needs(names ...string) func(*PlanJob) {
	return func(j *PlanJob) { j.Needs, j.NeedsDeclared = names, true }
}

func when(w string) func(*PlanJob) { return func(j *PlanJob) { j.When = w } }

func allowed(j *PlanJob) { j.AllowFailure = true }

func behind(j *PlanJob) { j.LeftBehind = true }

// moved renders a plan as name→status, for comparison.
func moved(jobs []PlanJob, moves []JobMove) map[string]Status {
	out := map[string]Status{}
	for _, m := range moves {
		if _, dup := out[jobs[m.Index].Name]; dup {
			panic("a job moved twice: " + jobs[m.Index].Name)
		}
		out[jobs[m.Index].Name] = m.To
	}
	return out
}

const (
	created   = StatusCreated
	pending   = StatusPending
	running   = StatusRunning
	success   = StatusSuccess
	failed    = StatusFailed
	canceled  = StatusCanceled
	skipped   = StatusSkipped
	manual    = StatusManual
	scheduled = StatusScheduled
)

func TestPlanJobs(t *testing.T) {
	tests := []struct {
		name string
		jobs []PlanJob
		want map[string]Status
	}{
		{"a DAG job runs as soon as its need succeeded, while the stage between still runs",
			[]PlanJob{pj("compile", 0, success), pj("lint", 0, success), pj("unit", 1, running),
				pj("package", 2, created, needs("compile")), pj("deploy", 2, created)},
			map[string]Status{"package": pending}},
		{"a DAG job waits for every need",
			[]PlanJob{pj("a", 0, success), pj("b", 0, running), pj("c", 1, created, needs("a", "b"))},
			map[string]Status{}},
		{"needs: [] starts at once, whatever its stage",
			[]PlanJob{pj("compile", 0, created), pj("docs", 2, created, needs())},
			map[string]Status{"compile": pending, "docs": pending}},
		{"a need that failed with allow_failure counts as success",
			[]PlanJob{pj("a", 0, failed, allowed), pj("b", 1, created, needs("a"))},
			map[string]Status{"b": pending}},
		{"a need that failed skips the job, and what needs it, in one plan",
			[]PlanJob{pj("a", 0, failed), pj("b", 1, created, needs("a")), pj("c", 2, created, needs("b")),
				pj("d", 2, created, needs("b"), when(WhenAlways))},
			map[string]Status{"b": skipped, "c": skipped, "d": pending}},
		{"a need canceled skips on_success, always and on_failure DAG jobs; a skipped one all but always",
			[]PlanJob{pj("a", 0, canceled), pj("s", 0, skipped),
				pj("b", 1, created, needs("a")), pj("c", 1, created, needs("a"), when(WhenAlways)),
				pj("d", 1, created, needs("s"), when(WhenAlways)), pj("e", 1, created, needs("a"), when(WhenOnFailure))},
			map[string]Status{"b": skipped, "c": skipped, "d": pending, "e": skipped}},
		{"on_failure and always after a failed need run, on_success does not",
			[]PlanJob{pj("a", 0, failed), pj("ok", 1, created, needs("a")),
				pj("cleanup", 1, created, needs("a"), when(WhenOnFailure)), pj("report", 1, created, needs("a"), when(WhenAlways))},
			map[string]Status{"ok": skipped, "cleanup": pending, "report": pending}},
		{"stage order: on_failure runs after an earlier failure, its on_success siblings are skipped",
			[]PlanJob{pj("build", 0, failed), pj("lint", 0, success),
				pj("test", 1, created), pj("rollback", 1, created, when(WhenOnFailure)), pj("notify", 1, created, when(WhenAlways)),
				pj("deploy", 2, created), pj("summary", 2, created, when(WhenAlways))},
			map[string]Status{"test": skipped, "rollback": pending, "notify": pending}},
		{"stage order: a failure propagates past skipped stages",
			[]PlanJob{pj("build", 0, failed), pj("test", 1, skipped), pj("rollback", 1, success, when(WhenOnFailure)),
				pj("deploy", 2, created), pj("summary", 2, created, when(WhenAlways)), pj("fix", 2, created, when(WhenOnFailure))},
			map[string]Status{"deploy": skipped, "summary": pending, "fix": pending}},
		{"stage order: on_failure jobs are skipped when nothing failed",
			[]PlanJob{pj("build", 0, success), pj("rollback", 1, created, when(WhenOnFailure)), pj("deploy", 2, created)},
			map[string]Status{"rollback": skipped, "deploy": pending}},
		{"stage order: after only skipped jobs, on_success and always run, on_failure does not",
			[]PlanJob{pj("fix", 0, skipped, when(WhenOnFailure)), pj("a", 1, created), pj("b", 1, created, when(WhenAlways)),
				pj("c", 1, created, when(WhenOnFailure))},
			map[string]Status{"a": pending, "b": pending, "c": skipped}},
		{"a cancel stops on_success, on_failure and always stage jobs",
			[]PlanJob{pj("a", 0, canceled), pj("b", 0, success), pj("c", 1, created), pj("d", 1, created, when(WhenAlways)),
				pj("e", 1, created, when(WhenOnFailure))},
			map[string]Status{"c": skipped, "d": skipped, "e": skipped}},
		{"manual and delayed jobs are released as manual and scheduled",
			[]PlanJob{pj("build", 0, success), pj("deploy", 1, created, when(WhenManual)), pj("later", 1, created, when(WhenDelayed)),
				pj("gated", 1, created, when(WhenManual), needs("build"))},
			map[string]Status{"deploy": manual, "later": scheduled, "gated": manual}},
		{"an optional manual job does not hold later stages",
			[]PlanJob{pj("build", 0, success), pj("deploy", 0, manual, when(WhenManual), allowed), pj("verify", 1, created)},
			map[string]Status{"verify": pending}},
		{"a blocking manual job holds later stages and its DAG dependents",
			[]PlanJob{pj("build", 0, success), pj("approve", 0, manual, when(WhenManual)), pj("ship", 1, created),
				pj("ship2", 1, created, needs("approve"))},
			map[string]Status{}},
		{"a DAG job needing an optional manual job not played is skipped",
			[]PlanJob{pj("deploy", 0, manual, when(WhenManual), allowed), pj("smoke", 1, created, needs("deploy"))},
			map[string]Status{"smoke": skipped}},
		{"a scheduled job holds what follows until it runs",
			[]PlanJob{pj("later", 0, scheduled, when(WhenDelayed)), pj("after", 1, created), pj("dag", 1, created, needs("later"))},
			map[string]Status{}},
		{"after only an optional manual job: on_success runs, on_failure is skipped",
			[]PlanJob{pj("deploy", 0, manual, when(WhenManual), allowed), pj("a", 1, created), pj("b", 1, created, when(WhenOnFailure))},
			map[string]Status{"a": pending, "b": skipped}},
		{"a build left behind by the optimistic stuck strategy holds nothing",
			[]PlanJob{pj("stuck", 0, running, behind), pj("ok", 0, success), pj("next", 1, created), pj("dag", 1, created, needs("stuck"))},
			map[string]Status{"next": pending, "dag": pending}},
		{"a build left behind that then failed stops what has not run yet",
			[]PlanJob{pj("stuck", 0, failed, behind), pj("next", 1, running), pj("last", 2, created)},
			map[string]Status{}},
		{"needs within one stage, in any order of the input",
			[]PlanJob{pj("c", 1, created, needs("b")), pj("b", 1, created, needs("a")), pj("a", 0, success), pj("d", 1, created)},
			map[string]Status{"b": pending, "d": pending}},
		{"a chain of needs released together when all are needs: []",
			[]PlanJob{pj("x", 3, created, needs()), pj("y", 0, created)},
			map[string]Status{"x": pending, "y": pending}},
		{"jobs in a cycle (refused at creation) never move",
			[]PlanJob{pj("a", 0, created, needs("b")), pj("b", 0, created, needs("a")), pj("c", 0, created)},
			map[string]Status{"c": pending}},
		{"finished jobs are never moved",
			[]PlanJob{pj("a", 0, success), pj("b", 1, skipped), pj("c", 1, failed)},
			map[string]Status{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.jobs)
			got := moved(tt.jobs, PlanJobs(tt.jobs))
			if !maps.Equal(got, tt.want) {
				t.Errorf("moves %v, want %v", got, tt.want)
			}
			if !slices.EqualFunc(before, tt.jobs, func(a, b PlanJob) bool { return a.Status == b.Status }) {
				t.Error("PlanJobs changed its input")
			}
			// A second plan over the result has nothing left to do: one plan settles it.
			after := ApplyMoves(tt.jobs, PlanJobs(tt.jobs))
			if again := PlanJobs(after); len(again) != 0 {
				t.Errorf("a second plan still moves %v", moved(after, again))
			}
		})
	}
}

// TestPlanJobsAgreesWithStages: for a pipeline of on_success jobs without needs, the job
// plan and the stage plan (the hot path) make the same moves from every state a stage
// pipeline can be in, and derive the same status.
func TestPlanJobsAgreesWithStages(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	finished := []Status{success, success, success, failed, failed, canceled}
	current := append([]Status{pending, StatusWaiting, running, StatusCanceling}, finished...)
	for round := 0; round < 3000; round++ {
		stages := 1 + rng.IntN(4)
		at := rng.IntN(stages + 1) // stages before it have finished
		var jobs []PlanJob
		blocked := false
		for s := 0; s < stages; s++ {
			for k := 0; k <= rng.IntN(3); k++ {
				j := pj(fmt.Sprintf("s%dj%d", s, k), s, created)
				j.AllowFailure = rng.IntN(3) == 0
				switch {
				case blocked:
				case s < at:
					j.Status = finished[rng.IntN(len(finished))]
				case s == at:
					j.Status = current[rng.IntN(len(current))]
				}
				jobs = append(jobs, j)
			}
			if s < at {
				for _, j := range jobs {
					if j.StageIdx == s && (j.Status == failed && !j.AllowFailure || j.Status == canceled) {
						blocked = true // the stage path skips everything after it next
					}
				}
			}
		}
		tallies := func(jobs []PlanJob) []StageTally {
			var out []StageTally
			for s := 0; s < stages; s++ {
				st := StageTally{Idx: s}
				for _, j := range jobs {
					if j.StageIdx == s {
						st.Add(j.Status, j.AllowFailure, 1)
					}
				}
				out = append(out, st)
			}
			return out
		}
		plan := PlanAdvance(tallies(jobs), NoStage)
		want := map[string]Status{}
		for _, j := range jobs {
			switch {
			case j.Status != created:
			case plan.Release == j.StageIdx:
				want[j.Name] = pending
			case plan.SkipFrom != NoStage && j.StageIdx >= plan.SkipFrom:
				want[j.Name] = skipped
			}
		}
		moves := PlanJobs(jobs)
		if got := moved(jobs, moves); !maps.Equal(got, want) {
			t.Fatalf("round %d: %s\njob plan %v, stage plan %v", round, describeJobs(jobs), got, want)
		}
		after := ApplyMoves(jobs, moves)
		if a, b := PipelineStatus(TallyJobs(after)), PipelineStatus(tallies(after)); a != b {
			t.Fatalf("round %d: %s\nstatus from jobs %s, from stages %s", round, describeJobs(after), a, b)
		}
	}
}

func describeJobs(jobs []PlanJob) string {
	parts := make([]string, len(jobs))
	for i, j := range jobs {
		parts[i] = fmt.Sprintf("%s:%s", j.Name, j.Status)
		if j.AllowFailure {
			parts[i] += "(allow_failure)"
		}
	}
	return strings.Join(parts, " ")
}

func TestPipelineStatusWithManualAndScheduled(t *testing.T) {
	tests := []struct {
		name string
		jobs []PlanJob
		want string
	}{
		{"optional manual left: success", []PlanJob{pj("a", 0, success), pj("m", 0, manual, allowed)}, PipelineSuccess},
		{"optional manual and a failure: failed", []PlanJob{pj("a", 0, failed), pj("m", 0, manual, allowed)}, PipelineFailed},
		{"blocking manual: manual", []PlanJob{pj("a", 0, success), pj("m", 0, manual), pj("b", 1, created)}, PipelineManual},
		{"blocking manual first of all: manual", []PlanJob{pj("m", 0, manual), pj("b", 1, created)}, PipelineManual},
		{"blocking manual while another runs: running", []PlanJob{pj("a", 0, running), pj("m", 0, manual)}, PipelineRunning},
		{"delayed job waiting: scheduled", []PlanJob{pj("a", 0, success), pj("d", 1, scheduled), pj("b", 2, created)}, PipelineScheduled},
		{"manual wins over scheduled", []PlanJob{pj("m", 0, manual), pj("d", 0, scheduled)}, PipelineManual},
		{"delayed job come due: pending", []PlanJob{pj("d", 0, pending)}, PipelinePending},
		{"all skipped: success", []PlanJob{pj("f", 0, skipped)}, PipelineSuccess},
	}
	for _, tt := range tests {
		if got := PipelineStatus(TallyJobs(tt.jobs)); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestInitialStatuses(t *testing.T) {
	d := PipelineDefinition{ProjectID: 1, Stages: []string{"build", "test", "deploy"}, Jobs: []JobDefinition{
		{Name: "compile", Stage: "build", Script: []string{"make"}},
		{Name: "rollback", Stage: "build", Script: []string{"x"}, When: WhenOnFailure},
		{Name: "approve", Stage: "build", Script: []string{"x"}, When: WhenManual},
		{Name: "later", Stage: "build", Script: []string{"x"}, When: WhenDelayed, StartInSeconds: 60},
		{Name: "docs", Stage: "deploy", Script: []string{"x"}, NeedsDeclared: true},
		{Name: "unit", Stage: "test", Script: []string{"x"}, NeedsDeclared: true, Needs: []Need{{Job: "compile"}, {Job: "gone", Optional: true}}},
		{Name: "ship", Stage: "deploy", Script: []string{"x"}},
	}}
	if err := d.Normalize(); err != nil {
		t.Fatal(err)
	}
	if !d.PerJob() {
		t.Fatal("a pipeline with needs and when is not planned per job")
	}
	want := []Status{pending, skipped, manual, scheduled, pending, created, created}
	if got := d.InitialStatuses(); !slices.Equal(got, want) {
		t.Errorf("initial statuses %v, want %v", got, want)
	}
	if got := d.PlanJobs()[5].Needs; !slices.Equal(got, []string{"compile"}) {
		t.Errorf("unit's needs %v, want [compile]: an optional need of a job not in the pipeline is dropped", got)
	}
	stages := validDefinition()
	if err := stages.Normalize(); err != nil {
		t.Fatal(err)
	}
	if stages.PerJob() || !slices.Equal(stages.InitialStatuses(), []Status{pending, created}) {
		t.Errorf("stage pipeline: per job %t, statuses %v", stages.PerJob(), stages.InitialStatuses())
	}
}

func TestDownstream(t *testing.T) {
	jobs := []PlanJob{
		pj("build", 0, success), pj("lint", 0, success),
		pj("unit", 1, success), pj("pkg", 1, skipped, needs("build")),
		pj("deploy", 2, skipped), pj("smoke", 2, skipped, needs("pkg")), pj("docs", 2, skipped, needs()),
		pj("early", 0, skipped, needs("lint")),
	}
	names := func(idx []int) []string {
		out := make([]string, len(idx))
		for i, k := range idx {
			out[i] = jobs[k].Name
		}
		slices.Sort(out)
		return out
	}
	tests := []struct {
		of   int
		want []string
	}{
		{0, []string{"deploy", "pkg", "smoke", "unit"}}, // build: its stage successors and its DAG chain
		{1, []string{"deploy", "early", "unit"}},        // lint: early needs it, later stage jobs wait for it
		{3, []string{"deploy", "smoke"}},                // pkg: what needs it, and stage jobs of later stages
		{2, []string{"deploy"}},                         // unit: the next stage's stage jobs
		{6, nil},                                        // docs: nothing waits for it
	}
	for _, tt := range tests {
		if got := names(Downstream(jobs, tt.of)); !slices.Equal(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
			t.Errorf("downstream of %s: %v, want %v", jobs[tt.of].Name, got, tt.want)
		}
	}
}

func TestWaitedFor(t *testing.T) {
	jobs := []PlanJob{pj("a", 0, pending), pj("b", 2, running), pj("c", 1, StatusWaiting), pj("d", 1, StatusCanceling),
		pj("e", 0, running, behind), pj("m", 0, manual), pj("s", 0, scheduled), pj("x", 3, created), pj("y", 0, success)}
	var got []string
	for _, i := range WaitedFor(jobs) {
		got = append(got, jobs[i].Name)
	}
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("waited for %v, want %v: every build on its way to or on a runner, whatever its stage, "+
			"not the ones left behind, never manual, scheduled or created ones", got, want)
	}
}

// BenchmarkPlanJobs: one plan of a 2,000-job DAG pipeline, as each finish in it runs one.
func BenchmarkPlanJobs(b *testing.B) {
	var jobs []PlanJob
	for s := 0; s < 10; s++ {
		for k := 0; k < 200; k++ {
			j := pj(fmt.Sprintf("s%dj%d", s, k), s, created)
			if s < 5 {
				j.Status = success
			}
			if k%2 == 0 && s > 0 {
				j.NeedsDeclared, j.Needs = true, []string{fmt.Sprintf("s%dj%d", s-1, k), fmt.Sprintf("s%dj%d", s-1, k+1)}
			}
			jobs = append(jobs, j)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		PlanJobs(jobs)
	}
}
