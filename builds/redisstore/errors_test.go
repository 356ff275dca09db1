package redisstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/redisstore"
)

// fakeRedis answers every command with reply (a raw RESP line such as "-LOADING ..."), or
// closes the connection (reply "close"), or never answers (reply "hang"): the faults a
// real Redis shows while restarting, failing over or hanging, on demand.
func fakeRedis(t *testing.T, reply string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				go func() { <-done; conn.Close() }()
				r := bufio.NewReader(conn)
				for {
					if err := readCommand(r); err != nil {
						return
					}
					switch reply {
					case "close":
						return
					case "hang":
						<-done
						return
					}
					if _, err := io.WriteString(conn, reply+"\r\n"); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil {
		return fmt.Errorf("not a command: %q", line)
	}
	for i := 0; i < n; i++ {
		if line, err = r.ReadString('\n'); err != nil {
			return err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return fmt.Errorf("not a bulk string: %q", line)
		}
		if _, err := r.Discard(size + 2); err != nil {
			return err
		}
	}
	return nil
}

// client talks to addr without go-redis's own retries, so each fault surfaces once.
func client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1, DisableIdentity: true,
		DialTimeout: 200 * time.Millisecond, DialerRetries: 1, ContextTimeoutEnabled: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
}

func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Each fault a Redis shows is classified, counted by the hook, and (when it is an outage)
// marked builds.ErrUnavailable by the store, so that no handler answers it with a 500.
func TestErrorKinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, reply string
		addr        func(*testing.T) string
		want        string
	}{
		{name: "loading", reply: "-LOADING Redis is loading the dataset in memory", want: redisstore.KindLoading},
		{name: "clusterdown", reply: "-CLUSTERDOWN The cluster is down", want: redisstore.KindClusterDown},
		{name: "tryagain", reply: "-TRYAGAIN Multiple keys request during rehashing of slot", want: redisstore.KindClusterDown},
		{name: "readonly", reply: "-READONLY You can't write against a read only replica.", want: redisstore.KindFailover},
		{name: "masterdown", reply: "-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", want: redisstore.KindFailover},
		{name: "reset", reply: "close", want: redisstore.KindReset},
		{name: "hang", reply: "hang", want: redisstore.KindTimeout},
		{name: "refused", addr: closedPort, want: redisstore.KindRefused},
		{name: "bug", reply: "-WRONGTYPE Operation against a key holding the wrong kind of value", want: redisstore.KindOther},
		{name: "missing key", reply: "$-1", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := ""
			if tc.addr != nil {
				addr = tc.addr(t)
			} else {
				addr = fakeRedis(t, tc.reply)
			}
			c := client(addr)
			defer c.Close()
			var mu sync.Mutex
			var seen []string
			c.AddHook(redisstore.ErrorHook(func(kind string) {
				mu.Lock()
				seen = append(seen, kind)
				mu.Unlock()
			}))
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := c.Get(ctx, "k").Err()
			if got := redisstore.ErrorKind(err); got != tc.want {
				t.Errorf("ErrorKind(%v) = %q, want %q", err, got, tc.want)
			}
			mu.Lock()
			if want := []string{tc.want}; tc.want == "" && len(seen) != 0 || tc.want != "" && !slices.Equal(seen, want) {
				t.Errorf("hook saw %q, want %q", seen, tc.want)
			}
			mu.Unlock()

			// Through the store: outages are ErrUnavailable, the rest is not.
			_, err = redisstore.New(c, "p:").TTLs(context.Background(), []int64{1, 2, 3})
			outage := tc.want != "" && tc.want != redisstore.KindOther
			if errors.Is(err, builds.ErrUnavailable) != outage {
				t.Errorf("TTLs: %v; ErrUnavailable = %v, want %v", err, errors.Is(err, builds.ErrUnavailable), outage)
			}
		})
	}
}
