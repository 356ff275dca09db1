package artifacts

import (
	"archive/zip"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// objectReader reads one stored object as an io.ReadSeeker and io.ReaderAt: what
// http.ServeContent (HTTP ranges) and archive/zip (one file out of an archive) need. It
// keeps one stream open and goes on reading it while reads are sequential, which both of
// them mostly are; a read elsewhere reopens the stream there. Nothing is buffered beyond
// the caller's slice.
type objectReader struct {
	ctx     context.Context
	objects builds.ObjectStore
	key     string
	size    int64

	mu    sync.Mutex
	off   int64 // Read and Seek position
	rc    io.ReadCloser
	rcOff int64 // where rc reads next
}

func newObjectReader(ctx context.Context, objects builds.ObjectStore, key string, size int64) *objectReader {
	return &objectReader{ctx: ctx, objects: objects, key: key, size: size}
}

// readAt reads into p at off from the stream, reopening it when it is elsewhere.
func (o *objectReader) readAt(p []byte, off int64) (int, error) {
	if off >= o.size {
		return 0, io.EOF
	}
	if o.rc == nil || o.rcOff != off {
		if o.rc != nil {
			_ = o.rc.Close()
			o.rc = nil
		}
		rc, err := o.objects.Open(o.ctx, o.key, off, -1)
		if err != nil {
			return 0, err
		}
		o.rc, o.rcOff = rc, off
	}
	p = p[:min(int64(len(p)), o.size-off)]
	n, err := io.ReadFull(o.rc, p)
	o.rcOff += int64(n)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// The object is shorter than its row says: it changed under us, or the store broke.
		err = fmt.Errorf("object %s ended at byte %d of %d: %w", o.key, o.rcOff, o.size, io.ErrUnexpectedEOF)
	}
	return n, err
}

func (o *objectReader) Read(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := o.readAt(p, o.off)
	o.off += int64(n)
	return n, err
}

func (o *objectReader) ReadAt(p []byte, off int64) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := o.readAt(p, off)
	if err == nil && n < len(p) {
		err = io.EOF // io.ReaderAt: a short read says why
	}
	return n, err
}

func (o *objectReader) Seek(offset int64, whence int) (int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += o.off
	case io.SeekEnd:
		offset += o.size
	default:
		return 0, errors.New("seek: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("seek: negative position")
	}
	o.off = offset
	return offset, nil
}

func (o *objectReader) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.rc == nil {
		return nil
	}
	err := o.rc.Close()
	o.rc = nil
	return err
}

// Content is an artifact opened for reading with HTTP ranges.
type Content interface {
	io.ReadSeeker
	io.Closer
}

// ArtifactContent opens a for reading anywhere (http.ServeContent). The object's stream is
// opened here, at its start, before the caller answers: http.ServeContent sends its status
// before its first read, so a store that is down or refusing must fail now (a 503 the
// client retries) rather than under a 200 whose body breaks off at its first byte. A read
// elsewhere (a Range) reopens it there.
func (s *Service) ArtifactContent(ctx context.Context, a builds.Artifact) (Content, error) {
	o := newObjectReader(ctx, s.objects, a.ObjectKey, a.Size)
	if a.Size > 0 {
		rc, err := s.objects.Open(ctx, a.ObjectKey, 0, -1)
		if err != nil {
			return nil, err
		}
		o.rc, o.rcOff = rc, 0
	}
	return o, nil
}

// ArchiveMember is one file read out of a job's archive.
type ArchiveMember struct {
	Name     string
	Size     int64
	Modified time.Time
	io.ReadCloser
}

