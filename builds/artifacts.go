package builds

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Job artifacts, as gitlab-runner uploads them (POST /jobs/:id/artifacts) and
// downloads them for a dependent job (GET /jobs/:id/artifacts). The bytes stream through to
// the ObjectStore, never held whole: under a key no row names yet, registered for cleanup
// before the first byte, and the row is committed last, in the transaction that takes the
// key off the cleanup list. So an upload that fails, is cut off, or dies with its replica
// leaves no artifact, and its object is removed by the next artifacts pass once the upload
// could no longer be running.

// Artifact formats (artifact_format), as GitLab accepts them.
const (
	ArtifactFormatZip  = "zip"
	ArtifactFormatGzip = "gzip"
	ArtifactFormatRaw  = "raw"
)

// ArtifactTypeArchive is the job's archive (artifacts:paths), the one dependencies download.
const ArtifactTypeArchive = "archive"

// ArtifactTypes are GitLab's artifact types (Ci::JobArtifact file_types): the archive, its
// metadata, and the reports.
var ArtifactTypes = []string{ArtifactTypeArchive, "metadata", "trace", "junit", "sast", "dependency_scanning",
	"container_scanning", "dast", "codequality", "license_scanning", "performance", "metrics", "metrics_referee",
	"network_referee", "lsif", "dotenv", "cobertura", "terraform", "accessibility", "cluster_applications",
	"secret_detection", "requirements", "coverage_fuzzing", "browser_performance", "load_performance",
	"api_fuzzing", "cluster_image_scanning", "cyclonedx", "requirements_v2", "annotations", "repository_xray", "jacoco"}

// Artifact is one stored file of a job: its archive or one of its reports.
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

// ErrArtifactsNotAccessible refuses an operator's download of an artifact whose job says
// artifacts:access: none (a 403).
var ErrArtifactsNotAccessible = errors.New("the job's artifacts cannot be downloaded: its artifacts:access is none (only the runners of the jobs that depend on it may fetch them)")

// ArtifactUpload is a runner's POST /jobs/:id/artifacts.
type ArtifactUpload struct {
	JobID int64
	Token string
	// Type and Format are artifact_type and artifact_format ("": archive and zip).
	Type, Format string
	// ExpireIn is expire_in ("": the default, JOBAPI_DEFAULT_ARTIFACTS_EXPIRE_IN).
	ExpireIn string
	// Filename is the multipart file's name.
	Filename string
	// Body streams the file.
	Body io.Reader
}

// ArtifactTooLargeError refuses an upload past the size limit (a 413).
type ArtifactTooLargeError struct{ Limit int64 }

func (e *ArtifactTooLargeError) Error() string {
	return fmt.Sprintf("artifact larger than the limit of %d bytes", e.Limit)
}

// ErrArtifactExists: the job already has an artifact of this type, with other bytes.
var ErrArtifactExists = errors.New("another artifact of the same type already exists")

// ErrUploadExpired: an upload took so long that its object was cleaned up before its row
// could be committed.
var ErrUploadExpired = errors.New("the upload took longer than the upload timeout")

