package builds

import (
	"slices"
	"strings"
)

// ValidateNeeds checks the graph the jobs' needs and dependencies make, so that the
// pipeline's advancement can rely on it: every need names a job of the pipeline (an
// optional need may name an absent job: it is then no need at all), no job needs itself,
// a needed job is in the same or an earlier stage (a need on a later stage would wait on
// a job that waits on the stage order, forever), the needs make no cycle, and every
// dependency names a job of the pipeline. It returns a *ValidationError naming the job.
func ValidateNeeds(stages []string, jobs []JobDefinition) error {
	index := make(map[string]int, len(jobs))
	for i, j := range jobs {
		index[j.Name] = i
	}
	stageOf := func(j JobDefinition) int { return slices.Index(stages, j.Stage) }
	for _, j := range jobs {
		for _, n := range j.Needs {
			k, ok := index[n.Job]
			switch {
			case n.Job == j.Name:
				return invalid("job %q needs itself", j.Name)
			case !ok && n.Optional:
			case !ok:
				return invalid("job %q needs %q, which is not a job of this pipeline", j.Name, n.Job)
			case stageOf(jobs[k]) > stageOf(j):
				return invalid("job %q (stage %s) needs %q of the later stage %s", j.Name, j.Stage, n.Job, jobs[k].Stage)
			}
		}
		for _, d := range j.Dependencies {
			if _, ok := index[d]; !ok {
				return invalid("job %q: dependency %q is not a job of this pipeline", j.Name, d)
			}
		}
	}
	if cycle := findNeedsCycle(jobs, index); cycle != nil {
		return invalid("needs make a cycle: %s", strings.Join(cycle, " → "))
	}
	return nil
}

// findNeedsCycle returns a cycle of needs (its first job repeated at the end), or nil. It
// walks iteratively: 5,000 jobs in one chain must not need 5,000 stack frames.
func findNeedsCycle(jobs []JobDefinition, index map[string]int) []string {
	const (
		unvisited = iota
		onPath
		done
	)
	state := make([]int, len(jobs))
	type frame struct{ job, next int }
	for start := range jobs {
		if state[start] != unvisited {
			continue
		}
		path := []frame{{job: start}}
		state[start] = onPath
		for len(path) > 0 {
			top := &path[len(path)-1]
			needs := jobs[top.job].Needs
			if top.next == len(needs) {
				state[top.job] = done
				path = path[:len(path)-1]
				continue
			}
			k, ok := index[needs[top.next].Job]
			top.next++
			if !ok {
				continue
			}
			switch state[k] {
			case onPath:
				var cycle []string
				for i := len(path) - 1; i >= 0; i-- {
					cycle = append(cycle, jobs[path[i].job].Name)
					if path[i].job == k {
						break
					}
				}
				slices.Reverse(cycle)
				return append(cycle, jobs[k].Name)
			case unvisited:
				state[k] = onPath
				path = append(path, frame{job: k})
			}
		}
	}
	return nil
}
