package objectstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/jobapi/jobapi/builds"
)

// DefaultPartSize is the part of a multipart upload a Put holds in memory at a time: one
// buffer of it per upload in flight. 10,000 parts (S3's limit) make objects of up to
// 160 GB, well past any artifact limit.
const DefaultPartSize = 16 << 20

// s3Retries is how often a request is sent again after a network error or a 5xx: enough to
// ride out a blip, few enough that an outage answers 503 within a second or two (the runner
// retries an upload itself, six times).
const s3Retries = 3

// S3Options address an S3-compatible bucket.
type S3Options struct {
	Bucket string
	// Endpoint is host:port; empty means AWS S3 (s3.<region>.amazonaws.com).
	Endpoint string
	Secure   bool
	Region   string
	// PathStyle addresses the bucket in the path (http://host/bucket/key), as MinIO,
	// SeaweedFS and most self-hosted stores want; otherwise the store decides.
	PathStyle bool
	// Credentials; empty: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY of the process, then
	// ~/.aws/credentials, then the instance's IAM role.
	Credentials Credentials
	// PartSize of multipart uploads (DefaultPartSize when 0).
	PartSize uint64
	// Transport replaces the HTTP transport (tests inject faults with it).
	Transport http.RoundTripper
	// ResumeWithin bounds how long a read whose stream broke tries to pick it up again
	// (DefaultResumeWithin when 0; < 0: never).
	ResumeWithin time.Duration
}

// s3OptionsFromURL reads s3://bucket?endpoint=http://host:port&region=…&use_path_style=….
// The endpoint's scheme decides TLS; a bare host:port means https.
func s3OptionsFromURL(u *url.URL) (S3Options, error) {
	o := S3Options{Bucket: u.Host, Secure: true, Region: u.Query().Get("region")}
	if o.Bucket == "" || (u.Path != "" && u.Path != "/") || u.User != nil {
		return o, fmt.Errorf("object store URL %q: want s3://bucket?endpoint=…&region=… (credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)", u.Redacted())
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "region", "use_path_style", "disable_https":
		default:
			return o, fmt.Errorf("object store URL: unknown parameter %q (known: endpoint, region, use_path_style, disable_https)", k)
		}
	}
	if ep := q.Get("endpoint"); ep != "" {
		if !strings.Contains(ep, "://") {
			o.Endpoint = ep
		} else {
			eu, err := url.Parse(ep)
			if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" || (eu.Path != "" && eu.Path != "/") {
				return o, fmt.Errorf("object store URL: endpoint %q: want http(s)://host:port", ep)
			}
			o.Endpoint, o.Secure = eu.Host, eu.Scheme == "https"
		}
		// A self-hosted endpoint almost always wants path-style addressing.
		o.PathStyle = true
	}
	if v := q.Get("use_path_style"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return o, fmt.Errorf("object store URL: use_path_style=%q: want true or false", v)
		}
		o.PathStyle = b
	}
	if v := q.Get("disable_https"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return o, fmt.Errorf("object store URL: disable_https=%q: want true or false", v)
		}
		o.Secure = !b
	}
	return o, nil
}

// S3 is a store in an S3-compatible bucket.
type S3 struct {
	client       *minio.Client
	bucket       string
	partSize     uint64
	resumeWithin time.Duration
}

var _ builds.ObjectStore = (*S3)(nil)

// OpenS3 connects to the bucket; it does not check that the bucket exists (Ping does).
func OpenS3(ctx context.Context, o S3Options) (*S3, error) {
	endpoint := o.Endpoint
	if endpoint == "" {
		endpoint = "s3.amazonaws.com"
		if o.Region != "" {
			endpoint = "s3." + o.Region + ".amazonaws.com"
		}
	}
	var creds *credentials.Credentials
	if c := o.Credentials; c.AccessKeyID != "" {
		creds = credentials.NewStaticV4(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.FileAWSCredentials{}, &credentials.IAM{}})
	}
	lookup := minio.BucketLookupAuto
	if o.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(endpoint, &minio.Options{Creds: creds, Secure: o.Secure, Region: o.Region,
		BucketLookup: lookup, Transport: o.Transport, MaxRetries: s3Retries})
	if err != nil {
		return nil, fmt.Errorf("object store: %w", err)
	}
	part := o.PartSize
	if part == 0 {
		part = DefaultPartSize
	}
	resume := o.ResumeWithin
	if resume == 0 {
		resume = DefaultResumeWithin
	}
	return &S3{client: client, bucket: o.Bucket, partSize: part, resumeWithin: resume}, nil
}

