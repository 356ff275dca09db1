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
	args := append([]string{"--port", strconv.Itoa(r.port)}, r.args...)
	proc, err := startProcess(r.bin, args, r.Dir, nil, syscall.SIGTERM, r.log)
	if err != nil {
		return err
	}
	if err := proc.waitReady(ctx, func(ctx context.Context) error { return pingRedis(ctx, r.URL) }); err != nil {
		proc.stop()
		return err
	}
	r.proc = proc
	return nil
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
