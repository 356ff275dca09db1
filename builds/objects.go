package builds

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"time"
)

// ObjectStore keeps what is too large for Postgres (job artifacts, archived logs) as
// objects under slash-separated keys: a local directory or an S3-compatible bucket (package
// objectstore, chosen by JOBAPI_OBJECT_STORE). Failures of the store itself wrap
// ErrUnavailable; a missing object is ErrNotFound.
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

// ObjectCleanup is the list of objects to remove (Postgres), which keeps the store free of
// what no row names: a write lists its key before the first byte, and the transaction that
// commits the row naming it takes it off, so an object that a failed, cut off or killed
// write left behind is removed by the artifacts pass once its key is due. Job artifacts and
// archived logs both write through it.
type ObjectCleanup interface {
	// BeginUpload lists key for cleanup at due: until the upload commits, its object is
	// garbage once due.
	BeginUpload(ctx context.Context, key string, due time.Time) error
	// ForgetObject takes key off the cleanup list: its object is gone.
	ForgetObject(ctx context.Context, key string) error
	// DiscardUpload makes key due at once: its upload is over and its object, whatever the
	// store kept of it, can go with the next pass.
	DiscardUpload(ctx context.Context, key string) error
	// CleanObjects takes up to limit objects due at now, calls remove for each, and drops
	// those removed from the list; it returns how many. Safe on every replica (SKIP LOCKED).
	CleanObjects(ctx context.Context, now time.Time, limit int, remove func(key string) error) (int, error)
}

// DiscardObject removes an object no row needs (a failed or redundant write, a deleted
// artifact) now, and takes it off the cleanup list; what fails here the artifacts pass
// removes when the key is due.
func DiscardObject(ctx context.Context, objects ObjectStore, cleanup ObjectCleanup, log *slog.Logger, key string) {
	ctx = context.WithoutCancel(ctx) // a client that went away still leaves no object
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := objects.Delete(ctx, key); err != nil {
		log.WarnContext(ctx, "object not deleted; the next artifacts pass will", "key", key, "error", err)
		if err := cleanup.DiscardUpload(ctx, key); err != nil {
			log.WarnContext(ctx, "object not marked for the next pass; it goes once its upload timeout passed", "key", key, "error", err)
		}
		return
	}
	if err := cleanup.ForgetObject(ctx, key); err != nil {
		log.WarnContext(ctx, "deleted object still listed for cleanup; the artifacts pass will drop it", "key", key, "error", err)
	}
}

// UploadCleanupSlack is added to a write's time limit before its unfinished object is due
// for cleanup: the write's own deadline ends it first.
const UploadCleanupSlack = time.Minute

// ObjectKeyTag makes each write's object key unique: a retried write never writes where an
// earlier, maybe still running, attempt does.
func ObjectKeyTag() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