// Put streams r as a multipart upload (one part in memory at a time). S3 shows the object
// only once the upload completes; a failed Put aborts it, and an upload left by a killed
// process is aborted by Delete.
func (s *S3) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	src := &sourceReader{ctx: ctx, r: r}
	opts := minio.PutObjectOptions{
		PartSize:    s.partSize,
		ContentType: "application/octet-stream",
		// The payload is not signed chunk by chunk (streaming SigV4 over plain HTTP, which
		// not every S3-compatible store decodes in parts); each part carries its MD5
		// instead, which the store checks.
		DisableContentSha256: true,
		SendContentMd5:       true,
	}
	// A small object goes in one PUT of known length: a multipart upload of a single short
	// (or empty) part is refused by stores that want a Content-Length.
	head := make([]byte, min(smallObject, s.partSize))
	n, err := io.ReadFull(src, head)
	var info minio.UploadInfo
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		info, err = s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(head[:n]), int64(n), opts)
	case err == nil:
		info, err = s.client.PutObject(ctx, s.bucket, key, io.MultiReader(bytes.NewReader(head), src), -1, opts)
	}
	if err != nil {
		return 0, putError(src, key, err)
	}
	return info.Size, nil
}

// smallObject is the size below which a Put is a single request.
const smallObject = 1 << 20

// Open reads length bytes of key from offset (length < 0: to the end).
func (s *S3) Open(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	var opts minio.GetObjectOptions
	switch {
	case length == 0:
		if _, err := s.Stat(ctx, key); err != nil {
			return nil, err
		}
		return io.NopCloser(strings.NewReader("")), nil
	case length > 0:
		if err := opts.SetRange(offset, offset+length-1); err != nil {
			return nil, err
		}
	case offset > 0:
		if err := opts.SetRange(offset, 0); err != nil {
			return nil, err
		}
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		return nil, s3Error("open", key, err)
	}
	// GetObject is lazy: Stat sends the request, so that a missing key fails here.
	info, err := obj.Stat()
	if err != nil {
		_ = obj.Close()
		return nil, s3Error("open", key, err)
	}
	end := int64(-1)
	if length > 0 {
		end = offset + length
	}
	return &resumingReader{ctx: ctx, s: s, key: key, etag: info.ETag, obj: obj, pos: offset, end: end,
		resumeWithin: s.resumeWithin}, nil
}

// DefaultResumeWithin is how long a read whose stream broke mid-object (the store
// restarted, a connection was cut) tries to pick it up again before it fails. Once a
// download's first bytes are sent its status cannot become a 503 any more: a short body is
// all the client would see, so the read waits out a restart of the store rather than
// cutting the download. A minute: a SeaweedFS restarted on a loaded 2-core machine answers
// again after 10 to 35 s (storefaulttest).
const DefaultResumeWithin = time.Minute

// resumingReader reads an object and, when its stream breaks, reopens it where it stopped
// (a ranged GET pinned to the object's ETag, so that bytes of another version are never
// joined to the first's), retrying with a backoff for up to resumeWithin.
type resumingReader struct {
	ctx          context.Context
	s            *S3
	key, etag    string
	obj          *minio.Object
	pos, end     int64 // where obj reads next; end of the range read (exclusive), -1: the object's end
	resumeWithin time.Duration
	broken       error // the failure of obj's stream, not resumed yet
	err          error // the error that ended the reader
}

func (r *resumingReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.obj == nil {
		return 0, errors.New("read of a closed object reader")
	}
	if r.end >= 0 && int64(len(p)) > r.end-r.pos {
		p = p[:r.end-r.pos]
		if len(p) == 0 {
			return 0, io.EOF
		}
	}
	if r.broken == nil {
		n, err := r.obj.Read(p)
		r.pos += int64(n)
		if err == nil || err == io.EOF {
			return n, err
		}
		r.broken = err
		if n > 0 {
			return n, nil // the next Read resumes
		}
	}
	if err := r.resume(r.broken); err != nil {
		r.err = err
		return 0, err
	}
	r.broken = nil
	return r.Read(p)
}