// ArtifactStore keeps artifact rows and the list of objects to clean up (Postgres).
type ArtifactStore interface {
	// BeginUpload lists key for cleanup at due: until the upload commits, its object is
	// garbage once due.
	BeginUpload(ctx context.Context, key string, due time.Time) error
	// CommitArtifact inserts a and takes a.ObjectKey off the cleanup list, in one
	// transaction. When the build has an artifact of the type already it inserts nothing,
	// makes a.ObjectKey due at once and returns the existing artifact (created false) if
	// its SHA-256 is a's, else ErrArtifactExists. ErrUploadExpired when the key is no longer
	// listed (the cleanup took it).
	CommitArtifact(ctx context.Context, a Artifact) (stored Artifact, created bool, err error)
	// ForgetObject takes key off the cleanup list: its object is gone.
	ForgetObject(ctx context.Context, key string) error
	// DiscardUpload makes key due at once: its upload is over and its object, whatever the
	// store kept of it, can go with the next pass.
	DiscardUpload(ctx context.Context, key string) error
	// Artifacts lists a build's artifacts, archive first.
	Artifacts(ctx context.Context, buildID int64) ([]Artifact, error)
	// ArtifactsOf lists the artifacts of several builds, by build, archive first.
	ArtifactsOf(ctx context.Context, buildIDs []int64) (map[int64][]Artifact, error)
	// DependencyArtifact returns the archive of build id for the running build whose job
	// token hashes to tokenHash, with both builds. ErrNotFound when no running build has
	// the token; the caller decides from the builds what else to refuse.
	DependencyArtifact(ctx context.Context, id int64, tokenHash []byte) (DependencyDownload, error)
	// DeleteArtifacts removes a build's artifacts, but its archived log (as GitLab's
	// DELETE …/artifacts), and queues their objects for cleanup.
	DeleteArtifacts(ctx context.Context, buildID int64) ([]Artifact, error)
	// ExpireArtifacts deletes up to limit artifacts expired at now, except those of the
	// latest successful pipeline of their ref, queueing their objects; it returns how many
	// and their bytes. Safe on every replica (SKIP LOCKED).
	ExpireArtifacts(ctx context.Context, now time.Time, limit int) (n int, bytes int64, err error)
	// CleanObjects takes up to limit objects due at now, calls remove for each, and drops
	// those removed from the list; it returns how many. Safe on every replica (SKIP LOCKED).
	CleanObjects(ctx context.Context, now time.Time, limit int, remove func(key string) error) (int, error)
	// ArtifactTotals counts the stored artifacts and their bytes.
	ArtifactTotals(ctx context.Context) (n int64, bytes int64, err error)
}

// DependencyDownload is what a dependency download needs: the running build whose token
// came (Dependent), the build asked for (Build, nil when it does not exist) and its archive
// (nil when it has none).
type DependencyDownload struct {
	Dependent Build
	Build     *Build
	Archive   *Artifact
}

// uploadCleanupSlack is added to the upload timeout before an unfinished upload's object
// is due: the body deadline ends the upload first.
const uploadCleanupSlack = time.Minute

// validArtifactFormat reports whether GitLab accepts format.
func validArtifactFormat(format string) bool {
	return format == ArtifactFormatZip || format == ArtifactFormatGzip || format == ArtifactFormatRaw
}

// runningJob checks a runner's job token for a call made while the job runs (an upload):
// 403 for a wrong token, and with Job-Status for a job no longer running.
func (s *Service) runningJob(ctx context.Context, id int64, token string) (Build, error) {
	b, err := s.jobForToken(ctx, id, token)
	if err != nil {
		return Build{}, err
	}
	if b.Status != StatusRunning && b.Status != StatusCanceling {
		return Build{}, &JobForbiddenError{Cause: NotRunning, Status: b.Status}
	}
	return b, nil
}

// UploadArtifact stores a runner's upload: the token's job must be on its runner; the file
// streams to the object store with its size limited, its SHA-256 taken and its archive
// checksums verified on the way; the row is committed last.
func (s *Service) UploadArtifact(ctx context.Context, u ArtifactUpload) (Artifact, error) {
	if s.objects == nil || s.artifacts == nil {
		return Artifact{}, fmt.Errorf("artifacts: no object store configured: %w", ErrUnavailable)
	}
	b, err := s.runningJob(ctx, u.JobID, u.Token)
	if err != nil {
		return Artifact{}, err
	}
	a, expire, err := s.newArtifact(b, u)
	if err != nil {
		return Artifact{}, err
	}
	now := s.now()
	a.CreatedAt, a.ExpireAt = now, expire.At(now)
	if err := s.artifacts.BeginUpload(ctx, a.ObjectKey, now.Add(s.cfg.ArtifactUploadTimeout+uploadCleanupSlack)); err != nil {
		return Artifact{}, fmt.Errorf("register upload of %s: %w", a.ObjectKey, err)
	}
	body := &uploadReader{r: u.Body, limit: s.cfg.MaxArtifactSize, sum: sha256.New(), check: newArchiveCheck(a.FileFormat)}
	n, err := s.objects.Put(ctx, a.ObjectKey, body)
	if err == nil && body.check != nil {
		err = body.check.Close()
	}
	if err != nil {
		if body.check != nil {
			body.check.Abort()
		}
		s.discardUpload(ctx, a.ObjectKey)
		return Artifact{}, err
	}
	a.Size, a.SHA256 = n, body.sum.Sum(nil)
	stored, created, err := s.artifacts.CommitArtifact(ctx, a)
	if err != nil || !created {
		// The object is not needed: its cleanup row is due (or, when the commit failed,
		// due after the upload timeout); delete it now rather than on the next pass.
		s.discardUpload(ctx, a.ObjectKey)
	}
	return stored, err
}

