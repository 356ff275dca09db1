package builds

import (
	"cmp"
	"slices"
)

// Pipelines whose jobs use `needs` or a `when` other than on_success advance job by job, as
// GitLab's pipeline processing does (Ci::PipelineProcessing::AtomicProcessingService with
// Ci::ProcessBuildService): each created job looks at its predecessors, the jobs it needs
// when it declares `needs` (a DAG job), else every job of the earlier stages, and the
// outcome of those predecessors together with its `when` decides whether it waits, is
// released (pending, manual or scheduled) or is skipped. Every other pipeline keeps the
// cheaper stage-by-stage rule (PlanAdvance over StageTally), which gives the same result
// for jobs that all run on_success without needs.

// PerJob reports whether a normalized definition needs the job-by-job rule: some job
// declares `needs` or runs on a `when` other than on_success.
func (d *PipelineDefinition) PerJob() bool {
	for _, j := range d.Jobs {
		if j.NeedsDeclared || (j.When != "" && j.When != WhenOnSuccess) {
			return true
		}
	}
	return false
}

// MaxStartIn is the longest start_in of a delayed job, as GitLab allows.
const MaxStartIn = 7 * 24 * 3600

// checkWhen validates when and start_in (GitLab: start_in only for, and required by,
// when: delayed, at most a week).
func (j *JobDefinition) checkWhen() error {
	switch j.When {
	case "", WhenOnSuccess, WhenOnFailure, WhenAlways, WhenManual:
		if j.StartInSeconds != 0 {
			return invalid("job %q: start_in needs when: delayed", j.Name)
		}
	case WhenDelayed:
		if j.StartInSeconds < 1 || j.StartInSeconds > MaxStartIn {
			return invalid("job %q: when: delayed needs a start_in from 1 second to 1 week", j.Name)
		}
	default:
		return invalid("job %q: when must be on_success, on_failure, always, manual or delayed, not %.40q", j.Name, j.When)
	}
	return nil
}

// PlanJobs returns the jobs of a normalized definition as the plan sees them before the
// pipeline exists: every one created, its needs reduced to jobs of the pipeline (an
// optional need of a job that rules left out is dropped, as GitLab does).
func (d *PipelineDefinition) PlanJobs() []PlanJob {
	present := make(map[string]bool, len(d.Jobs))
	for _, j := range d.Jobs {
		present[j.Name] = true
	}
	out := make([]PlanJob, len(d.Jobs))
	for i, j := range d.Jobs {
		out[i] = PlanJob{Name: j.Name, StageIdx: d.StageIndex(j.Stage), Status: StatusCreated, When: j.When,
			NeedsDeclared: j.NeedsDeclared, AllowFailure: j.AllowFailure}
		if j.NeedsDeclared {
			out[i].Needs = make([]string, 0, len(j.Needs))
			for _, n := range j.Needs {
				if present[n.Job] || !n.Optional {
					out[i].Needs = append(out[i].Needs, n.Job)
				}
			}
		}
	}
	return out
}

// InitialStatuses is the state each job of a normalized definition starts in: for a
// stage pipeline the first stage pending and the rest created; for a job-by-job one what
// PlanJobs makes of all of them created (needs: [] pending, a first-stage manual job
// manual, a first-stage on_failure job skipped…). A job of a resource group that would
// start pending waits for its group instead.
func (d *PipelineDefinition) InitialStatuses() []Status {
	out := make([]Status, len(d.Jobs))
	if !d.PerJob() {
		first := d.FirstStage()
		for i, j := range d.Jobs {
			out[i] = InitialStatus(d.StageIndex(j.Stage), first)
		}
		return d.waitForResources(out)
	}
	for i := range out {
		out[i] = StatusCreated
	}
	for _, m := range PlanJobs(d.PlanJobs()) {
		out[m.Index] = m.To
	}
	return d.waitForResources(out)
}

// waitForResources: a job of a resource group released at creation waits for its group
// (GitLab's enqueue of a job with_resource_group); the store assigns the group next.
func (d *PipelineDefinition) waitForResources(out []Status) []Status {
	for i, j := range d.Jobs {
		if out[i] == StatusPending && j.ResourceGroup != "" {
			out[i] = StatusWaitingForResource
		}
	}
	return out
}

