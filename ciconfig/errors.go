package ciconfig

import (
	"fmt"
	"strings"
)

// Error is something wrong in what the user wrote: a 400 for the lead's handlers. Job and
// Key say where (either may be empty), Line is the line in the YAML (0 when unknown).
type Error struct {
	Line    int
	Job     string
	Key     string // a key path inside the job or at the top level, "artifacts:reports"
	Message string
	// Transient: a file could not be read now (its repository unreachable) rather than
	// being wrong; the same request may succeed later. Still a 400 for an API request; a
	// bridge waits and tries again (package downstream).
	Transient bool
}

// Error reads as GitLab's messages do ("jobs:build:script config should be …"), with the
// line when it is known.
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.Job != "" && e.Key != "":
		fmt.Fprintf(&b, "jobs:%s:%s ", e.Job, e.Key)
	case e.Job != "":
		fmt.Fprintf(&b, "jobs:%s ", e.Job)
	case e.Key != "":
		b.WriteString(e.Key + " ")
	}
	b.WriteString(e.Message)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

// ErrFilteredOut is returned when workflow:rules let no pipeline run; compare with ==
// or errors.Is. GitLab answers 400 with this very message.
var ErrFilteredOut = &Error{Message: "Pipeline filtered out by workflow rules."}

// ErrNoJobs is returned when rules removed every job (GitLab's words).
var ErrNoJobs = &Error{Message: "Pipeline will not run for the selected trigger. The rules configuration prevented any jobs from being added to the pipeline."}

// errAt builds an *Error for a key at a node's line.
func errAt(v *val, job, key, format string, args ...any) *Error {
	line := 0
	if v != nil {
		line = v.line
	}
	return &Error{Line: line, Job: job, Key: key, Message: fmt.Sprintf(format, args...)}
}
