package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
)

// commit is one committed write transaction: its event's ID and when Commit
// returned, by this host's clock.
type commit struct {
	id int64
	at time.Time
}

// writerRun is a set of writer goroutines. Each runs, per transaction, a
// business INSERT into orders and one outbox write, like an application's
// checkout.
type writerRun struct {
	pool    writerPool
	writer  *outbox.Writer
	payload json.RawMessage
	n       int
	// tokens, when set, paces the writers: one transaction per token, until
	// the channel is closed. Without it they write flat out until deadline.
	tokens   <-chan struct{}
	deadline time.Time
	// afterCommit, when set, runs after each commit (Relay.Wake).
	afterCommit func()
	// keys, when above 0, spreads the events over that many aggregates
	// (an ordered run's).
	keys int
}

// run runs the writers and returns every commit and the time from the start
// until the last writer returned. The first error stops them all.
func (w writerRun) run(ctx context.Context) ([]commit, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		all      []commit
		firstErr error
	)
	start := time.Now()
	for i := range w.n {
		wg.Go(func() {
			commits, err := w.one(ctx, i)
			mu.Lock()
			defer mu.Unlock()
			all = append(all, commits...)
			if err != nil && firstErr == nil {
				firstErr = err
				cancel()
			}
		})
	}
	wg.Wait()
	return all, time.Since(start), firstErr
}

// warm commits one unpaced transaction on each of the writers' n
// connections, holding them all at once so that every one is a different
// connection, and returns those commits. A measured run that follows finds
// its connections open and its statements prepared, as an application's
// are once it runs.
func (w writerRun) warm(ctx context.Context) ([]commit, error) {
	conns := make([]writerConn, 0, w.n)
	defer func() {
		for _, c := range conns {
			c.release()
		}
	}()
	for range w.n {
		c, err := w.pool.acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("writer: connect: %w", err)
		}
		conns = append(conns, c)
	}
	commits := make([]commit, len(conns))
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			id, err := c.checkout(ctx, w.writer, "customer-"+strconv.Itoa(i), 1000, w.payload, w.keys)
			commits[i], errs[i] = commit{id: id, at: time.Now()}, err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("writer: warm-up: %w", err)
		}
	}
	return commits, nil
}

// one is writer i's loop on a connection of its own.
func (w writerRun) one(ctx context.Context, i int) ([]commit, error) {
	conn, err := w.pool.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("writer: connect: %w", err)
	}
	defer conn.release()
	customer := "customer-" + strconv.Itoa(i)
	var commits []commit
	for n := 0; ; n++ {
		if w.tokens != nil {
			select {
			case <-ctx.Done():
				return commits, ctx.Err()
			case _, ok := <-w.tokens:
				if !ok {
					return commits, nil
				}
			}
		} else if !time.Now().Before(w.deadline) {
			return commits, nil
		}
		id, err := conn.checkout(ctx, w.writer, customer, 1000+n%9000, w.payload, w.keys)
		if err != nil {
			return commits, fmt.Errorf("writer: %w", err)
		}
		commits = append(commits, commit{id: id, at: time.Now()})
		if w.afterCommit != nil {
			w.afterCommit()
		}
	}
}

// pace sends rate tokens per second on tokens for d, then closes it. Tokens
// owed while every writer is busy are sent as soon as one is free; those
// still owed when d ends are dropped, so slow writers show as a lower
// achieved rate. It returns the pacing window's length.
func pace(ctx context.Context, rate int, d time.Duration, tokens chan<- struct{}) time.Duration {
	defer close(tokens)
	start := time.Now()
	end := time.NewTimer(d)
	defer end.Stop()
	tick := time.NewTicker(max(time.Second/time.Duration(rate), time.Millisecond))
	defer tick.Stop()
	var sent int64
	// A tick that lands just after the end must not hand out more than the
	// window's share.
	limit := int64(d.Seconds() * float64(rate))
	for {
		select {
		case <-ctx.Done():
			return time.Since(start)
		case <-end.C:
			return time.Since(start)
		case now := <-tick.C:
			due := min(int64(now.Sub(start).Seconds()*float64(rate)), limit)
			for ; sent < due; sent++ {
				select {
				case tokens <- struct{}{}:
				case <-ctx.Done():
					return time.Since(start)
				case <-end.C:
					return time.Since(start)
				}
			}
		}
	}
}
