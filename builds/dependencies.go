package builds

// Dependency is a job whose artifacts a claimed build downloads: the latest attempt of a job
// its payload names (Payload.Dependencies) or of an earlier stage's job with artifacts
// (Payload.DependsOnStages), in the same pipeline. The claim resolves them.
type Dependency struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	// ArtifactsFile is the job's archive; nil while none is stored. Until artifacts are
	// stored (issue 14) it is always nil, and gitlab-runner skips a dependency without one
	// (shells/abstract.go jobArtifacts), so the payload already has its final shape.
	ArtifactsFile *ArtifactsFile `json:"artifacts_file"`
}

// ArtifactsFile names a stored archive as the job payload shows it.
type ArtifactsFile struct {
	Filename string `json:"filename"`
	Size     int64  `json:"size"`
}

// hasArtifacts reports whether a job declares anything to upload: only such a job can ever
// have a file for a dependent job to download.
func hasArtifacts(j JobDefinition) bool { return len(j.Artifacts) > 0 }

// defaultDependencies applies GitLab's default to the jobs that do not declare
// `dependencies` (Ci::BuildDependencies): a job with `needs` downloads the artifacts of the
// needed jobs it asks them of (needs:artifacts, true by default); any other job those of
// every job of an earlier stage. Jobs without artifacts are left out: they have nothing to
// download, and a job whose dependencies are empty costs its claim nothing.
//
// The stage default is a flag, not a list of names: in a pipeline of thousands of jobs with
// artifacts, a name list per job would grow with the square of the pipeline. The claim
// finds those jobs itself (the latest attempts of earlier stages that declare artifacts).
func (d *PipelineDefinition) defaultDependencies() {
	withArtifacts := make(map[string]bool)
	firstStage := len(d.Stages) // the earliest stage holding a job with artifacts
	for _, j := range d.Jobs {
		if hasArtifacts(j) {
			withArtifacts[j.Name] = true
			firstStage = min(firstStage, d.StageIndex(j.Stage))
		}
	}
	for i := range d.Jobs {
		j := &d.Jobs[i]
		if j.DependenciesDeclared {
			continue
		}
		j.Dependencies, j.DependsOnStages = nil, false
		if j.NeedsDeclared {
			for _, n := range j.Needs {
				if n.Artifacts && withArtifacts[n.Job] {
					j.Dependencies = append(j.Dependencies, n.Job)
				}
			}
			continue
		}
		j.DependsOnStages = d.StageIndex(j.Stage) > firstStage
	}
}
