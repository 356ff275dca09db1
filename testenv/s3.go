package testenv

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3Server is an S3-protocol server for one test: gofakes3, which implements S3's REST API
// (signed requests, multipart uploads, ranged reads, listings) over a real HTTP listener on
// a local port, storing objects in memory. jobapi's S3 backend talks to it exactly as to
// any S3-compatible store; nothing of jobapi is faked.
type S3Server struct {
	// Endpoint is http://127.0.0.1:port of the server itself; Proxy is in front of it.
	Endpoint string
	Bucket   string
	// AccessKeyID and SecretAccessKey sign requests (the server accepts any signature).
	AccessKeyID, SecretAccessKey string
	// Proxy is a TCP proxy to the server: Stop makes the store unreachable for whoever
	// was given URL (connections in flight are cut), Start brings it back.
	Proxy *Proxy

	srv *http.Server
}

// S3BucketName is the bucket every test S3 server holds.
const S3BucketName = "jobapi-test"

// S3 starts an S3 server with one empty bucket; it is stopped when the test ends.
func S3(t testing.TB) *S3Server {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(S3BucketName); err != nil {
		t.Fatal(err)
	}
	faker := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &S3Server{Endpoint: "http://" + ln.Addr().String(), Bucket: S3BucketName,
		AccessKeyID: "jobapi-test-key", SecretAccessKey: "jobapi-test-secret",
		// gofakes3 writes some error answers twice; net/http's complaint about it is noise.
		srv: &http.Server{Handler: faker.Server(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("s3 server: %v", err)
		}
	})
	t.Cleanup(func() {
		_ = s.srv.Close()
		wg.Wait()
	})
	s.Proxy = StartProxy(t, ln.Addr().String())
	return s
}

// URL is the JOBAPI_OBJECT_STORE value for the server, through its proxy.
func (s *S3Server) URL() string {
	return fmt.Sprintf("s3://%s?endpoint=%s&region=us-east-1", s.Bucket, s.Proxy.URL(s.Endpoint))
}
