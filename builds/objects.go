package builds

import (
	"context"
	"io"
	"time"
)

// ObjectStore keeps what is too large for Postgres (job artifacts) as objects under
// slash-separated keys: a local directory or an S3-compatible bucket (package objectstore,
// chosen by JOBAPI_OBJECT_STORE). Failures of the store itself wrap ErrUnavailable; a
// missing object is ErrNotFound.
type ObjectStore interface {
	// Put streams r to key and returns the number of bytes written. The object becomes
	// visible only complete: on any error, r's own included, nothing is left at key. What a
	// killed process left half-written is removed by Delete(key). An error of r is returned
	// as it is, never as ErrUnavailable.
	Put(ctx context.Context, key string, r io.Reader) (int64, error)
	// Open reads length bytes of key from offset (length < 0: to the end).
	Open(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	// Stat describes key.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Delete removes key and whatever an interrupted Put of key left behind; a key that is
	// not there is no error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every complete object whose key starts with prefix.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
	// Ping checks that the store answers (readiness).
	Ping(ctx context.Context) error
}

// ObjectPresigner is an ObjectStore that can hand out a URL of one object that anyone may
// GET until it expires (S3's presigned URLs): gitlab-runner's direct_download then reads
// an artifact from the store itself instead of through jobapi. The directory store cannot.
type ObjectPresigner interface {
	// PresignGet returns a URL of key valid for expiry, whose download is named filename.
	PresignGet(ctx context.Context, key, filename string, expiry time.Duration) (string, error)
}

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	Key      string
	Size     int64
	Modified time.Time
}
