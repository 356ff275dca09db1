package downstream

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/ciconfig"
)

func TestForwarded(t *testing.T) {
	yaml := []builds.Variable{{Key: "GLOBAL", Value: "g"}, {Key: "SERVICE", Value: "api"}, {Key: "SHARED", Value: "from yaml"}}
	pipeline := []builds.Variable{{Key: "SHARED", Value: "from pipeline"}, {Key: "DEPLOY", Value: "1"}}
	tests := []struct {
		name        string
		yamlVars    bool
		pipelineVar bool
		want        []builds.Variable
	}{
		{"GitLab's default", true, false, yaml},
		{"nothing", false, false, nil},
		{"pipeline variables only", false, true, pipeline},
		{"both: a pipeline variable wins over a YAML one of its name, in the YAML one's place", true, true,
			[]builds.Variable{{Key: "GLOBAL", Value: "g"}, {Key: "SERVICE", Value: "api"}, {Key: "SHARED", Value: "from pipeline"}, {Key: "DEPLOY", Value: "1"}}},
	}
	for _, tt := range tests {
		tr := &builds.Trigger{ForwardYAMLVariables: tt.yamlVars, ForwardPipelineVariables: tt.pipelineVar}
		if got := forwarded(tr, yaml, pipeline); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestCreationFailure: mistakes in the child's configuration fail the bridge for good;
// anything else (git unreachable, Postgres down) leaves it pending for the next pass.
func TestCreationFailure(t *testing.T) {
	for err, permanent := range map[error]bool{
		&ciconfig.Error{Job: "a", Key: "script", Message: "can't be blank"}:                     true,
		&ciconfig.IncludeError{Message: "the file is too large"}:                                true,
		&ciconfig.IncludeError{Message: "the repository cannot be fetched", Transient: true}:    false,
		&ciconfig.Error{Key: "include:local", Message: "`a.yml`: unreachable", Transient: true}: false,
		fmt.Errorf("compile: %w", ciconfig.ErrFilteredOut):                                      true,
		ciconfig.ErrNoJobs: true,
		errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"): false,
		fmt.Errorf("bridge: %w", builds.ErrUnavailable):                    false,
	} {
		msg, got := creationFailure(err)
		if got != permanent || msg == "" && permanent {
			t.Errorf("creationFailure(%v) = %q, %t; want permanent=%t with a message", err, msg, got, permanent)
		}
	}
}
