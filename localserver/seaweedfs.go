package localserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// SeaweedFS is a throwaway SeaweedFS owned by this process: `weed server` runs its master,
// volume server, filer and S3 gateway in one process on free 127.0.0.1 ports, keeping
// everything under Dir, so that a Restart comes back with every object it had. Its S3
// gateway checks signatures against one identity with all rights, whose keys are made
// anew for each server: a request signed with another secret is refused, as by any S3.
type SeaweedFS struct {
	// Endpoint is http://127.0.0.1:PORT of the S3 gateway.
	Endpoint string
	// FilerURL is http://127.0.0.1:PORT of the filer, where SeaweedFS keeps its own
	// settings (/etc/...): tests write the S3 circuit breaker and storage rules there.
	FilerURL string
	// AccessKeyID and SecretAccessKey are the identity the gateway accepts (admin: it may
	// create buckets).
	AccessKeyID, SecretAccessKey string
	Dir                          string

	bin       string
	ports     seaweedPorts
	log       io.Writer
	removeDir bool

	mu   sync.Mutex
	proc *process
}

// SeaweedFSBinary is the command SeaweedFS installs as. It is not a Debian package: .ci/run
// builds the pinned version from the Go module proxy into GOPATH/bin.
const SeaweedFSBinary = "weed"

// seaweedPorts are the listeners of one `weed server`: each component's HTTP and gRPC
// port, chosen free rather than SeaweedFS's defaults (gRPC = HTTP + 10000), which collide
// between servers and overflow for a port from the ephemeral range.
type seaweedPorts struct {
	master, masterGRPC, volume, volumeGRPC, filer, filerGRPC, s3, s3GRPC int
}

// StartSeaweedFS starts `weed server -s3` under dir (a new temporary directory if dir is
// "") and returns once its S3 gateway stores an object. The weed binary is looked up on PATH,
// then in GOBIN and GOPATH/bin, where `go install` puts it.
func StartSeaweedFS(ctx context.Context, dir string, log io.Writer) (*SeaweedFS, error) {
	if log == nil {
		log = io.Discard
	}
	bin, err := findBinary(SeaweedFSBinary, goBinDirs()...)
	if err != nil {
		return nil, fmt.Errorf("start seaweedfs: %w (.ci/run installs it: go install github.com/seaweedfs/seaweedfs/weed)", err)
	}
	dir, created, err := makeDir(dir, "jobapi-seaweedfs-")
	if err != nil {
		return nil, fmt.Errorf("start seaweedfs: %w", err)
	}
	s := &SeaweedFS{Dir: dir, bin: bin, log: log,
		AccessKeyID: "jobapi-" + randomHex(8), SecretAccessKey: randomHex(20)}
	if err = s.writeConfig(); err == nil {
		// A port picked free can be taken before weed binds it: try other ones.
		for attempt := 0; attempt < 3; attempt++ {
			if s.ports, err = pickSeaweedPorts(); err != nil {
				break
			}
			if err = s.start(ctx); !errors.Is(err, errExited) {
				break
			}
		}
	}
	if err != nil {
		if created {
			os.RemoveAll(dir)
		}
		return nil, fmt.Errorf("start seaweedfs in %s: %w", dir, err)
	}
	s.removeDir = created
	return s, nil
}

// goBinDirs are where `go install` puts commands: GOBIN, else the first GOPATH's bin (by
// default ~/go/bin), read from the environment without running the go command.
func goBinDirs() []string {
	if d := os.Getenv("GOBIN"); d != "" {
		return []string{d}
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil
		}
		gopath = filepath.Join(home, "go")
	}
	return []string{filepath.Join(filepath.SplitList(gopath)[0], "bin")}
}

