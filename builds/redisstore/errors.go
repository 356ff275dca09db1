package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/builds"
)

// Kinds of Redis failure, as ErrorKind names them (and the redis errors metric labels them).
const (
	KindLoading     = "loading"     // restarted, reading its dataset: LOADING
	KindClusterDown = "clusterdown" // a slot has no master: CLUSTERDOWN, TRYAGAIN
	KindFailover    = "failover"    // writes sent to a demoted master: READONLY, MASTERDOWN
	KindRefused     = "refused"     // nothing listens: connection refused
	KindReset       = "reset"       // the connection broke: reset, EOF, broken pipe
	KindTimeout     = "timeout"     // no answer within the call's deadline, or no free connection
	KindCanceled    = "canceled"    // the caller went away
	KindClosed      = "closed"      // the client was closed (shutdown)
	KindOther       = "other"       // anything else: a bug or a misconfiguration, not an outage
)

// ErrorKind classifies a Redis error; "" for none and for redis.Nil (a missing key is an
// answer, not a failure). Every kind but KindOther and KindCanceled means "Redis cannot
// answer right now": callers fall back to Postgres, or answer 503, and background loops
// keep their progress and retry.
func ErrorKind(err error) string {
	var netErr net.Error
	switch {
	case err == nil, errors.Is(err, redis.Nil):
		return ""
	case redis.IsLoadingError(err):
		return KindLoading
	case redis.IsClusterDownError(err), redis.IsTryAgainError(err), errors.Is(err, errClusterState):
		return KindClusterDown
	case redis.IsReadOnlyError(err), redis.IsMasterDownError(err):
		return KindFailover
	case errors.Is(err, syscall.ECONNREFUSED):
		return KindRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return KindReset
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrPoolTimeout):
		return KindTimeout
	case errors.Is(err, context.Canceled):
		return KindCanceled
	case errors.Is(err, redis.ErrClosed):
		return KindClosed
	case redis.IsMaxClientsError(err):
		return KindRefused
	case errors.As(err, &netErr):
		if netErr.Timeout() {
			return KindTimeout
		}
		return KindReset
	}
	return KindOther
}

// unavailable marks an outage-class error with builds.ErrUnavailable, so that whatever
// reaches a handler is answered 503 with Retry-After rather than 500; other errors (and
// redis.Nil) pass unchanged.
func unavailable(err error) error {
	switch ErrorKind(err) {
	case "", KindOther, KindCanceled:
		return err
	}
	return fmt.Errorf("redis: %w: %w", builds.ErrUnavailable, err)
}

// pipelineErrorKind classifies a failed pipeline by its first classifiable command error: a
// MULTI/EXEC that met LOADING fails as EXECABORT, which says nothing of the cause.
func pipelineErrorKind(err error, cmds []redis.Cmder) string {
	kind := ErrorKind(err)
	if kind != KindOther {
		return kind
	}
	for _, c := range cmds {
		if k := ErrorKind(c.Err()); k != "" && k != KindOther {
			return k
		}
	}
	return kind
}

// ErrorHook is a go-redis hook that reports the kind of every failed command or pipeline
// to observe (a metric), after the client's own retries; redis.Nil is not reported. Add it
// with AddHook on a Client or a ClusterClient.
func ErrorHook(observe func(kind string)) redis.Hook { return errorHook(observe) }

type errorHook func(kind string)

func (h errorHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h errorHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if kind := ErrorKind(err); kind != "" && !connectionSetup(cmd) {
			h(kind)
		}
		return err
	}
}

func (h errorHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if kind := pipelineErrorKind(err, cmds); kind != "" && (len(cmds) == 0 || !connectionSetup(cmds[0])) {
			h(kind)
		}
		return err
	}
}

// connectionSetup tells the commands go-redis sends on a new connection before the
// caller's: their failure fails the caller's command too, which is what gets counted.
func connectionSetup(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}
