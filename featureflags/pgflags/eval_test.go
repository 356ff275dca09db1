package pgflags

import (
	"strconv"
	"testing"

	"github.com/open-feature/go-sdk/openfeature"

	"github.com/jobapi/jobapi/featureflags"
)

const key = featureflags.AllowRunnerJobAcknowledgement

func TestEvaluate(t *testing.T) {
	t.Parallel()
	ctx := openfeature.FlattenedContext{
		openfeature.TargetingKey:  "42",
		featureflags.AttrRunnerID: "7",
	}
	actors := func(a ...string) map[string]struct{} {
		m := map[string]struct{}{}
		for _, s := range a {
			m[s] = struct{}{}
		}
		return m
	}
	tests := []struct {
		name       string
		flag       flag
		ctx        openfeature.FlattenedContext
		want       bool
		wantReason openfeature.Reason
	}{
		{"no gates", flag{}, ctx, false, openfeature.StaticReason},
		{"no gates, no context", flag{}, openfeature.FlattenedContext{}, false, openfeature.StaticReason},
		{"boolean on", flag{on: true}, ctx, true, openfeature.StaticReason},
		{"boolean on wins over actors", flag{on: true, actors: actors("project:1")}, ctx, true, openfeature.StaticReason},
		{"disabled is a kill switch", flag{disabled: true, actors: actors("project:42"), percentage: 100}, ctx, false, openfeature.DisabledReason},
		{"actor project", flag{actors: actors("project:42")}, ctx, true, openfeature.TargetingMatchReason},
		{"actor other project", flag{actors: actors("project:4")}, ctx, false, openfeature.DefaultReason},
		{"actor runner", flag{actors: actors("runner:7")}, ctx, true, openfeature.TargetingMatchReason},
		{"runner id as a number", flag{actors: actors("runner:7")},
			openfeature.FlattenedContext{featureflags.AttrRunnerID: int64(7)}, true, openfeature.TargetingMatchReason},
		{"runner id is not a project id", flag{actors: actors("project:7")}, ctx, false, openfeature.DefaultReason},
		{"percentage 100", flag{percentage: 100}, ctx, true, openfeature.SplitReason},
		// crc32("allow_runner_job_acknowledgement42") % 100000 = 53119 (checked with Python's
		// zlib.crc32, the same polynomial as Ruby's Zlib): on from 54%, off at 53%.
		{"percentage 54", flag{percentage: 54}, ctx, true, openfeature.SplitReason},
		{"percentage 53", flag{percentage: 53}, ctx, false, openfeature.SplitReason},
		{"percentage without targeting key", flag{percentage: 100}, openfeature.FlattenedContext{}, false, openfeature.DefaultReason},
		{"actors without targeting key", flag{actors: actors("project:42")}, openfeature.FlattenedContext{}, false, openfeature.DefaultReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := tt.flag.evaluate(key, tt.ctx)
			if got != tt.want || reason != tt.wantReason {
				t.Errorf("evaluate = %v, %s; want %v, %s", got, reason, tt.want, tt.wantReason)
			}
		})
	}
}

func TestPercentageDistribution(t *testing.T) {
	t.Parallel()
	const actors = 10000
	prev := make([]bool, actors+1) // on at the previous percentage
	for _, pct := range []int{0, 1, 10, 25, 50, 75, 99, 100} {
		on := 0
		for id := 1; id <= actors; id++ {
			v := inPercentage(key, strconv.Itoa(id), pct)
			if v != inPercentage(key, strconv.Itoa(id), pct) {
				t.Fatalf("actor %d: answer not stable", id)
			}
			if prev[id] && !v {
				t.Errorf("actor %d on at a lower percentage, off at %d%%: raising a rollout must not drop anyone", id, pct)
			}
			prev[id] = v
			if v {
				on++
			}
		}
		// Binomial sd at 50% over 10k is 0.5 point; 1.5 points is 3 sd.
		if got := float64(on) / actors * 100; got < float64(pct)-1.5 || got > float64(pct)+1.5 {
			t.Errorf("%d%%: %.2f%% of %d actors on", pct, got, actors)
		}
	}
}

func TestPercentageSaltedByFlagName(t *testing.T) {
	t.Parallel()
	// Two flags at 50% must not pick the same half, or every 50% rollout hits the same
	// projects first.
	same := 0
	for id := 1; id <= 1000; id++ {
		a := strconv.Itoa(id)
		if inPercentage("flag_a", a, 50) == inPercentage("flag_b", a, 50) {
			same++
		}
	}
	if same > 600 {
		t.Errorf("flags agree on %d of 1000 actors, want about half", same)
	}
}
