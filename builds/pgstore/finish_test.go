package pgstore

import (
	"strings"
	"testing"
)

// TestOfBuildQueriesFindThePipeline: the OfBuild statements are derived from lockPipeline
// and pipelineShape by text replacement, which would silently keep "$1" (a build id read
// as a pipeline id) if the base statements changed shape.
func TestOfBuildQueriesFindThePipeline(t *testing.T) {
	for name, q := range map[string]string{"lockPipelineOfBuild": lockPipelineOfBuild, "pipelineShapeOfBuild": pipelineShapeOfBuild} {
		if !strings.Contains(q, pipelineOfBuild) || strings.Count(q, "$1") != 1 {
			t.Errorf("%s does not look the pipeline up from the build: %s", name, q)
		}
	}
}