// newArtifact checks an upload's parameters and names its object.
func (s *Service) newArtifact(b Build, u ArtifactUpload) (Artifact, ExpireIn, error) {
	a := Artifact{BuildID: b.ID, ProjectID: b.ProjectID, PipelineID: b.PipelineID, FileType: u.Type, FileFormat: u.Format,
		Access: ArtifactAccessAll}
	if a.FileType == "" {
		a.FileType = ArtifactTypeArchive
	}
	// access is the job's (every artifact of it); expose_as the archive's.
	for _, spec := range b.Payload.Artifacts {
		if spec.Access != "" {
			a.Access = spec.Access
		}
		if spec.ArtifactType == ArtifactTypeArchive && a.FileType == ArtifactTypeArchive {
			a.ExposeAs = spec.ExposeAs
		}
	}
	if a.FileFormat == "" {
		a.FileFormat = ArtifactFormatZip
	}
	if !slices.Contains(ArtifactTypes, a.FileType) {
		return a, ExpireIn{}, invalid("artifact_type %q is not one of GitLab's artifact types (archive, junit, dotenv, …)", clipText(a.FileType, 64))
	}
	if a.FileType == ArtifactTypeTrace {
		// The log is the server's own record of what the runner sent, archived at finish.
		return a, ExpireIn{}, invalid("artifact_type trace is the job log, which jobapi archives itself; upload it with the trace API")
	}
	if !validArtifactFormat(a.FileFormat) {
		return a, ExpireIn{}, invalid("artifact_format %q: want zip, gzip or raw", clipText(a.FileFormat, 64))
	}
	if a.FileType == ArtifactTypeArchive && a.FileFormat != ArtifactFormatZip {
		return a, ExpireIn{}, invalid("an archive artifact must be a zip (artifact_format=zip), got %q", a.FileFormat)
	}
	expire := s.cfg.ArtifactsExpireIn
	if u.ExpireIn != "" {
		e, err := ParseExpireIn(u.ExpireIn)
		if err != nil {
			return a, ExpireIn{}, invalid("%s", err.Error())
		}
		expire = e
	}
	name, err := artifactFilename(u.Filename, a.FileType, a.FileFormat)
	if err != nil {
		return a, ExpireIn{}, err
	}
	a.Filename = name
	a.ObjectKey = fmt.Sprintf("artifacts/%d/%d/%s-%s", b.ProjectID, b.ID, a.FileType, randomKey())
	return a, expire, nil
}

// artifactFilename is the uploaded file's base name, or the runner's default for the type.
func artifactFilename(name, fileType, format string) (string, error) {
	name = path.Base(strings.ReplaceAll(name, "\\", "/"))
	if name == "." || name == "/" || name == "" {
		name = fileType
		switch format {
		case ArtifactFormatZip:
			name += ".zip"
		case ArtifactFormatGzip:
			name += ".gz"
		}
	}
	if len(name) > 255 || !utf8.ValidString(name) || strings.ContainsAny(name, "\x00\r\n\"") {
		return "", invalid("the file name must be at most 255 bytes of UTF-8 without quotes or line breaks")
	}
	return name, nil
}

