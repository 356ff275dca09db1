package downstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/artifacts"
	"github.com/jobapi/jobapi/ciconfig"
)

// parentArtifacts answers a child's include: artifact (a dynamic child pipeline) from the
// artifacts archives of its parent pipeline's jobs, as GitLab's External::File::Artifact
// and ArtifactFileReader do: the job's latest successful attempt, the file read out of its
// zip archive. What the user can fix is an *ciconfig.IncludeError (the bridge fails with
// the message); a store or Postgres failure is another error (the bridge stays pending).
type parentArtifacts struct {
	ctx      context.Context
	svc      *builds.Service
	arts     *artifacts.Service
	pipeline builds.Pipeline // the parent; its builds are read on the first include
	loaded   bool
}

func (p *parentArtifacts) Artifact(job, path string) ([]byte, error) {
	if !p.loaded {
		full, err := p.svc.Pipeline(p.ctx, p.pipeline.ProjectID, p.pipeline.ID)
		if err != nil {
			return nil, fmt.Errorf("read the parent pipeline %d: %w", p.pipeline.ID, err)
		}
		p.pipeline, p.loaded = full, true
	}
	var gen *builds.Build
	for i, b := range p.pipeline.Builds {
		if b.Name == job && b.Status == builds.StatusSuccess && (gen == nil || b.Attempt > gen.Attempt) {
			gen = &p.pipeline.Builds[i]
		}
	}
	notFound := &ciconfig.IncludeError{Message: fmt.Sprintf("Job `%s` not found in parent pipeline or does not have artifacts!", job)}
	if gen == nil {
		return nil, notFound
	}
	archive, err := p.arts.JobArchive(p.ctx, gen.ProjectID, gen.ID)
	if errors.Is(err, builds.ErrNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, fmt.Errorf("artifacts of job %d: %w", gen.ID, err)
	}
	b, err := p.arts.ReadArchiveFile(p.ctx, archive, path, ciconfig.MaxConfigBytes)
	switch {
	case errors.Is(err, builds.ErrNotFound):
		return nil, &ciconfig.IncludeError{Message: fmt.Sprintf("Path `%s` does not exist inside the `%s` artifacts archive!", path, job)}
	case errors.Is(err, artifacts.ErrArchiveFileTooLarge):
		return nil, &ciconfig.IncludeError{Message: fmt.Sprintf("the file in the `%s` artifacts archive is larger than %d bytes (1 MiB)", job, ciconfig.MaxConfigBytes)}
	case errors.Is(err, artifacts.ErrArchiveInvalid):
		return nil, &ciconfig.IncludeError{Message: fmt.Sprintf("Job `%s` has missing artifacts metadata and cannot be extracted!", job)}
	case err != nil:
		// The store is down or slow: this pass cannot read it; a later one will.
		return nil, fmt.Errorf("read %s out of the archive of job %d: %w", path, gen.ID, err)
	}
	return b, nil
}
