package ciconfig

import (
	"errors"

	"github.com/jobapi/jobapi/builds"
)

// LintResult is GitLab's answer to POST /projects/:id/ci/lint.
type LintResult struct {
	Valid      bool      `json:"valid"`
	Errors     []string  `json:"errors"`
	Warnings   []string  `json:"warnings"`
	MergedYAML string    `json:"merged_yaml"`
	Jobs       []LintJob `json:"jobs"`
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

// Lint checks the configuration as a dry run of creating the pipeline for c (GitLab's
// lint with dry_run): the whole file is checked, every job including those rules leave
// out; then jobs lists the pipeline's jobs as Compile makes them, and a pipeline that
// could not be created (filtered out by workflow rules, a need on a job rules removed) is
// not valid. Nothing is written anywhere.
func Lint(src []byte, c Context) LintResult {
	out := LintResult{Errors: []string{}, Warnings: []string{}, Jobs: []LintJob{}}
	cfg, err := load(src, c)
	if err == nil {
		out.MergedYAML = cfg.merged
		var res Result
		if res, err = cfg.pipeline(c); err == nil {
			out.Warnings = append(out.Warnings, res.Warnings...)
			for _, j := range res.Jobs {
				out.Jobs = append(out.Jobs, lintJob(j))
			}
		} else {
			out.Warnings = append(append(out.Warnings, cfg.warnings...), cfg.repo.warnings...)
		}
	}
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Message: err.Error()}
		}
		out.Errors = append(out.Errors, e.Error())
		return out
	}
	out.Valid = true
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
