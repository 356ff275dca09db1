package localserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a throwaway redis-server owned by this process. It keeps nothing on disk, so a
// Restart comes back empty: the "Redis lost every key" fault.
type Redis struct {
	Addr string // 127.0.0.1:PORT
	URL  string // redis://127.0.0.1:PORT/0
	Dir  string // working directory of the server

	bin       string
	args      []string // everything but the port, reused by Restart
	port      int
	log       io.Writer
	removeDir bool

	mu   sync.Mutex
	proc *process
}

// StartRedis starts redis-server on a free 127.0.0.1 port with persistence off, in dir (a new
// temporary directory if dir is ""), and returns once it answers PING.
func StartRedis(ctx context.Context, dir string, log io.Writer) (*Redis, error) {
	return startRedis(ctx, dir, log)
}

func startRedis(ctx context.Context, dir string, log io.Writer, extraArgs ...string) (*Redis, error) {
	if log == nil {
		log = io.Discard
	}
	bin, err := findBinary("redis-server")
	if err != nil {
		return nil, fmt.Errorf("start redis: %w (install the redis-server package)", err)
	}
	dir, created, err := makeDir(dir, "jobapi-redis-")
	if err != nil {
		return nil, fmt.Errorf("start redis: %w", err)
	}
	r := &Redis{
		Dir:  dir,
		bin:  bin,
		args: append([]string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}, extraArgs...),
		log:  log,
	}
	// A port picked free can be taken before redis binds it: try another one.
	for attempt := 0; attempt < 3; attempt++ {
		if r.port, err = freePort(); err != nil {
			break
		}
		if err = r.start(ctx); !errors.Is(err, errExited) {
			break
		}
	}
	if err != nil {
		if created {
			os.RemoveAll(dir)
		}
		return nil, fmt.Errorf("start redis in %s: %w", dir, err)
	}
	r.removeDir = created
	return r, nil
}

// start runs the server on r.port and waits for it; the caller holds r.mu or owns r alone.
func (r *Redis) start(ctx context.Context) error {
	r.Addr = "127.0.0.1:" + strconv.Itoa(r.port)
	r.URL = "redis://" + r.Addr + "/0"
	proc, err := r.startWith(ctx, r.args, nil)
	if err != nil {
		return err
	}
	r.proc = proc
	return nil
}

// startWith runs the server on r.port with args and waits until PING answers, or fails in a
// way up accepts (nil: only a PONG will do).
func (r *Redis) startWith(ctx context.Context, args []string, up func(error) bool) (*process, error) {
	args = append([]string{"--port", strconv.Itoa(r.port)}, args...)
	proc, err := startProcess(r.bin, args, r.Dir, nil, syscall.SIGTERM, r.log)
	if err != nil {
		return nil, err
	}
	if err := proc.waitReady(ctx, func(ctx context.Context) error {
		if err := pingRedis(ctx, r.URL); err != nil && (up == nil || !up(err)) {
			return err
		}
		return nil
	}); err != nil {
		proc.stop()
		return nil, err
	}
	return proc, nil
}

// Restart stops the server and starts it again on the same port, empty.
func (r *Redis) Restart(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.proc.stop(); err != nil {
		return fmt.Errorf("restart redis %s: %w", r.Addr, err)
	}
	if err := r.start(ctx); err != nil {
		return fmt.Errorf("restart redis %s: %w", r.Addr, err)
	}
	return nil
}

// RestartLoading stops the server and starts it again on the same port, then keeps it
// LOADING its dump file until release is called: a restart whose LOADING phase lasts as long
// as a test needs, by construction rather than by the size of the dataset. While held, the
// server answers every data command with -LOADING (within about holdStep); release lets it
// finish loading and returns once it answers PING.
//
// The hold is Redis's own debug delay per key loaded (key-load-delay), with client requests
// served after every KiB read: the dump (see FillForLoading) needs keys of a KiB or more,
// and keys × holdStep bounds the hold. Restart and Stop end a hold too.
func (r *Redis) RestartLoading(ctx context.Context) (release func(context.Context) error, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.proc.stop(); err != nil {
		return nil, fmt.Errorf("restart redis %s: %w", r.Addr, err)
	}
	held := append(r.args[:len(r.args):len(r.args)],
		"--key-load-delay", strconv.Itoa(int(holdStep/time.Microsecond)),
		"--loading-process-events-interval-bytes", "1024")
	proc, err := r.startWith(ctx, held, func(err error) bool { return redis.IsLoadingError(err) })
	if err != nil {
		return nil, fmt.Errorf("restart redis %s held loading: %w", r.Addr, err)
	}
	r.proc = proc
	return func(ctx context.Context) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.proc != proc {
			return nil // restarted or stopped since: nothing is held
		}
		c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
		defer c.Close()
		if err := c.ConfigSet(ctx, "key-load-delay", "0").Err(); err != nil {
			return fmt.Errorf("release redis %s from LOADING: %w", r.Addr, err)
		}
		if err := proc.waitReady(ctx, func(ctx context.Context) error { return pingRedis(ctx, r.URL) }); err != nil {
			return fmt.Errorf("release redis %s from LOADING: %w", r.Addr, err)
		}
		return nil
	}, nil
}

// holdStep is how long a held LOADING server sleeps after each key it loads: the longest a
// client waits for its -LOADING answer.
const holdStep = 10 * time.Millisecond

// FillForLoading stores keys string keys of valueBytes each (at least a KiB, so that a held
// LOADING answers clients between keys) and saves them to the dump file that the next
// restart loads. keys × 10 ms is the longest RestartLoading can hold the server LOADING.
func (r *Redis) FillForLoading(ctx context.Context, keys, valueBytes int) error {
	if valueBytes < 1024 {
		return fmt.Errorf("fill redis %s for loading: values of %d bytes; want at least 1024", r.Addr, valueBytes)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	// Incompressible, so the dump keeps every byte; one value is sent, the rest are copies
	// made by the server (cheap for a test under -race).
	value := make([]byte, valueBytes)
	for i := range value {
		value[i] = byte(i*7919 + i*i*31)
	}
	if err := c.Set(ctx, "fill:0", value, 0).Err(); err != nil {
		return fmt.Errorf("fill redis %s: %w", r.Addr, err)
	}
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := 1; k < keys; k++ {
			p.Copy(ctx, "fill:0", "fill:"+strconv.Itoa(k), 0, false)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("fill redis %s: %w", r.Addr, err)
	}
	if err := c.Save(ctx).Err(); err != nil {
		return fmt.Errorf("fill redis %s: SAVE: %w", r.Addr, err)
	}
	return nil
}

// Stop shuts the server down and removes its directory if StartRedis created it.
func (r *Redis) Stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.proc.stop()
	if r.removeDir {
		err = errors.Join(err, os.RemoveAll(r.Dir))
	}
	return err
}

// RedisReachable reports whether a server at url answers PING within a couple of seconds.
func RedisReachable(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return pingRedis(ctx, url) == nil
}

func pingRedis(ctx context.Context, url string) error {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	opt.DialTimeout = time.Second
	opt.MaxRetries = -1 // the callers poll; a retry inside would only blur the timeout
	c := redis.NewClient(opt)
	defer c.Close()
	return c.Ping(ctx).Err()
}
