package artifacts

import (
	"context"
	"crypto/sha256"
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

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/secrettoken"
)

// Job artifacts, as gitlab-runner uploads them (POST /jobs/:id/artifacts) and
// downloads them for a dependent job (GET /jobs/:id/artifacts). The bytes stream through to
// the ObjectStore, never held whole: under a key no row names yet, registered for cleanup
// before the first byte, and the row is committed last, in the transaction that takes the
// key off the cleanup list. So an upload that fails, is cut off, or dies with its replica
// leaves no artifact, and its object is removed by the next artifacts pass once the upload
// could no longer be running.

// Types are GitLab's artifact types (Ci::JobArtifact file_types): the archive, its
// metadata, and the reports.
var Types = []string{builds.ArtifactTypeArchive, "metadata", builds.ArtifactTypeTrace, "junit", "sast", "dependency_scanning",
	"container_scanning", "dast", "codequality", "license_scanning", "performance", "metrics", "metrics_referee",
	"network_referee", "lsif", "dotenv", "cobertura", "terraform", "accessibility", "cluster_applications",
	"secret_detection", "requirements", "coverage_fuzzing", "browser_performance", "load_performance",
	"api_fuzzing", "cluster_image_scanning", "cyclonedx", "requirements_v2", "annotations", "repository_xray", "jacoco"}

// ErrNotAccessible refuses an operator's download of an artifact whose job says
// artifacts:access: none (a 403).
var ErrNotAccessible = errors.New("the job's artifacts cannot be downloaded: its artifacts:access is none (only the runners of the jobs that depend on it may fetch them)")

// Upload is a runner's POST /jobs/:id/artifacts.
type Upload struct {
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

// TooLargeError refuses an upload past the size limit (a 413).
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("artifact larger than the limit of %d bytes", e.Limit)
}

// ErrExists: the job already has an artifact of this type, with other bytes.
var ErrExists = errors.New("another artifact of the same type already exists")

// Store keeps artifact rows and, through builds.ObjectCleanup, the list of objects to
// clean up (Postgres).
type Store interface {
	builds.ObjectCleanup
	// CommitArtifact inserts a and takes a.ObjectKey off the cleanup list, in one
	// transaction. When the build has an artifact of the type already it inserts nothing,
	// makes a.ObjectKey due at once and returns the existing artifact (created false) if
	// its SHA-256 is a's, else ErrExists. builds.ErrUploadExpired when the key is no longer
	// listed (the cleanup took it).
	CommitArtifact(ctx context.Context, a builds.Artifact) (stored builds.Artifact, created bool, err error)
	// Artifacts lists a build's artifacts, archive first.
	Artifacts(ctx context.Context, buildID int64) ([]builds.Artifact, error)
	// ArtifactsOf lists the artifacts of several builds, by build, archive first.
	ArtifactsOf(ctx context.Context, buildIDs []int64) (map[int64][]builds.Artifact, error)
	// DependencyArtifact returns the archive of build id for the running build whose job
	// token hashes to tokenHash, with both builds. builds.ErrNotFound when no running build
	// has the token; the caller decides from the builds what else to refuse.
	DependencyArtifact(ctx context.Context, id int64, tokenHash []byte) (DependencyDownload, error)
	// DeleteArtifacts removes a build's artifacts, but its archived log (as GitLab's
	// DELETE …/artifacts), and queues their objects for cleanup.
	DeleteArtifacts(ctx context.Context, buildID int64) ([]builds.Artifact, error)
	// ExpireArtifacts deletes up to limit artifacts expired at now, except those of the
	// latest successful pipeline of their ref, queueing their objects; it returns how many
	// and their bytes. Safe on every replica (SKIP LOCKED).
	ExpireArtifacts(ctx context.Context, now time.Time, limit int) (n int, bytes int64, err error)
	// ArtifactTotals counts the stored artifacts and their bytes.
	ArtifactTotals(ctx context.Context) (n int64, bytes int64, err error)
}

