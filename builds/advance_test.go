package builds

import "testing"

// tally builds one stage's counts from statuses; a "failed!" is a failure with allow_failure.
func tally(idx int, statuses ...string) StageTally {
	t := StageTally{Idx: idx}
	for _, s := range statuses {
		if s == "failed!" {
			t.Add(StatusFailed, true, 1)
			continue
		}
		t.Add(Status(s), false, 1)
	}
	return t
}

func TestPipelineStatus(t *testing.T) {
	tests := []struct {
		name   string
		stages []StageTally
		want   string
	}{
		{"all pending", []StageTally{tally(0, "pending", "pending"), tally(1, "created")}, PipelinePending},
		{"one running", []StageTally{tally(0, "pending", "running"), tally(1, "created")}, PipelineRunning},
		{"one finished, next pending", []StageTally{tally(0, "success"), tally(1, "pending")}, PipelineRunning},
		{"retried only build", []StageTally{tally(0, "pending")}, PipelinePending},
		{"all succeeded", []StageTally{tally(0, "success"), tally(1, "success", "failed!")}, PipelineSuccess},
		{"failed blocks", []StageTally{tally(0, "failed"), tally(1, "skipped")}, PipelineFailed},
		{"canceled", []StageTally{tally(0, "canceled", "success"), tally(1, "skipped")}, PipelineCanceled},
		{"failed wins over canceled", []StageTally{tally(0, "canceled", "failed")}, PipelineFailed},
	}
	for _, tt := range tests {
		if got := PipelineStatus(tt.stages); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestPlanAdvance(t *testing.T) {
	tests := []struct {
		name         string
		stages       []StageTally
		advancedPast int
		want         AdvancePlan
	}{
		{"first stage still running", []StageTally{tally(0, "running", "success"), tally(1, "created")}, -1, AdvancePlan{NoStage, NoStage}},
		{"first stage done: release the next", []StageTally{tally(0, "success", "failed!"), tally(1, "created")}, -1, AdvancePlan{Release: 1, SkipFrom: NoStage}},
		{"blocking failure: skip the rest", []StageTally{tally(0, "failed"), tally(1, "created"), tally(2, "created")}, -1, AdvancePlan{Release: NoStage, SkipFrom: 1}},
		{"cancel: skip the rest", []StageTally{tally(0, "canceled", "success"), tally(1, "created")}, -1, AdvancePlan{Release: NoStage, SkipFrom: 1}},
		{"released stage not done yet", []StageTally{tally(0, "success"), tally(1, "pending", "created")}, -1, AdvancePlan{NoStage, NoStage}},
		{"optimistic: stuck stage left behind", []StageTally{tally(0, "running"), tally(1, "created")}, 0, AdvancePlan{Release: 1, SkipFrom: NoStage}},
		{"optimistic: a failure behind still blocks", []StageTally{tally(0, "failed", "running"), tally(1, "pending"), tally(2, "created")}, 0, AdvancePlan{Release: NoStage, SkipFrom: 1}},
		{"all finished", []StageTally{tally(0, "success"), tally(1, "success")}, -1, AdvancePlan{NoStage, NoStage}},
		{"skip after a retried stage failed", []StageTally{tally(0, "success"), tally(1, "failed"), tally(2, "created")}, -1, AdvancePlan{Release: NoStage, SkipFrom: 2}},
	}
	for _, tt := range tests {
		if got := PlanAdvance(tt.stages, tt.advancedPast); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestInitialStatusAndRetryable(t *testing.T) {
	d := PipelineDefinition{Stages: []string{"build", "test"}, Jobs: []JobDefinition{{Stage: "test"}}}
	if first := d.FirstStage(); first != 1 || InitialStatus(1, first) != StatusPending || InitialStatus(2, first) != StatusCreated {
		t.Errorf("first stage %d; want jobs of stage 1 pending, later ones created", first)
	}
	for _, st := range AllStatuses {
		want := st == StatusSuccess || st == StatusFailed || st == StatusCanceled
		if Retryable(st, true) != want || Retryable(st, false) {
			t.Errorf("Retryable(%s): want %t when latest, false otherwise", st, want)
		}
	}
}
