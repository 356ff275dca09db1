package builds

import "slices"

// Dependency is a job whose artifacts a claimed build downloads: the latest attempt of a job
// its payload names (Payload.Dependencies) or of an earlier stage's job with artifacts
// (Payload.DependsOnStages), in the same pipeline. The claim resolves them.
type Dependency struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	// ArtifactsFile is the job's archive; nil while none is stored (not uploaded yet,
	// expired, deleted), and gitlab-runner skips a dependency without one
	// (shells/abstract.go jobArtifacts).
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
// every job of an earlier stage. Jobs without artifacts are left out, of declared lists too:
// they have nothing to download (the runner would skip them), and a job whose dependencies
// end up empty costs its claim nothing.
//
// The stage default is a flag, not a list of names: in a pipeline of thousands of jobs with
// artifacts, a name list per job grows with the square of the pipeline. The claim finds
// those jobs itself (the latest attempts of earlier stages that declare artifacts). A
// declared list that names exactly those jobs (the YAML compiler resolves the default so)
// becomes the flag as well.
func (d *PipelineDefinition) defaultDependencies() {
	stageIdx := make(map[string]int, len(d.Stages))
	for i, st := range d.Stages {
		stageIdx[st] = i
	}
	// The jobs with artifacts, numbered, with their stages; earlier[s] counts those in the
	// stages before s.
	type artifactJob struct{ n, stage int }
	withArtifacts := make(map[string]artifactJob)
	earlier := make([]int, len(d.Stages)+1)
	for _, j := range d.Jobs {
		if hasArtifacts(j) {
			withArtifacts[j.Name] = artifactJob{n: len(withArtifacts), stage: stageIdx[j.Stage]}
			earlier[stageIdx[j.Stage]+1]++
		}
	}
	for s := 1; s < len(earlier); s++ {
		earlier[s] += earlier[s-1]
	}
	// seen[n] == i+1 once job i's list named artifact job n: no allocation per job.
	seen := make([]int, len(withArtifacts))
	for i := range d.Jobs {
		j := &d.Jobs[i]
		stage := stageIdx[j.Stage]
		named := j.Dependencies
		switch {
		case j.DependsOnStages: // normalized before
			j.Dependencies, j.DependsOnStages = nil, earlier[stage] > 0
			continue
		case j.DependenciesDeclared:
		case j.NeedsDeclared:
			named = nil
			for _, n := range j.Needs {
				if n.Artifacts {
					named = append(named, n.Job)
				}
			}
		default:
			j.Dependencies, j.DependsOnStages = nil, earlier[stage] > 0
			continue
		}
		var kept []string
		distinctEarlier := 0
		for _, name := range named {
			a, ok := withArtifacts[name]
			if !ok || seen[a.n] == i+1 { // no artifacts, or named already (the claim would find it once)
				continue
			}
			seen[a.n] = i + 1
			kept = append(kept, name)
			if a.stage < stage {
				distinctEarlier++
			}
		}
		j.Dependencies, j.DependsOnStages = kept, false
		if !j.NeedsDeclared && distinctEarlier > 0 && len(kept) == distinctEarlier && distinctEarlier == earlier[stage] {
			j.Dependencies, j.DependsOnStages = nil, true
		}
	}
}

// DependsOn reports whether job b may download dep's artifacts: those its payload lists as
// dependencies (named in `dependencies`, or asked of `needs`), and with GitLab's stage
// default (Payload.DependsOnStages) those of every earlier stage's job that declares
// artifacts; the claim resolves the job payload's `dependencies` by the same rule.
func (b Build) DependsOn(dep Build) bool {
	if b.ID == dep.ID {
		return false
	}
	if slices.Contains(b.Payload.Dependencies, dep.Name) {
		return true
	}
	return b.Payload.DependsOnStages && dep.StageIdx < b.StageIdx && len(dep.Payload.Artifacts) > 0
}