// resume reopens the object at r.pos after the stream failed with cause, or returns why
// it cannot: the caller went away, the object changed or is gone, or the store stayed
// unreachable for resumeWithin.
func (r *resumingReader) resume(cause error) error {
	if r.ctx.Err() != nil || r.resumeWithin <= 0 {
		return s3Error("read", r.key, cause)
	}
	_ = r.obj.Close()
	r.obj = nil
	deadline := time.Now().Add(r.resumeWithin)
	wait := 100 * time.Millisecond
	for {
		var opts minio.GetObjectOptions
		err := opts.SetMatchETag(r.etag)
		switch {
		case err != nil:
		case r.end >= 0:
			err = opts.SetRange(r.pos, r.end-1)
		case r.pos > 0:
			err = opts.SetRange(r.pos, 0) // to the end
		}
		if err != nil {
			return s3Error("read", r.key, errors.Join(cause, err))
		}
		obj, err := r.s.client.GetObject(r.ctx, r.s.bucket, r.key, opts)
		if err == nil {
			if _, err = obj.Stat(); err == nil {
				r.obj = obj
				return nil
			}
			_ = obj.Close()
		}
		switch code := minio.ToErrorResponse(err).Code; {
		case r.ctx.Err() != nil:
			return r.ctx.Err()
		case code == "PreconditionFailed" || missing(err):
			return fmt.Errorf("read object %s: it changed or went while read (%v) after: %w", r.key, err, cause)
		case time.Now().After(deadline):
			return s3Error("read", r.key, fmt.Errorf("%w (and resuming it for %v: %v)", cause, r.resumeWithin, err))
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func (r *resumingReader) Close() error {
	if r.obj == nil { // closed by a resume that failed
		return nil
	}
	err := r.obj.Close()
	r.obj = nil
	return err
}

var _ builds.ObjectPresigner = (*S3)(nil)

// PresignGet signs a GET of key valid for expiry (computed locally, no request to the
// store when the region is configured), whose answer names the file filename.
func (s *S3) PresignGet(ctx context.Context, key, filename string, expiry time.Duration) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	params := url.Values{}
	if filename != "" {
		params.Set("response-content-disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filename}))
	}
	u, err := s.client.PresignedGetObject(ctx, s.bucket, key, expiry, params)
	if err != nil {
		return "", s3Error("presign", key, err)
	}
	return u.String(), nil
}

// Stat describes key.
func (s *S3) Stat(ctx context.Context, key string) (builds.ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return builds.ObjectInfo{}, err
	}
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return builds.ObjectInfo{}, s3Error("stat", key, err)
	}
	return builds.ObjectInfo{Key: key, Size: info.Size, Modified: info.LastModified}, nil
}

// Delete removes key and aborts unfinished multipart uploads of it.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil && !missing(err) {
		return s3Error("delete", key, err)
	}
	if err := s.client.RemoveIncompleteUpload(ctx, s.bucket, key); err != nil && !missing(err) {
		return s3Error("abort uploads of", key, err)
	}
	return nil
}

// List calls fn for every complete object under prefix.
func (s *S3) List(ctx context.Context, prefix string, fn func(builds.ObjectInfo) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the listing goroutine when fn fails
	for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return s3Error("list", prefix, o.Err)
		}
		if err := fn(builds.ObjectInfo{Key: o.Key, Size: o.Size, Modified: o.LastModified}); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// Ping checks that the bucket answers.
func (s *S3) Ping(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("object store bucket %s: %w: %w", s.bucket, builds.ErrUnavailable, err)
	}
	if !ok {
		return fmt.Errorf("object store bucket %s does not exist: %w", s.bucket, builds.ErrUnavailable)
	}
	return nil
}

// missing reports whether S3 answered that the key or upload is not there.
func missing(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == "NoSuchKey" || r.Code == "NoSuchUpload" || r.StatusCode == http.StatusNotFound && r.Code != "NoSuchBucket"
}

// s3Error translates an S3 answer: a missing key is ErrNotFound, anything else (the store
// unreachable, 5xx, a missing bucket, refused credentials) a store failure.
func s3Error(op, key string, err error) error {
	if missing(err) {
		return fmt.Errorf("%s object %s: %w", op, key, builds.ErrNotFound)
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%s object %s: %w: %w", op, key, builds.ErrUnavailable, err)
}