// PlanJob is one latest attempt of a pipeline that advances job by job: what the plan
// needs to know about it.
type PlanJob struct {
	ID       int64
	Name     string
	StageIdx int
	Status   Status
	// When is one of the When* constants ("" = on_success).
	When string
	// Needs names the jobs it waits for when NeedsDeclared (a DAG job; `needs: []` waits
	// for nothing); without NeedsDeclared it waits for every job of the earlier stages.
	Needs         []string
	NeedsDeclared bool
	AllowFailure  bool
	// LeftBehind: the optimistic stuck strategy gave up waiting for this build; while it is
	// unfinished it counts as passed for the jobs after it.
	LeftBehind bool
	// Bridge: a trigger job; once its child exists it waits for no runner (WaitedFor).
	Bridge bool
}

// JobMove is a change the plan makes to one created job: released (to pending, manual or
// scheduled) or skipped.
type JobMove struct {
	// Index is the job's position in the plan's input.
	Index int
	To    Status
}

// outcome gathers what a job's predecessors came to, as GitLab's Gitlab::Ci::Status::Composite
// does: a failure with allow_failure is a success with warnings, and a manual job with
// allow_failure (optional) is ignored.
type outcome struct {
	any, incomplete, success, warned, failed, canceled, skipped, ignored bool
}

func (o *outcome) add(j PlanJob) {
	o.any = true
	switch j.Status {
	case StatusSuccess:
		o.success = true
	case StatusFailed:
		if j.AllowFailure {
			o.warned = true
		} else {
			o.failed = true
		}
	case StatusCanceled:
		// jobapi's rule (SPEC §6): a cancel stops what follows, allow_failure or not.
		o.canceled = true
	case StatusSkipped:
		o.skipped = true
	case StatusManual:
		if j.AllowFailure {
			o.ignored = true
		} else {
			o.incomplete = true
		}
	case StatusWaitingForResource, StatusPending, StatusWaiting, StatusRunning, StatusCanceling:
		if j.LeftBehind {
			o.success = true
		} else {
			o.incomplete = true
		}
	default: // created, scheduled
		o.incomplete = true
	}
}

func (o *outcome) merge(p outcome) {
	o.any = o.any || p.any
	o.incomplete = o.incomplete || p.incomplete
	o.success = o.success || p.success
	o.warned = o.warned || p.warned
	o.failed = o.failed || p.failed
	o.canceled = o.canceled || p.canceled
	o.skipped = o.skipped || p.skipped
	o.ignored = o.ignored || p.ignored
}

// verdict is what a job's predecessors came to.
type verdict int

const (
	verdictWait verdict = iota // some predecessor has not finished
	verdictSuccess
	verdictFailed
	verdictCanceled
	verdictSkipped
)

// verdict follows Composite#status: for a DAG job one skipped or ignored need skips it (the
// need will not run), before anything else; then any unfinished predecessor makes it wait;
// then only skipped and ignored ones make "skipped", a failure without allow_failure
// "failed", a cancel "canceled", and the rest (none at all included) "success".
func (o outcome) verdict(dag bool) verdict {
	switch {
	case dag && (o.skipped || o.ignored):
		return verdictSkipped
	case o.incomplete:
		return verdictWait
	case !o.any:
		return verdictSuccess
	case o.failed:
		return verdictFailed
	case o.canceled:
		return verdictCanceled
	case !o.success && !o.warned:
		return verdictSkipped
	default:
		return verdictSuccess
	}
}

// decide is Ci::ProcessBuildService: whether a job with this when runs after its
// predecessors' verdict, and in which state. ok=false: it keeps waiting.
func decide(when string, v verdict, dag bool) (to Status, ok bool) {
	if v == verdictWait {
		return "", false
	}
	var runs bool
	switch when {
	case "", WhenOnSuccess, WhenManual, WhenDelayed:
		// A stage job runs after skipped predecessors too; a DAG job only when its needs
		// succeeded.
		runs = v == verdictSuccess || (!dag && v == verdictSkipped)
	case WhenOnFailure:
		runs = v == verdictFailed
	case WhenAlways:
		runs = v == verdictSuccess || v == verdictFailed || v == verdictSkipped
	}
	switch {
	case !runs:
		return StatusSkipped, true
	case when == WhenManual:
		return StatusManual, true
	case when == WhenDelayed:
		return StatusScheduled, true
	default:
		return StatusPending, true
	}
}

// planGraph orders a pipeline's jobs so that every job comes after all its predecessors:
// a DAG job after the jobs it needs, a stage job after every job of the earlier stages
// (through one barrier node per stage, so that the graph stays linear in size).
type planGraph struct {
	jobs    []PlanJob
	stages  []int // distinct stage indexes, ascending
	stageOf []int // position in stages of each job's stage
	// needs of job i are needFlat[needAt[i]:needAt[i+1]]: positions of known jobs, each once.
	needAt, needFlat []int
}

