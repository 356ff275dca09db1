package artifacts

import (
	"testing"

	"github.com/jobapi/jobapi/builds"
)

// The copies of a parallel job share a suite under the job's own name, as GitLab's
// Gitlab::Utils::Job.group_name makes it; a job whose own name ends in a fraction keeps it.
func TestTestSuiteName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		total int
		want  string
	}{
		{"rspec 1/3", 3, "rspec"},
		{"rspec 12/12", 12, "rspec"},
		{"rspec:linux 2/2", 2, "rspec:linux"},
		{"unit", 0, "unit"},
		{"ratio 1/2", 0, "ratio 1/2"},
	} {
		b := builds.Build{Name: tc.name}
		b.Payload.NodeTotal = tc.total
		if got := testSuiteName(b); got != tc.want {
			t.Errorf("suite of %q (parallel %d) = %q, want %q", tc.name, tc.total, got, tc.want)
		}
	}
}
