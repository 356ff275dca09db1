// Package testenv gives tests a real Postgres, a real Redis and a real S3 server, isolated
// per test: a fresh migrated database (cloned from a template), a Redis key prefix and a
// bucket. For tests that break a backend, Proxy cuts one client off a server the other tests
// keep using, OwnRedis and OwnS3 start servers of a test's own to restart or crash, and
// Eventually waits for what the fault causes.
//
// The servers are found once per test binary, in this order:
//
//	Postgres: $JOBAPI_TEST_DATABASE_URL (must work if set), postgres://postgres@127.0.0.1:5432/postgres,
//	          postgres://root@127.0.0.1:5432/test, else a throwaway server from the local binaries
//	Redis:    $JOBAPI_TEST_REDIS_URL (must work if set), redis://127.0.0.1:6379/0, else a throwaway server
//	S3:       $JOBAPI_TEST_S3_URL (http://KEY:SECRET@host:port, must work if set), else a throwaway
//	          SeaweedFS (weed server -s3, installed by .ci/run); a bucket per test
//
// JOBAPI_TEST_FORCE_THROWAWAY=1 skips straight to the throwaway servers. When nothing works
// the test fails, saying what was tried: a skipped test would pass CI without testing.
//
// Packages call testenv.Main from TestMain so the throwaway servers are stopped and their
// directories removed; without it the servers still die with the test binary.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/localserver"
)

const (
	envDatabaseURL    = "JOBAPI_TEST_DATABASE_URL"
	envRedisURL       = "JOBAPI_TEST_REDIS_URL"
	envForceThrowaway = "JOBAPI_TEST_FORCE_THROWAWAY"
)

var (
	defaultPostgresURLs = []string{
		"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		"postgres://root@127.0.0.1:5432/test?sslmode=disable",
	}
	defaultRedisURLs = []string{"redis://127.0.0.1:6379/0"}
)

// shared is the environment of this test binary.
var shared = &servers{getenv: os.Getenv}

// servers is what one test binary resolved; tests of this package build their own to force
// the throwaway path.
type servers struct {
	getenv func(string) string

	pgOnce sync.Once
	pgURL  string // superuser connection that creates the per-test databases
	pgErr  error
	pg     *localserver.Postgres // nil unless we started it
	admin  *pgxpool.Pool

	tmplOnce sync.Once
	tmpl     string
	tmplErr  error

	redisOnce sync.Once
	redisURL  string
	redisErr  error
	redis     *localserver.Redis // nil unless we started it

	s3Once  sync.Once
	s3      *sharedS3
	s3Err   error
	seaweed *localserver.SeaweedFS // nil unless we started it
}

// Main runs the tests, stops the throwaway servers this binary started and exits with the
// tests' code. Use it as the whole of TestMain: func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if err := shared.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv: stopping throwaway servers:", err)
	}
	os.Exit(code)
}

func (s *servers) stop() error {
	var errs []error
	if s.admin != nil {
		s.admin.Close()
	}
	if s.pg != nil {
		errs = append(errs, s.pg.Stop())
	}
	if s.redis != nil {
		errs = append(errs, s.redis.Stop())
	}
	if s.seaweed != nil {
		errs = append(errs, s.seaweed.Stop())
	}
	return errors.Join(errs...)
}

// resolve returns the URL of the server tests should use. An URL set in the environment must
// work: falling back from a typo would test against something else than asked.
func (s *servers) resolve(what, envKey string, defaults []string, reachable func(context.Context, string) bool, start func(context.Context) (string, error)) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var tried []string
	if s.getenv(envForceThrowaway) == "1" {
		tried = append(tried, envForceThrowaway+"=1 skipped $"+envKey+" and "+strings.Join(defaults, ", "))
	} else {
		if u := s.getenv(envKey); u != "" {
			if reachable(ctx, u) {
				return u, nil
			}
			return "", fmt.Errorf("%s=%s is set but no %s answers there", envKey, redact(u), what)
		}
		for _, u := range defaults {
			if reachable(ctx, u) {
				return u, nil
			}
			tried = append(tried, u+" unreachable")
		}
	}
	u, err := start(ctx)
	if err != nil {
		tried = append(tried, "throwaway server: "+err.Error())
		return "", fmt.Errorf("no %s for tests (tried: %s); start one or set %s", what, strings.Join(tried, "; "), envKey)
	}
	return u, nil
}

func redact(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return u
}

// randomName returns prefix followed by random hex, unique across parallel test binaries.
func randomName(prefix string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
