package localserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a throwaway Redis Cluster of masters without replicas.
type RedisCluster struct {
	Addrs []string // host:port of every master, the seeds for a cluster client
	Nodes []*Redis // the servers, for fault tests that restart one node

	dir       string
	removeDir bool
}

// StartRedisCluster starts masters (at least 3, as redis-cli requires) cluster-enabled
// servers under dir (a new temporary directory if dir is ""), joins them into one cluster
// and returns once every node reports cluster_state:ok. It needs Redis 7 (--cluster-port).
func StartRedisCluster(ctx context.Context, dir string, log io.Writer, masters int) (*RedisCluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("start redis cluster: need at least 3 masters, got %d", masters)
	}
	if log == nil {
		log = io.Discard
	}
	cli, err := findBinary("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("start redis cluster: %w (install the redis-tools package)", err)
	}
	dir, created, err := makeDir(dir, "jobapi-redis-cluster-")
	if err != nil {
		return nil, fmt.Errorf("start redis cluster: %w", err)
	}
	c := &RedisCluster{dir: dir, removeDir: created}
	if err := c.start(ctx, cli, log, masters); err != nil {
		return nil, errors.Join(fmt.Errorf("start redis cluster: %w", err), c.Stop())
	}
	return c, nil
}

func (c *RedisCluster) start(ctx context.Context, cli string, log io.Writer, masters int) error {
	for i := range masters {
		// Redis puts the cluster bus on port+10000 unless told otherwise, which can be taken
		// or beyond 65535 for a port from the ephemeral range: pick it too.
		bus, err := freePort()
		if err != nil {
			return err
		}
		node, err := startRedis(ctx, filepath.Join(c.dir, "node"+strconv.Itoa(i)), log,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "2000")
		if err != nil {
			return err
		}
		c.Nodes = append(c.Nodes, node)
		c.Addrs = append(c.Addrs, node.Addr)
	}

	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	out, err := cmd.CombinedOutput()
	log.Write(out)
	if err != nil {
		return fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	return c.waitOK(ctx)
}

// waitOK waits until every node has learnt the whole slot map; until then a client may be
// sent to a node that still answers CLUSTERDOWN.
func (c *RedisCluster) waitOK(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for _, addr := range c.Addrs {
		client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		var info string
		var err error
		for {
			info, err = client.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			select {
			case <-ctx.Done():
				client.Close()
				return fmt.Errorf("cluster node %s not ok: %v (error %v)\n%s", addr, ctx.Err(), err, info)
			case <-time.After(50 * time.Millisecond):
			}
		}
		client.Close()
	}
	return nil
}

// Stop shuts every node down and removes the directory if StartRedisCluster created it.
func (c *RedisCluster) Stop() error {
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.Stop())
	}
	if c.removeDir {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}