func newPlanGraph(jobs []PlanJob) planGraph {
	g := planGraph{jobs: jobs, stageOf: make([]int, len(jobs)), needAt: make([]int, len(jobs)+1)}
	byName := make(map[string]int, len(jobs))
	g.stages = make([]int, 0, 8)
	for i, j := range jobs {
		g.stages = append(g.stages, j.StageIdx)
		byName[j.Name] = i
	}
	slices.Sort(g.stages)
	g.stages = slices.Compact(g.stages)
	for i, j := range jobs {
		g.stageOf[i], _ = slices.BinarySearch(g.stages, j.StageIdx)
		for _, name := range j.Needs {
			// Unknown names never reach here (Normalize refuses them); an optional need of
			// a job that is not in the pipeline is dropped at creation.
			k, ok := byName[name]
			if ok && k != i && !slices.Contains(g.needFlat[g.needAt[i]:], k) {
				g.needFlat = append(g.needFlat, k)
			}
		}
		g.needAt[i+1] = len(g.needFlat)
	}
	return g
}

// needs returns the positions of the known jobs job i needs, each once.
func (g planGraph) needs(i int) []int { return g.needFlat[g.needAt[i]:g.needAt[i+1]] }

// order visits the jobs in an order that respects every dependency, calling job(i) for each
// and barrier(k) when every job of the stages before stages[k] has been visited. Jobs in a
// cycle (Normalize refuses them) and what depends on them are never visited.
func (g planGraph) order(job func(i int), barrier func(k int)) {
	n, s := len(g.jobs), len(g.stages)
	// Nodes 0..n-1 are jobs, n+k is the barrier of stages[k]. The edges, from a node to
	// those that wait for it, in compressed rows: out[at[v]:at[v+1]].
	at := make([]int, n+s+1)
	indeg := make([]int, n+s)
	each := func(fn func(from, to int)) {
		for k := 1; k < s; k++ {
			fn(n+k-1, n+k)
		}
		for i, j := range g.jobs {
			if g.stageOf[i]+1 < s {
				fn(i, n+g.stageOf[i]+1)
			}
			if !j.NeedsDeclared {
				fn(n+g.stageOf[i], i)
				continue
			}
			for _, k := range g.needs(i) {
				fn(k, i)
			}
		}
	}
	each(func(from, to int) { at[from+1]++; indeg[to]++ })
	for v := 1; v <= n+s; v++ {
		at[v] += at[v-1]
	}
	out := make([]int, at[n+s])
	fill := slices.Clone(at[:n+s])
	each(func(from, to int) { out[fill[from]] = to; fill[from]++ })

	queue := make([]int, 0, n+s)
	for v, d := range indeg {
		if d == 0 {
			queue = append(queue, v)
		}
	}
	for q := 0; q < len(queue); q++ {
		v := queue[q]
		if v < n {
			job(v)
		} else {
			barrier(v - n)
		}
		for _, w := range out[at[v]:at[v+1]] {
			if indeg[w]--; indeg[w] == 0 {
				queue = append(queue, w)
			}
		}
	}
}

// PlanJobs applies GitLab's processing to the latest attempts of a pipeline that advances
// job by job: every created job whose predecessors have all finished is released (pending,
// manual for when: manual, scheduled for when: delayed) or skipped, as its when and their
// outcome say (see decide). Moves made earlier in the same plan count for the jobs after,
// so one call settles the pipeline. The input is not modified.
func PlanJobs(jobs []PlanJob) []JobMove {
	g := newPlanGraph(slices.Clone(jobs))
	stageDone := make([]outcome, len(g.stages)) // jobs of each stage, as visited
	before := make([]outcome, len(g.stages))    // jobs of every earlier stage
	var moves []JobMove
	g.order(func(i int) {
		j := &g.jobs[i]
		if j.Status == StatusCreated {
			var o outcome
			if j.NeedsDeclared {
				for _, k := range g.needs(i) {
					o.add(g.jobs[k])
				}
			} else {
				o = before[g.stageOf[i]]
			}
			if to, ok := decide(j.When, o.verdict(j.NeedsDeclared), j.NeedsDeclared); ok {
				j.Status = to
				moves = append(moves, JobMove{Index: i, To: to})
			}
		}
		stageDone[g.stageOf[i]].add(*j)
	}, func(k int) {
		if k > 0 {
			before[k] = before[k-1]
			before[k].merge(stageDone[k-1])
		}
	})
	return moves
}

// ApplyMoves returns jobs with the plan's moves made.
func ApplyMoves(jobs []PlanJob, moves []JobMove) []PlanJob {
	out := slices.Clone(jobs)
	for _, m := range moves {
		out[m.Index].Status = m.To
	}
	return out
}