// randomKey makes each upload's object key unique: a retried upload never writes where an
// earlier, maybe still running, attempt does.
func randomKey() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// discardUpload removes an object no row needs (a failed or redundant upload, a deleted
// artifact) now, and takes it off the cleanup list; what fails here the artifacts pass
// removes when the key is due.
func (s *Service) discardUpload(ctx context.Context, key string) {
	ctx = context.WithoutCancel(ctx) // a client that went away still leaves no object
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.objects.Delete(ctx, key); err != nil {
		s.log.WarnContext(ctx, "object not deleted; the next artifacts pass will", "key", key, "error", err)
		if err := s.artifacts.DiscardUpload(ctx, key); err != nil {
			s.log.WarnContext(ctx, "object not marked for the next pass; it goes once its upload timeout passed", "key", key, "error", err)
		}
		return
	}
	if err := s.artifacts.ForgetObject(ctx, key); err != nil {
		s.log.WarnContext(ctx, "deleted object still listed for cleanup; the artifacts pass will drop it", "key", key, "error", err)
	}
}

// uploadReader is an upload's body on its way to the store: it refuses bytes past the
// limit, takes the SHA-256 and feeds the archive check.
type uploadReader struct {
	r     io.Reader
	limit int64
	n     int64
	sum   hash.Hash
	check *archiveCheck
}

func (u *uploadReader) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	u.n += int64(n)
	if u.limit > 0 && u.n > u.limit {
		return 0, &ArtifactTooLargeError{Limit: u.limit}
	}
	u.sum.Write(p[:n])
	if u.check != nil && n > 0 {
		if _, cerr := u.check.Write(p[:n]); cerr != nil {
			return 0, cerr
		}
	}
	return n, err
}

// DependencyArtifact authorises a runner's download of job id's archive for a dependent
// job, which sends its own job token (GitLab's dependency token): the token's job must be
// running, in the same pipeline, and depend on job id. *JobForbiddenError (403) otherwise;
// ErrNotFound (404) when job id has no archive.
func (s *Service) DependencyArtifact(ctx context.Context, id int64, token string) (Artifact, error) {
	if s.artifacts == nil {
		return Artifact{}, ErrNotFound
	}
	if token == "" || len(token) > 256 {
		return Artifact{}, &JobForbiddenError{Cause: InvalidJobToken}
	}
	d, err := s.artifacts.DependencyArtifact(ctx, id, HashToken(token))
	if errors.Is(err, ErrNotFound) {
		return Artifact{}, &JobForbiddenError{Cause: InvalidJobToken}
	}
	if err != nil {
		return Artifact{}, err
	}
	switch {
	case d.Build == nil:
		return Artifact{}, ErrNotFound
	case d.Build.PipelineID != d.Dependent.PipelineID:
		return Artifact{}, &JobForbiddenError{Cause: NotADependency}
	case !dependsOn(d.Dependent, *d.Build):
		return Artifact{}, &JobForbiddenError{Cause: NotADependency}
	case d.Archive == nil:
		return Artifact{}, ErrNotFound
	}
	return *d.Archive, nil
}

// dependsOn reports whether job b may download dep's artifacts: those its payload lists as
// dependencies (named in `dependencies`, or asked of `needs`), and with GitLab's stage
// default (Payload.DependsOnStages) those of every earlier stage's job that declares
// artifacts; the claim resolves the job payload's `dependencies` by the same rule.
func dependsOn(b, dep Build) bool {
	if b.ID == dep.ID {
		return false
	}
	if slices.Contains(b.Payload.Dependencies, dep.Name) {
		return true
	}
	return b.Payload.DependsOnStages && dep.StageIdx < b.StageIdx && len(dep.Payload.Artifacts) > 0
}

// DirectDownloadExpiry is how long the URL of a direct download stays valid: the runner
// follows the redirect at once, and a download under way outlives it.
const DirectDownloadExpiry = 5 * time.Minute

// ArtifactURL returns a URL of a's object that the store itself serves for
// DirectDownloadExpiry, or "" when the store cannot presign (the directory store: the
// download then goes through jobapi).
func (s *Service) ArtifactURL(ctx context.Context, a Artifact) (string, error) {
	p, ok := s.objects.(ObjectPresigner)
	if !ok {
		return "", nil
	}
	u, err := p.PresignGet(ctx, a.ObjectKey, a.Filename, DirectDownloadExpiry)
	if err != nil {
		return "", fmt.Errorf("presign the download of %s: %w", a.ObjectKey, err)
	}
	return u, nil
}

