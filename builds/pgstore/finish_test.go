package pgstore

import (
	"strings"
	"testing"
)

// TestOfBuildQueriesFindThePipeline: the OfBuild statements are composed from the same
// fragments as lockPipeline and pipelineShape, with the pipeline looked up from the build;
// a fragment that kept its own "$1" would read a build id as a pipeline id.
func TestOfBuildQueriesFindThePipeline(t *testing.T) {
	for name, q := range map[string]string{"lockPipelineOfBuild": lockPipelineOfBuild, "pipelineShapeOfBuild": pipelineShapeOfBuild} {
		if !strings.Contains(q, pipelineOfBuild) || strings.Count(q, "$1") != strings.Count(q, pipelineOfBuild) {
			t.Errorf("%s does not look the pipeline up from the build: %s", name, q)
		}
	}
}
