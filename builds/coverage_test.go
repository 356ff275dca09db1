package builds

import "testing"

func TestPipelineCoverage(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	p := Pipeline{Builds: []Build{
		{ID: 1, Coverage: f(90), RetriedBy: 4}, // retried: its attempt counts instead
		{ID: 2, Coverage: f(80)},
		{ID: 3},
		{ID: 4, Coverage: f(70), RetryOf: 1},
	}}
	if got, ok := p.Coverage(); !ok || got != 75 {
		t.Errorf("Coverage = %v, %v; want 75, true", got, ok)
	}
	if _, ok := (Pipeline{Builds: []Build{{ID: 1}}}).Coverage(); ok {
		t.Error("a pipeline without coverage has one")
	}
}