// TallyJobs counts jobs for PipelineStatus.
func TallyJobs(jobs []PlanJob) []StageTally {
	var t StageTally
	for _, j := range jobs {
		t.Add(j.Status, j.AllowFailure, 1)
	}
	return []StageTally{t}
}

// Downstream lists the positions of the jobs that wait for job i, directly or through
// others: DAG jobs that need it, and jobs without needs in later stages. A retry or a play
// of job i gives those of them that were skipped another chance (GitLab's
// ResetSkippedJobsService); the next plan skips again the ones still ruled out.
func Downstream(jobs []PlanJob, i int) []int {
	g := newPlanGraph(jobs)
	needers := map[int][]int{}
	var staged []int // jobs without needs, by stage
	for k, j := range jobs {
		if !j.NeedsDeclared {
			staged = append(staged, k)
			continue
		}
		for _, n := range g.needs(k) {
			needers[n] = append(needers[n], k)
		}
	}
	slices.SortFunc(staged, func(a, b int) int { return cmp.Compare(jobs[a].StageIdx, jobs[b].StageIdx) })
	reached := make([]bool, len(jobs))
	reached[i] = true
	queue := []int{i}
	var out []int
	reach := func(k int) {
		if !reached[k] {
			reached[k] = true
			queue = append(queue, k)
			out = append(out, k)
		}
	}
	// Every job without needs past the earliest stage reached so far is downstream; the
	// earliest stage only moves back, so each of them is looked at once.
	covered := len(staged)
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, k := range needers[v] {
			reach(k)
		}
		from, _ := slices.BinarySearchFunc(staged, jobs[v].StageIdx+1, func(k, stage int) int {
			return cmp.Compare(jobs[k].StageIdx, stage)
		})
		for k := from; k < covered; k++ {
			reach(staged[k])
		}
		covered = min(covered, from)
	}
	slices.Sort(out)
	return out
}

// WaitedFor lists the positions of the builds a stuck check of a job-by-job pipeline waits
// for: every unfinished build on its way to or on a runner (pending, waiting, running,
// canceling) that was not left behind already, whatever its stage, since several stages
// run at once. Manual and scheduled jobs are not waited for: they wait for an operator or
// for their time, which is no lack of progress.
func WaitedFor(jobs []PlanJob) []int {
	var out []int
	for i, j := range jobs {
		switch j.Status {
		case StatusPending, StatusWaiting, StatusRunning, StatusCanceling:
			if !j.LeftBehind && !(j.Bridge && j.Status != StatusPending) {
				out = append(out, i)
			}
		}
	}
	return out
}

// PlanNeeders is the part of PlanJobs that the end of one job can change in a pipeline that
// was settled before it: the created DAG jobs that need that job (cands), decided from the
// latest attempts of what they need (needs, by name). Every other created job waits for
// the same jobs as before, as long as the caller checked that a job of the ended one's
// stage or an earlier one is still unfinished (a job without needs after it keeps waiting)
// and that no build was left behind. Moves index cands.
//
// ok is false when a move would in turn decide other jobs (a skip, or an optional manual
// job, which its DAG needers see as skipped): the caller then plans the whole pipeline
// with PlanJobs. A release to pending, to a blocking manual job or to scheduled leaves the
// job unfinished, as created was, so nothing after it changes.
func PlanNeeders(cands []PlanJob, needs map[string]PlanJob) (moves []JobMove, ok bool) {
	for i, c := range cands {
		if c.Status != StatusCreated || !c.NeedsDeclared {
			continue
		}
		var o outcome
		for _, name := range c.Needs {
			if n, found := needs[name]; found && name != c.Name {
				o.add(n)
			}
		}
		to, decided := decide(c.When, o.verdict(true), true)
		if !decided {
			continue
		}
		if to == StatusSkipped || (to == StatusManual && c.AllowFailure) {
			return nil, false
		}
		moves = append(moves, JobMove{Index: i, To: to})
	}
	return moves, true
}

// NeededBy maps each job of a plan to the jobs that declare a need on it, by name: what a
// build stores so that its end reads only its needers (PlanNeeders). A job nobody needs
// gets an empty list.
func NeededBy(jobs []PlanJob) [][]string {
	byName := make(map[string]int, len(jobs))
	for i, j := range jobs {
		byName[j.Name] = i
	}
	out := make([][]string, len(jobs))
	for i := range out {
		out[i] = []string{}
	}
	for _, j := range jobs {
		for _, n := range j.Needs {
			if k, ok := byName[n]; ok && n != j.Name && !slices.Contains(out[k], j.Name) {
				out[k] = append(out[k], j.Name)
			}
		}
	}
	return out
}