// ArchiveFile opens the file at name inside a project's job's zip archive (GitLab's
// GET …/jobs/:job_id/artifacts/*artifact_path). Only the archive's central directory and
// the file's own bytes are read from the store. builds.ErrNotFound when the job has no archive or
// the archive no such file.
func (s *Service) ArchiveFile(ctx context.Context, projectID, id int64, name string) (ArchiveMember, error) {
	a, err := s.DownloadableArchive(ctx, projectID, id)
	if err != nil {
		return ArchiveMember{}, err
	}
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	if name == "" {
		return ArchiveMember{}, invalid("name a file inside the archive: …/artifacts/path/to/file")
	}
	r := newObjectReader(ctx, s.objects, a.ObjectKey, a.Size)
	zr, err := zip.NewReader(r, a.Size)
	if err != nil {
		_ = r.Close()
		return ArchiveMember{}, fmt.Errorf("read the archive of job %d: %w", id, err)
	}
	for _, f := range zr.File {
		if strings.TrimPrefix(f.Name, "./") != name || strings.HasSuffix(f.Name, "/") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			_ = r.Close()
			return ArchiveMember{}, fmt.Errorf("open %s in the archive of job %d: %w", name, id, err)
		}
		return ArchiveMember{Name: name, Size: int64(f.UncompressedSize64), Modified: f.Modified,
			ReadCloser: memberCloser{ReadCloser: rc, object: r}}, nil
	}
	_ = r.Close()
	return ArchiveMember{}, fmt.Errorf("%s in the archive of job %d: %w", name, id, builds.ErrNotFound)
}

// Answers of ReadArchiveFile about the archive itself (not the store's failures).
var (
	ErrArchiveFileTooLarge = errors.New("the file in the archive is over the limit")
	ErrArchiveInvalid      = errors.New("the archive is not a zip archive jobapi can read")
)

// ReadArchiveFile reads the file at name inside archive a, whole, for the server's own use
// (a dynamic child pipeline's configuration, package downstream), whatever the archive's
// access. As ArchiveFile, only the central directory and the file's own bytes come from the
// store (its range reads: nothing of the archive is held but the decompressor's window),
// and at most limit bytes of the file are read: ErrArchiveFileTooLarge past it, whatever
// its header claims. builds.ErrNotFound when the archive has no such file, ErrArchiveInvalid when
// it is no zip archive; other errors are the store's (try again later).
func (s *Service) ReadArchiveFile(ctx context.Context, a builds.Artifact, name string, limit int64) ([]byte, error) {
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	r := newObjectReader(ctx, s.objects, a.ObjectKey, a.Size)
	defer func() { _ = r.Close() }()
	zr, err := zip.NewReader(r, a.Size)
	if err != nil {
		if zipInvalid(err) {
			return nil, ErrArchiveInvalid
		}
		return nil, fmt.Errorf("read the archive of job %d: %w", a.BuildID, err)
	}
	for _, f := range zr.File {
		if strings.TrimPrefix(f.Name, "./") != name || strings.HasSuffix(f.Name, "/") {
			continue
		}
		if f.UncompressedSize64 > uint64(limit) {
			return nil, ErrArchiveFileTooLarge
		}
		rc, err := f.Open()
		if err != nil {
			if zipInvalid(err) {
				return nil, ErrArchiveInvalid
			}
			return nil, fmt.Errorf("open %s in the archive of job %d: %w", name, a.BuildID, err)
		}
		defer func() { _ = rc.Close() }()
		b, err := io.ReadAll(io.LimitReader(rc, limit+1))
		switch {
		case err != nil && zipInvalid(err):
			return nil, ErrArchiveInvalid
		case err != nil:
			return nil, fmt.Errorf("read %s in the archive of job %d: %w", name, a.BuildID, err)
		case int64(len(b)) > limit:
			return nil, ErrArchiveFileTooLarge
		}
		return b, nil
	}
	return nil, fmt.Errorf("%s in the archive of job %d: %w", name, a.BuildID, builds.ErrNotFound)
}

// zipInvalid tells an archive that is not what it should be from a store that failed.
func zipInvalid(err error) bool {
	var corrupt flate.CorruptInputError
	return errors.Is(err, zip.ErrFormat) || errors.Is(err, zip.ErrAlgorithm) || errors.Is(err, zip.ErrChecksum) ||
		errors.As(err, &corrupt)
}

// memberCloser closes a member's reader and the object under it.
type memberCloser struct {
	io.ReadCloser
	object io.Closer
}

func (m memberCloser) Close() error {
	return errors.Join(m.ReadCloser.Close(), m.object.Close())
}
