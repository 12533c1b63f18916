package redistest

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters on loopback, all slots assigned by
// `redis-cli --cluster create`, each node of the same kind.
type Cluster struct {
	t     testing.TB
	Nodes []*Server
}

// StartCluster starts a Cluster of masters nodes of kind k.
func StartCluster(t testing.TB, masters int, k Kind) *Cluster {
	t.Helper()
	settings := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "5000"}
	c := &Cluster{t: t}
	addrs := []string{"--cluster", "create"}
	for i := 0; i < masters; i++ {
		node := StartWith(t, k, Options{Settings: settings})
		c.Nodes = append(c.Nodes, node)
		addrs = append(addrs, node.Addr())
	}
	addrs = append(addrs, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command("redis-cli", addrs...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	WaitUntil(t, 30*time.Second, "every node sees the cluster ok", func() bool {
		for _, node := range c.Nodes {
			c := redis.NewClient(&redis.Options{Addr: node.Addr()})
			info, err := c.ClusterInfo(context.Background()).Result()
			_ = c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
	return c
}

// Client is a go-redis Cluster client of the cluster, closed when the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	var addrs []string
	for _, node := range c.Nodes {
		addrs = append(addrs, node.Addr())
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	c.t.Cleanup(func() { _ = client.Close() })
	return client
}
