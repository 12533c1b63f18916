package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"redis-lock/go/redislock"
	"redis-lock/go/redislock/internal/redistest"
)

// Through a Sentinel failover client, waits and renewals reach the master the
// sentinels name, on connections of their own.
func TestASentinelFailoverClient(t *testing.T) {
	t.Parallel() // idle most of the time: beside the other long ones
	master := redistest.Start(t, redistest.Module)
	sentinel := redistest.StartSentinel(t, master)
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "mymaster", SentinelAddrs: []string{sentinel.Addr()},
	})
	defer client.Close()
	locker := redislock.New(client)
	defer locker.Close()
	ctx := context.Background()
	holder, err := locker.TryAcquire(ctx, "job", 600*time.Millisecond)
	must(t, err)
	granted := make(chan error, 1)
	go func() {
		lock, err := locker.Acquire(ctx, "job", time.Second, redislock.WaitFor(5*time.Second))
		if err == nil {
			err = lock.Release(ctx)
		}
		granted <- err
	}()
	time.Sleep(900 * time.Millisecond)
	if err := context.Cause(holder.Context()); err != nil {
		t.Fatalf("lost: %v", err)
	}
	must(t, holder.Release(ctx))
	must(t, <-granted)
}

// After a failover (the sentinels kill the clients of the old master), the locker's
// next call dials the master the sentinels name.
func TestLocksFollowASentinelFailover(t *testing.T) {
	t.Parallel() // idle most of the time: beside the other long ones
	master := redistest.Start(t, redistest.Module)
	replica := redistest.Start(t, redistest.Module)
	replica.ReplicaOf(master)
	sentinel := redistest.StartSentinel(t, master)
	redistest.WaitUntil(t, 20*time.Second, "the sentinel knows the replica", func() bool {
		replicas, _ := sentinel.Query("SENTINEL", "REPLICAS", "mymaster")
		list, _ := replicas.([]any)
		return len(list) == 1
	})
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "mymaster", SentinelAddrs: []string{sentinel.Addr()},
	})
	defer client.Close()
	locker := redislock.New(client)
	defer locker.Close()
	ctx := context.Background()
	before, err := locker.TryAcquire(ctx, "job", 10*time.Second, redislock.WithoutRenewal())
	must(t, err)
	must(t, before.Release(ctx))
	asker := redis.NewClient(&redis.Options{Addr: sentinel.Addr()})
	defer asker.Close()
	// NOGOODSLAVE until the sentinel has heard from the replica lately.
	redistest.WaitUntil(t, 30*time.Second, "a failover the sentinel starts", func() bool {
		return asker.Do(ctx, "SENTINEL", "FAILOVER", "mymaster").Err() == nil
	})
	redistest.WaitUntil(t, 30*time.Second, "the replica promoted", func() bool {
		info, _ := replica.Query("INFO", "replication")
		text, _ := info.(string)
		return strings.Contains(text, "role:master")
	})
	redistest.WaitUntil(t, 30*time.Second, "the old master a replica", func() bool {
		info, _ := master.Query("INFO", "replication")
		text, _ := info.(string)
		return strings.Contains(text, "role:slave") && strings.Contains(text, "master_link_status:up")
	})
	after, err := locker.TryAcquire(ctx, "job", 10*time.Second, redislock.WithoutRenewal())
	must(t, err)
	defer after.Release(ctx)
	if after.Token() <= before.Token() {
		t.Errorf("token %d after %d", after.Token(), before.Token())
	}
	if info, _ := replica.Do("EXISTS", "job").(int64); info != 1 {
		t.Error("not held on the new master")
	}
}