// DependencyDownload is what a dependency download needs: the running build whose token
// came (Dependent), the build asked for (Build, nil when it does not exist) and its archive
// (nil when it has none).
type DependencyDownload struct {
	Dependent builds.Build
	Build     *builds.Build
	Archive   *builds.Artifact
}

// validFormat reports whether GitLab accepts format.
func validFormat(format string) bool {
	return format == builds.ArtifactFormatZip || format == builds.ArtifactFormatGzip || format == builds.ArtifactFormatRaw
}

// UploadArtifact stores a runner's upload: the token's job must be on its runner; the file
// streams to the object store with its size limited, its SHA-256 taken and its archive
// checksums verified on the way; the row is committed last.
func (s *Service) UploadArtifact(ctx context.Context, u Upload) (builds.Artifact, error) {
	b, err := s.builds.RunningJob(ctx, u.JobID, u.Token)
	if err != nil {
		return builds.Artifact{}, err
	}
	a, expire, err := s.newArtifact(b, u)
	if err != nil {
		return builds.Artifact{}, err
	}
	now := s.now()
	a.CreatedAt, a.ExpireAt = now, expire.At(now)
	if err := s.store.BeginUpload(ctx, a.ObjectKey, now.Add(s.cfg.UploadTimeout+builds.UploadCleanupSlack)); err != nil {
		return builds.Artifact{}, fmt.Errorf("register upload of %s: %w", a.ObjectKey, err)
	}
	body := &uploadReader{r: u.Body, limit: s.cfg.MaxSize, sum: sha256.New(), check: newArchiveCheck(a.FileFormat)}
	n, err := s.objects.Put(ctx, a.ObjectKey, body)
	if err == nil && body.check != nil {
		err = body.check.Close()
	}
	if err != nil {
		if body.check != nil {
			body.check.Abort()
		}
		s.discard(ctx, a.ObjectKey)
		return builds.Artifact{}, err
	}
	a.Size, a.SHA256 = n, body.sum.Sum(nil)
	stored, created, err := s.store.CommitArtifact(ctx, a)
	if err != nil || !created {
		// The object is not needed: its cleanup row is due (or, when the commit failed,
		// due after the upload timeout); delete it now rather than on the next pass.
		s.discard(ctx, a.ObjectKey)
	}
	return stored, err
}

// newArtifact checks an upload's parameters and names its object.
func (s *Service) newArtifact(b builds.Build, u Upload) (builds.Artifact, ExpireIn, error) {
	a := builds.Artifact{BuildID: b.ID, ProjectID: b.ProjectID, PipelineID: b.PipelineID, FileType: u.Type, FileFormat: u.Format,
		Access: builds.ArtifactAccessAll}
	if a.FileType == "" {
		a.FileType = builds.ArtifactTypeArchive
	}
	// access is the job's (every artifact of it); expose_as the archive's.
	for _, spec := range b.Payload.Artifacts {
		if spec.Access != "" {
			a.Access = spec.Access
		}
		if spec.ArtifactType == builds.ArtifactTypeArchive && a.FileType == builds.ArtifactTypeArchive {
			a.ExposeAs = spec.ExposeAs
		}
	}
	if a.FileFormat == "" {
		a.FileFormat = builds.ArtifactFormatZip
	}
	if !slices.Contains(Types, a.FileType) {
		return a, ExpireIn{}, invalid("artifact_type %q is not one of GitLab's artifact types (archive, junit, dotenv, …)", clipText(a.FileType, 64))
	}
	if a.FileType == builds.ArtifactTypeTrace {
		// The log is the server's own record of what the runner sent, archived at finish.
		return a, ExpireIn{}, invalid("artifact_type trace is the job log, which jobapi archives itself; upload it with the trace API")
	}
	if !validFormat(a.FileFormat) {
		return a, ExpireIn{}, invalid("artifact_format %q: want zip, gzip or raw", clipText(a.FileFormat, 64))
	}
	if a.FileType == builds.ArtifactTypeArchive && a.FileFormat != builds.ArtifactFormatZip {
		return a, ExpireIn{}, invalid("an archive artifact must be a zip (artifact_format=zip), got %q", a.FileFormat)
	}
	expire := s.cfg.ExpireIn
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
	a.ObjectKey = fmt.Sprintf("artifacts/%d/%d/%s-%s", b.ProjectID, b.ID, a.FileType, builds.ObjectKeyTag())
	return a, expire, nil
}