func pickSeaweedPorts() (seaweedPorts, error) {
	var p seaweedPorts
	for _, port := range []*int{&p.master, &p.masterGRPC, &p.volume, &p.volumeGRPC, &p.filer, &p.filerGRPC, &p.s3, &p.s3GRPC} {
		n, err := freePort()
		if err != nil {
			return p, err
		}
		*port = n
	}
	return p, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// s3Config is the S3 gateway's identities file (-s3.config): one identity with every action.
// Without an "anonymous" identity an unsigned request is refused.
func (s *SeaweedFS) writeConfig() error {
	type credential struct {
		AccessKey string `json:"accessKey"`
		SecretKey string `json:"secretKey"`
	}
	type identity struct {
		Name        string       `json:"name"`
		Credentials []credential `json:"credentials"`
		Actions     []string     `json:"actions"`
	}
	cfg := map[string][]identity{"identities": {{Name: "jobapi-test-admin",
		Credentials: []credential{{AccessKey: s.AccessKeyID, SecretKey: s.SecretAccessKey}},
		Actions:     []string{"Admin", "Read", "List", "Tagging", "Write"}}}}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	for _, d := range []string{"master", "volume"} {
		if err := os.MkdirAll(filepath.Join(s.Dir, d), 0o700); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(s.Dir, "s3.json"), b, 0o600)
}

// args is the command line of `weed server` on s.ports. Every listener is on 127.0.0.1,
// telemetry is off (it would call out), the gateway's side services (Iceberg, Lance) are
// off, and sockets stay in Dir.
func (s *SeaweedFS) args() []string {
	p := s.ports
	itoa := strconv.Itoa
	return []string{
		"-logtostderr=true", "server",
		"-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-dir=" + filepath.Join(s.Dir, "volume"),
		"-master.dir=" + filepath.Join(s.Dir, "master"),
		"-master.port=" + itoa(p.master), "-master.port.grpc=" + itoa(p.masterGRPC),
		"-master.telemetry=false",
		// One master: its raft needs no election wait, nor state from before a restart
		// (the volume servers report what they hold).
		"-master.electionTimeout=500ms", "-master.resumeState=false",
		// Small volumes, grown one at a time (WEED_MASTER_VOLUME_GROWTH_COPY_1): every bucket
		// is a collection of volumes of its own, and tests make many buckets.
		"-master.volumeSizeLimitMB=64", "-volume.max=0",
		"-volume.port=" + itoa(p.volume), "-volume.port.grpc=" + itoa(p.volumeGRPC),
		"-volume.preStopSeconds=0",
		"-filer", "-filer.port=" + itoa(p.filer), "-filer.port.grpc=" + itoa(p.filerGRPC),
		"-filer.localSocket=" + filepath.Join(s.Dir, "filer.sock"),
		"-s3", "-s3.port=" + itoa(p.s3), "-s3.port.grpc=" + itoa(p.s3GRPC),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-s3.localSocket=" + filepath.Join(s.Dir, "s3.sock"),
		"-s3.config=" + filepath.Join(s.Dir, "s3.json"),
	}
}

// start runs the server on s.ports and waits for it; the caller holds s.mu or owns s alone.
func (s *SeaweedFS) start(ctx context.Context) error {
	s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(s.ports.s3)
	s.FilerURL = "http://127.0.0.1:" + strconv.Itoa(s.ports.filer)
	proc, err := startProcessEnv(s.bin, s.args(), s.Dir, []string{"WEED_MASTER_VOLUME_GROWTH_COPY_1=1"}, syscall.SIGTERM, s.log)
	if err != nil {
		return err
	}
	if err := proc.waitReady(ctx, s.ready); err != nil {
		proc.stop()
		return err
	}
	s.proc = proc
	return nil
}

// readyBucket is where the readiness check writes: a store is ready once it stores an
// object, which needs the master, a volume server that has registered, the filer, the
// gateway and the filers' lock ring that serializes object writes (the first write after a
// start waits for it: about 10 s).
const readyBucket = "jobapi-ready"

func (s *SeaweedFS) ready(ctx context.Context) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	if err := c.MakeBucket(ctx, readyBucket, minio.MakeBucketOptions{}); err != nil {
		if code := minio.ToErrorResponse(err).Code; code != "BucketAlreadyOwnedByYou" && code != "BucketAlreadyExists" {
			return err
		}
	}
	_, err = c.PutObject(ctx, readyBucket, "ready", bytes.NewReader([]byte("ok")), 2, minio.PutObjectOptions{})
	return err
}

// client is an S3 client of the admin identity, that does not retry (callers poll).
func (s *SeaweedFS) client() (*minio.Client, error) {
	return minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKeyID, s.SecretAccessKey, ""),
		Region: "us-east-1", BucketLookup: minio.BucketLookupPath, MaxRetries: 1})
}

// Restart stops the server cleanly and starts it again on the same ports, with its data.
func (s *SeaweedFS) Restart(ctx context.Context) error {
	return s.RestartAfter(ctx, nil)
}

// RestartAfter stops the server, calls whileDown (when not nil) and starts it again on the
// same ports with its data: for tests of what clients do while the store is gone.
func (s *SeaweedFS) RestartAfter(ctx context.Context, whileDown func()) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.proc.stop(); err != nil {
		return fmt.Errorf("restart seaweedfs %s: %w", s.Endpoint, err)
	}
	if whileDown != nil {
		whileDown()
	}
	if err := s.start(ctx); err != nil {
		return fmt.Errorf("restart seaweedfs %s: %w", s.Endpoint, err)
	}
	return nil
}

// Crash kills the server (SIGKILL: no clean shutdown) and leaves it down until Start.
func (s *SeaweedFS) Crash() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc.kill()
}

// Start starts a server that Crash left down, on the same ports with its data.
func (s *SeaweedFS) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.proc.done:
	default:
		return fmt.Errorf("start seaweedfs %s: it is running", s.Endpoint)
	}
	if err := s.start(ctx); err != nil {
		return fmt.Errorf("start seaweedfs %s: %w", s.Endpoint, err)
	}
	return nil
}

// Stop shuts the server down and removes its directory if StartSeaweedFS created it.
func (s *SeaweedFS) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.proc.stop()
	if s.removeDir {
		err = errors.Join(err, os.RemoveAll(s.Dir))
	}
	return err
}
