package webui

import (
	"strconv"

	"github.com/jobapi/jobapi/builds"
)

// look is how a status is shown: Class picks the colour (s-<Class>), Label is the text, and
// Icon a symbol beside it for the states that share a colour family with another (the
// warning's orange beside the failure's red), so that no state is told by colour alone.
type look struct {
	Class, Label, Icon string
}

// warningClass is GitLab's "warning": a failed job that was allowed to fail, and a pipeline
// that succeeded with such jobs (Gitlab::Ci::Status::SuccessWarning, FailedAllowed).
const warningClass = "warning"

// jobLook shows a failed job with allow_failure as a warning, as GitLab does: its failure
// did not fail the pipeline, and a plain red "failed" would say it had.
func jobLook(b builds.Build) look {
	if b.Status == builds.StatusFailed && b.AllowFailure {
		return look{Class: warningClass, Label: "failed (allowed to fail)", Icon: "⚠"}
	}
	return statusLook(string(b.Status))
}

// pipelineLook shows a pipeline that succeeded with failed allow_failure jobs as "passed
// with warnings" (GitLab's wording).
func pipelineLook(status string, warnings bool) look {
	if status == builds.PipelineSuccess && warnings {
		return look{Class: warningClass, Label: "passed with warnings", Icon: "⚠"}
	}
	return statusLook(status)
}

func statusLook(s string) look {
	return look{Class: s, Label: statusLabel(s)}
}

// pipelineWarnings reports whether a pipeline read with its builds has a latest job that
// failed and was allowed to.
func pipelineWarnings(p builds.Pipeline) bool {
	for _, b := range p.Builds {
		if b.RetriedBy == 0 && b.Status == builds.StatusFailed && b.AllowFailure {
			return true
		}
	}
	return false
}

// coverageText is a coverage percentage as GitLab shows it: two decimals; "" for none.
func coverageText(c *float64) string {
	if c == nil {
		return ""
	}
	return strconv.FormatFloat(*c, 'f', 2, 64) + "%"
}
