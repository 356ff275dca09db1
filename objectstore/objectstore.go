// Package objectstore keeps jobapi's large blobs (job artifacts) behind builds.ObjectStore,
// with two backends chosen by JOBAPI_OBJECT_STORE:
//
//   - file:///var/lib/jobapi/objects: a local directory, the embedded default (jobapi dev
//     uses one of its own). A Put writes "<key>.tmp-<random>" next to the object and renames
//     it into place once complete and synced, so readers never see half an object.
//   - s3://bucket?endpoint=http://host:9000&region=us-east-1: any S3-compatible store,
//     through minio-go. A Put streams a multipart upload in parts of PartSize; the object
//     exists only once S3 completes the upload, and a failed Put aborts it.
//
// Either way a replica killed mid-Put leaves something invisible behind (a temporary file,
// an unfinished multipart upload) that Delete of the same key removes: the artifacts pass
// calls it for every upload that never committed.
package objectstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"

	"github.com/jobapi/jobapi/builds"
)

// Credentials sign requests to an S3 store. Empty: the process's AWS environment and
// instance role (see S3Options).
type Credentials struct {
	AccessKeyID, SecretAccessKey, SessionToken string
}

// Open returns the store rawURL names: file:///path or s3://bucket?endpoint=…&region=….
func Open(ctx context.Context, rawURL string, creds Credentials) (builds.ObjectStore, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("object store URL: %w", err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("object store URL %q: a file URL names a local path (file:///var/lib/jobapi/objects)", rawURL)
		}
		return OpenDir(u.Path)
	case "s3":
		opts, err := s3OptionsFromURL(u)
		if err != nil {
			return nil, err
		}
		opts.Credentials = creds
		return OpenS3(ctx, opts)
	}
	return nil, fmt.Errorf("object store URL %q: want file:///path or s3://bucket?endpoint=…", rawURL)
}

// checkKey refuses keys that could leave the store's root or collide with its temporary
// files: keys are made by jobapi, but a bug here would write outside the bucket or folder.
func checkKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") || path.Clean(key) != key ||
		strings.Contains(key, tmpMarker) || strings.Contains(key, "\\") {
		return fmt.Errorf("object key %q: want a clean relative path", key)
	}
	for _, part := range strings.Split(key, "/") {
		if part == "." || part == ".." {
			return fmt.Errorf("object key %q: want a clean relative path", key)
		}
	}
	return nil
}

// sourceError marks an error of the reader given to Put, so that it is told apart from a
// failure of the store (and is never reported as ErrUnavailable).
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// sourceReader wraps a Put's reader: it stops at ctx's end and marks the reader's errors.
// It also hides io.ErrUnexpectedEOF behind sourceError, which matters for S3: minio-go reads
// a short part ending in io.ErrUnexpectedEOF as the object's last part and would complete a
// truncated upload.
type sourceReader struct {
	ctx context.Context
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		s.err = err
		return 0, &sourceError{err}
	}
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
		return n, &sourceError{err}
	}
	return n, err
}

// putError is what Put returns for err: the source's own error as it was, or a store
// failure wrapped in builds.ErrUnavailable.
func putError(src *sourceReader, key string, err error) error {
	if src.err != nil {
		return src.err
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("put object %s: %w: %w", key, builds.ErrUnavailable, err)
}