// OpenArtifact reads length bytes of a's object from offset (length < 0: to the end).
func (s *Service) OpenArtifact(ctx context.Context, a Artifact, offset, length int64) (io.ReadCloser, error) {
	if s.objects == nil {
		return nil, ErrNotFound
	}
	return s.objects.Open(ctx, a.ObjectKey, offset, length)
}

// JobArtifacts lists a project's job's artifacts, archive first.
func (s *Service) JobArtifacts(ctx context.Context, projectID, id int64) ([]Artifact, error) {
	if _, err := s.job(ctx, projectID, id); err != nil {
		return nil, err
	}
	if s.artifacts == nil {
		return nil, nil
	}
	return s.artifacts.Artifacts(ctx, id)
}

// WithArtifacts fills the artifacts of job views (a page of a listing) in one read; a view
// without any gets an empty list.
func (s *Service) WithArtifacts(ctx context.Context, views []JobView) error {
	if len(views) == 0 {
		return nil
	}
	byBuild := map[int64][]Artifact{}
	if s.artifacts != nil {
		ids := make([]int64, len(views))
		for i, v := range views {
			ids[i] = v.ID
		}
		var err error
		if byBuild, err = s.artifacts.ArtifactsOf(ctx, ids); err != nil {
			return err
		}
	}
	for i := range views {
		views[i].Artifacts = byBuild[views[i].ID]
		if views[i].Artifacts == nil {
			views[i].Artifacts = []Artifact{}
		}
	}
	return nil
}

// ExposedArtifacts returns the archives a pipeline's latest jobs expose
// (artifacts:expose_as), in the order of p.Builds, read in one go.
func (s *Service) ExposedArtifacts(ctx context.Context, p Pipeline) ([]Artifact, error) {
	var ids []int64
	for _, b := range p.Builds {
		if b.RetriedBy != 0 {
			continue
		}
		for _, spec := range b.Payload.Artifacts {
			if spec.ArtifactType == ArtifactTypeArchive && spec.ExposeAs != "" {
				ids = append(ids, b.ID)
				break
			}
		}
	}
	if len(ids) == 0 || s.artifacts == nil {
		return nil, nil
	}
	byBuild, err := s.artifacts.ArtifactsOf(ctx, ids)
	if err != nil {
		return nil, err
	}
	var out []Artifact
	for _, id := range ids {
		for _, a := range byBuild[id] {
			if a.FileType == ArtifactTypeArchive && a.ExposeAs != "" {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// DownloadableArchive is JobArchive for an operator's download: ErrArtifactsNotAccessible
// when the job's artifacts:access is none.
func (s *Service) DownloadableArchive(ctx context.Context, projectID, id int64) (Artifact, error) {
	a, err := s.JobArchive(ctx, projectID, id)
	if err == nil && a.Access == ArtifactAccessNone {
		return Artifact{}, ErrArtifactsNotAccessible
	}
	return a, err
}

// JobArchive returns a project's job's archive artifact; ErrNotFound when it has none.
func (s *Service) JobArchive(ctx context.Context, projectID, id int64) (Artifact, error) {
	as, err := s.JobArtifacts(ctx, projectID, id)
	if err != nil {
		return Artifact{}, err
	}
	for _, a := range as {
		if a.FileType == ArtifactTypeArchive {
			return a, nil
		}
	}
	return Artifact{}, ErrNotFound
}

// DeleteJobArtifacts deletes a project's job's artifacts for actor; their objects go with
// the next artifacts pass, or at once when the store answers.
func (s *Service) DeleteJobArtifacts(ctx context.Context, projectID, id int64, actor string) error {
	if _, err := s.JobArtifacts(ctx, projectID, id); err != nil {
		return err
	}
	if s.artifacts == nil {
		return nil
	}
	deleted, err := s.artifacts.DeleteArtifacts(ctx, id)
	if err != nil {
		return err
	}
	var bytes int64
	for _, a := range deleted {
		bytes += a.Size
		s.discardUpload(ctx, a.ObjectKey)
	}
	s.audit(ctx, actor, "job_artifacts_deleted", "job:"+strconv.FormatInt(id, 10),
		map[string]any{"artifacts": len(deleted), "bytes": bytes})
	return nil
}
