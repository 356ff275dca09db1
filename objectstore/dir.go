package objectstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/jobapi/jobapi/builds"
)

// tmpMarker names a Put's temporary file: "<key>.tmp-<random>" beside the object, on the
// same file system, so that the final rename is atomic.
const tmpMarker = ".tmp-"

// copyBuffer is the size of the buffer a Put copies through: large enough that a 1 GB
// upload costs a few thousand writes, small enough to keep a replica's memory flat.
const copyBuffer = 256 << 10

// copyBuffers keeps Put's buffers between calls: a store that takes one small object after
// the other (the archive of every finished job's log) would otherwise allocate and clear
// one for each.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBuffer); return &b }}

// writerOnly hides *os.File's ReadFrom, which io.CopyBuffer would prefer to the buffer:
// for a reader that is not a file or a socket it copies through a 32 KiB buffer of its
// own, allocated on every call.
type writerOnly struct{ io.Writer }

// Dir is a store in a local directory.
type Dir struct {
	root string
}

var _ builds.ObjectStore = (*Dir)(nil)

// OpenDir returns a store in root, creating the directory if needed.
func OpenDir(root string) (*Dir, error) {
	if root == "" || !filepath.IsAbs(root) {
		return nil, fmt.Errorf("object store directory %q: want an absolute path", root)
	}
	if err := os.MkdirAll(root, 0o750); err != nil {
		return nil, fmt.Errorf("object store directory: %w", err)
	}
	return &Dir{root: filepath.Clean(root)}, nil
}

func (d *Dir) path(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// Put writes r to a temporary file beside key, syncs it and renames it into place: the
// object appears complete or not at all, and survives a crash once Put returned.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	p, err := d.path(key)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return 0, fmt.Errorf("put object %s: %w: %w", key, builds.ErrUnavailable, err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), filepath.Base(p)+tmpMarker+"*")
	if err != nil {
		return 0, fmt.Errorf("put object %s: %w: %w", key, builds.ErrUnavailable, err)
	}
	src := &sourceReader{ctx: ctx, r: r}
	buf := copyBuffers.Get().(*[]byte)
	n, err := io.CopyBuffer(writerOnly{f}, src, *buf)
	copyBuffers.Put(buf)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return 0, putError(src, key, err)
	}
	syncDir(filepath.Dir(p))
	return n, nil
}

// syncDir makes a rename durable; a file system that cannot sync directories loses nothing
// but that guarantee.
func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync()
		_ = f.Close()
	}
}

// fileSection is an open object; whole, it is the *os.File itself, so that net/http can
// send it with sendfile.
type fileSection struct {
	io.Reader
	f *os.File
}

func (s fileSection) Close() error { return s.f.Close() }

// Open reads length bytes of key from offset (length < 0: to the end).
func (d *Dir) Open(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fileError("open", key, err)
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			_ = f.Close()
			return nil, fileError("open", key, err)
		}
	}
	if offset == 0 && length < 0 {
		return f, nil
	}
	var rd io.Reader = f
	if length >= 0 {
		rd = io.LimitReader(f, length)
	}
	return fileSection{Reader: rd, f: f}, nil
}

// Stat describes key.
func (d *Dir) Stat(ctx context.Context, key string) (builds.ObjectInfo, error) {
	p, err := d.path(key)
	if err != nil {
		return builds.ObjectInfo{}, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return builds.ObjectInfo{}, fileError("stat", key, err)
	}
	return builds.ObjectInfo{Key: key, Size: fi.Size(), Modified: fi.ModTime()}, nil
}

// Delete removes key and the temporary files of Puts of key that never finished.
func (d *Dir) Delete(ctx context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fileError("delete", key, err)
	}
	// The pattern is built from a checked key, so only Glob's own errors (none for a valid
	// pattern) could come back.
	tmps, _ := filepath.Glob(escapeGlob(p) + tmpMarker + "*")
	for _, t := range tmps {
		if err := os.Remove(t); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fileError("delete", key, err)
		}
	}
	return nil
}

// escapeGlob quotes the characters filepath.Match treats specially.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// List calls fn for every complete object under prefix; temporary files are not objects.
func (d *Dir) List(ctx context.Context, prefix string, fn func(builds.ObjectInfo) error) error {
	err := filepath.WalkDir(d.root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.IsDir() || strings.Contains(e.Name(), tmpMarker) {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted while we walked
		}
		if err != nil {
			return err
		}
		return fn(builds.ObjectInfo{Key: key, Size: fi.Size(), Modified: fi.ModTime()})
	})
	if err != nil && ctx.Err() == nil {
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			return fmt.Errorf("list objects: %w: %w", builds.ErrUnavailable, err)
		}
	}
	return err
}

// Ping checks that the directory is there and writable.
func (d *Dir) Ping(ctx context.Context) error {
	f, err := os.CreateTemp(d.root, "ping"+tmpMarker+"*")
	if err != nil {
		return fmt.Errorf("object store directory %s: %w: %w", d.root, builds.ErrUnavailable, err)
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}

// fileError translates a file system error: a missing file is ErrNotFound, anything else
// a store failure.
func fileError(op, key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s object %s: %w", op, key, builds.ErrNotFound)
	}
	return fmt.Errorf("%s object %s: %w: %w", op, key, builds.ErrUnavailable, err)
}