// invalid is a builds.ValidationError: a 400 whose message is for the client as it is.
func invalid(format string, args ...any) error {
	return &builds.ValidationError{Msg: fmt.Sprintf(format, args...)}
}

// artifactFilename is the uploaded file's base name, or the runner's default for the type.
func artifactFilename(name, fileType, format string) (string, error) {
	name = path.Base(strings.ReplaceAll(name, "\\", "/"))
	if name == "." || name == "/" || name == "" {
		name = fileType
		switch format {
		case builds.ArtifactFormatZip:
			name += ".zip"
		case builds.ArtifactFormatGzip:
			name += ".gz"
		}
	}
	if len(name) > 255 || !utf8.ValidString(name) || strings.ContainsAny(name, "\x00\r\n\"") {
		return "", invalid("the file name must be at most 255 bytes of UTF-8 without quotes or line breaks")
	}
	return name, nil
}

// discard removes an object no row needs (a failed or redundant upload, a deleted
// artifact) now, and takes it off the cleanup list (builds.DiscardObject).
func (s *Service) discard(ctx context.Context, key string) {
	builds.DiscardObject(ctx, s.objects, s.store, s.log, key)
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
		return 0, &TooLargeError{Limit: u.limit}
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
// running, in the same pipeline, and depend on job id. *builds.JobForbiddenError (403)
// otherwise; builds.ErrNotFound (404) when job id has no archive.
func (s *Service) DependencyArtifact(ctx context.Context, id int64, token string) (builds.Artifact, error) {
	if token == "" || len(token) > 256 {
		return builds.Artifact{}, &builds.JobForbiddenError{Cause: builds.InvalidJobToken}
	}
	d, err := s.store.DependencyArtifact(ctx, id, secrettoken.Hash(token))
	if errors.Is(err, builds.ErrNotFound) {
		return builds.Artifact{}, &builds.JobForbiddenError{Cause: builds.InvalidJobToken}
	}
	if err != nil {
		return builds.Artifact{}, err
	}
	switch {
	case d.Build == nil:
		return builds.Artifact{}, builds.ErrNotFound
	case d.Build.PipelineID != d.Dependent.PipelineID:
		return builds.Artifact{}, &builds.JobForbiddenError{Cause: builds.NotADependency}
	case !d.Dependent.DependsOn(*d.Build):
		return builds.Artifact{}, &builds.JobForbiddenError{Cause: builds.NotADependency}
	case d.Archive == nil:
		return builds.Artifact{}, builds.ErrNotFound
	}
	return *d.Archive, nil
}

// DirectDownloadExpiry is how long the URL of a direct download stays valid: the runner
// follows the redirect at once, and a download under way outlives it.
const DirectDownloadExpiry = 5 * time.Minute

// ArtifactURL returns a URL of a's object that the store itself serves for
// DirectDownloadExpiry, or "" when the store cannot presign (the directory store: the
// download then goes through jobapi).
func (s *Service) ArtifactURL(ctx context.Context, a builds.Artifact) (string, error) {
	p, ok := s.objects.(builds.ObjectPresigner)
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
func (s *Service) OpenArtifact(ctx context.Context, a builds.Artifact, offset, length int64) (io.ReadCloser, error) {
	return s.objects.Open(ctx, a.ObjectKey, offset, length)
}

// Artifacts lists the artifacts of a build the caller has read already, archive first;
// never nil.
func (s *Service) Artifacts(ctx context.Context, buildID int64) ([]builds.Artifact, error) {
	as, err := s.store.Artifacts(ctx, buildID)
	if as == nil && err == nil {
		as = []builds.Artifact{}
	}
	return as, err
}

// JobArtifacts lists a project's job's artifacts, archive first.
func (s *Service) JobArtifacts(ctx context.Context, projectID, id int64) ([]builds.Artifact, error) {
	if _, err := s.builds.ProjectJob(ctx, projectID, id); err != nil {
		return nil, err
	}
	return s.store.Artifacts(ctx, id)
}

// WithArtifacts fills the artifacts of job views (a page of a listing) in one read; a view
// without any gets an empty list.
func (s *Service) WithArtifacts(ctx context.Context, views []builds.JobView) error {
	if len(views) == 0 {
		return nil
	}
	ids := make([]int64, len(views))
	for i, v := range views {
		ids[i] = v.ID
	}
	byBuild, err := s.store.ArtifactsOf(ctx, ids)
	if err != nil {
		return err
	}
	for i := range views {
		views[i].Artifacts = byBuild[views[i].ID]
		if views[i].Artifacts == nil {
			views[i].Artifacts = []builds.Artifact{}
		}
	}
	return nil
}

// ExposedArtifacts returns the archives a pipeline's latest jobs expose
// (artifacts:expose_as), in the order of p.Builds, read in one go.
func (s *Service) ExposedArtifacts(ctx context.Context, p builds.Pipeline) ([]builds.Artifact, error) {
	var ids []int64
	for _, b := range p.Builds {
		if b.RetriedBy != 0 {
			continue
		}
		for _, spec := range b.Payload.Artifacts {
			if spec.ArtifactType == builds.ArtifactTypeArchive && spec.ExposeAs != "" {
				ids = append(ids, b.ID)
				break
			}
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	byBuild, err := s.store.ArtifactsOf(ctx, ids)
	if err != nil {
		return nil, err
	}
	var out []builds.Artifact
	for _, id := range ids {
		for _, a := range byBuild[id] {
			if a.FileType == builds.ArtifactTypeArchive && a.ExposeAs != "" {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// DownloadableArchive is JobArchive for an operator's download: ErrNotAccessible when the
// job's artifacts:access is none.
func (s *Service) DownloadableArchive(ctx context.Context, projectID, id int64) (builds.Artifact, error) {
	a, err := s.JobArchive(ctx, projectID, id)
	if err == nil && a.Access == builds.ArtifactAccessNone {
		return builds.Artifact{}, ErrNotAccessible
	}
	return a, err
}

// JobArchive returns a project's job's archive artifact; builds.ErrNotFound when it has
// none.
func (s *Service) JobArchive(ctx context.Context, projectID, id int64) (builds.Artifact, error) {
	as, err := s.JobArtifacts(ctx, projectID, id)
	if err != nil {
		return builds.Artifact{}, err
	}
	for _, a := range as {
		if a.FileType == builds.ArtifactTypeArchive {
			return a, nil
		}
	}
	return builds.Artifact{}, builds.ErrNotFound
}

// DeleteJobArtifacts deletes a project's job's artifacts for actor; their objects go with
// the next artifacts pass, or at once when the store answers.
func (s *Service) DeleteJobArtifacts(ctx context.Context, projectID, id int64) error {
	if _, err := s.builds.ProjectJob(ctx, projectID, id); err != nil {
		return err
	}
	deleted, err := s.store.DeleteArtifacts(ctx, id)
	if err != nil {
		return err
	}
	var bytes int64
	for _, a := range deleted {
		bytes += a.Size
		s.discard(ctx, a.ObjectKey)
	}
	s.builds.RecordAudit(ctx, "job_artifacts_deleted", "job:"+strconv.FormatInt(id, 10),
		map[string]any{"artifacts": len(deleted), "bytes": bytes})
	return nil
}
