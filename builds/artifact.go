package builds

import (
	"errors"
	"time"
)

// The stored files of a job as the core knows them: what a job view lists and what a job's
// archived log is. Uploading, downloading, listing and expiring them is package
// builds/artifacts.

// Artifact formats (artifact_format), as GitLab accepts them.
const (
	ArtifactFormatZip  = "zip"
	ArtifactFormatGzip = "gzip"
	ArtifactFormatRaw  = "raw"
)

// ArtifactTypeArchive is the job's archive (artifacts:paths), the one dependencies download.
const ArtifactTypeArchive = "archive"

// Artifact is one stored file of a job: its archive, one of its reports, or its log.
type Artifact struct {
	ID         int64
	BuildID    int64
	ProjectID  int64
	PipelineID int64
	FileType   string
	FileFormat string
	Filename   string
	Size       int64
	SHA256     []byte
	ObjectKey  string
	CreatedAt  time.Time
	ExpireAt   *time.Time // nil: kept until deleted
	// Access is who may download it through the operator API and the web UI, from the
	// job's artifacts:access when it was uploaded: all, developer (public: false) or none.
	// The runners of dependent jobs always may (GitLab's rule).
	Access string
	// ExposeAs is the archive's artifacts:expose_as label ("" when not exposed).
	ExposeAs string
}

// artifacts:access values (GitLab's ALLOWED_ACCESS); jobapi's operators are project
// maintainers, so all and developer let them download and none lets no one but runners.
const (
	ArtifactAccessAll       = "all"
	ArtifactAccessDeveloper = "developer"
	ArtifactAccessNone      = "none"
)

// ErrUploadExpired: an upload took so long that its object was cleaned up before its row
// could be committed.
var ErrUploadExpired = errors.New("the upload took longer than the upload timeout")
