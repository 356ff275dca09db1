package ciconfig

import (
	"errors"
	"slices"

	"github.com/jobapi/jobapi/builds"
)

// LintResult is GitLab's answer to POST /projects/:id/ci/lint.
type LintResult struct {
	Valid      bool     `json:"valid"`
	Errors     []string `json:"errors"`
	Warnings   []string `json:"warnings"`
	MergedYAML string   `json:"merged_yaml"`
	// Includes: the files include: merged in, in the order they were read.
	Includes []IncludedFile `json:"includes"`
	Jobs     []LintJob      `json:"jobs"`
}

// LintJob is one job of LintResult, in GitLab's shape.
type LintJob struct {
	Name         string     `json:"name"`
	Stage        string     `json:"stage"`
	BeforeScript []string   `json:"before_script"`
	Script       []string   `json:"script"`
	AfterScript  []string   `json:"after_script"`
	TagList      []string   `json:"tag_list"`
	When         string     `json:"when"`
	AllowFailure bool       `json:"allow_failure"`
	Needs        []LintNeed `json:"needs,omitempty"`
}

// LintNeed is one need of a LintJob (GitLab's needs_attributes).
type LintNeed struct {
	Name      string `json:"name"`
	Artifacts bool   `json:"artifacts"`
	Optional  bool   `json:"optional"`
}

// Lint checks the configuration as GitLab's POST /projects/:id/ci/lint does.
//
// Without dryRun it is GitLab's static check: the whole file is read (includes, extends,
// !reference, every key of every job, needs against the stages) and jobs lists every job
// it defines, hidden ones aside, without evaluating workflow:rules, rules, only or except
// for any ref: a file whose jobs all run only on merge requests, or only on master, is
// valid. With dryRun it simulates creating the pipeline for c (c.Ref, c.Source): jobs are
// those the pipeline would get, and a pipeline that could not be created (filtered out by
// workflow rules, no job left, a need on a job rules removed) is not valid. Nothing is
// written anywhere either way.
func Lint(src []byte, c Context, dryRun bool) LintResult {
	out := LintResult{Errors: []string{}, Warnings: []string{}, Includes: []IncludedFile{}, Jobs: []LintJob{}}
	cfg, err := load(src, c)
	if err == nil {
		out.MergedYAML = cfg.merged
		out.Includes = append(out.Includes, cfg.included...)
		var jobs []builds.JobDefinition
		if dryRun {
			var res Result
			if res, err = cfg.pipeline(c); err == nil {
				out.Warnings = append(out.Warnings, res.Warnings...)
				jobs = res.Jobs
			} else {
				out.Warnings = append(append(out.Warnings, cfg.warnings...), cfg.repo.warnings...)
			}
		} else {
			out.Warnings = append(append(out.Warnings, cfg.warnings...), cfg.repo.warnings...)
			jobs = cfg.staticJobs()
		}
		for _, j := range jobs {
			out.Jobs = append(out.Jobs, lintJob(j))
		}
	}
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Message: err.Error()}
		}
		out.Errors = append(out.Errors, e.Error())
		out.Jobs = []LintJob{}
		return out
	}
	out.Valid = true
	return out
}

// staticJobs are the file's jobs as written, in stage order then file order: no rule is
// evaluated, so when is the job's own and needs are every need it declares (load checked
// that they name jobs of earlier stages).
func (cfg *config) staticJobs() []builds.JobDefinition {
	stageIndex := make(map[string]int, len(cfg.stages))
	for i, s := range cfg.stages {
		stageIndex[s] = i
	}
	out := make([]builds.JobDefinition, 0, len(cfg.jobs))
	for _, j := range cfg.jobs {
		def := j.def
		if j.hasRules {
			def.When = j.staticWhen
		}
		def.Needs = nil
		for _, n := range j.needs {
			def.Needs = append(def.Needs, builds.Need{Job: n.job, Artifacts: n.artifacts, Optional: n.optional})
		}
		out = append(out, def)
	}
	slices.SortStableFunc(out, func(a, b builds.JobDefinition) int { return stageIndex[a.Stage] - stageIndex[b.Stage] })
	return out
}

func lintJob(j builds.JobDefinition) LintJob {
	lj := LintJob{Name: j.Name, Stage: j.Stage, BeforeScript: nonNil(j.BeforeScript), Script: nonNil(j.Script),
		AfterScript: nonNil(j.AfterScript), TagList: nonNil(j.Tags), When: j.When, AllowFailure: j.AllowFailure}
	if lj.When == "" {
		lj.When = builds.WhenOnSuccess
	}
	if j.NeedsDeclared {
		lj.Needs = []LintNeed{}
		for _, n := range j.Needs {
			lj.Needs = append(lj.Needs, LintNeed{Name: n.Job, Artifacts: n.Artifacts, Optional: n.Optional})
		}
	}
	return lj
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
