package outboxadmin

import (
	"context"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
)

// sampler keeps the last History of samples in memory for the charts. A
// sample costs a few index-only counts (outbox.Manager.Sample), so the
// charts never scan the table's history.
type sampler struct {
	mgr      *outbox.Manager
	interval time.Duration
	history  time.Duration

	mu      sync.Mutex
	meter   outbox.FlowMeter
	points  []point       // oldest first
	pending chan struct{} // held while one goroutine samples
}

// point is a sample and the flow since the one before it.
type point struct {
	outbox.Sample
	flow    outbox.Flow
	hasFlow bool
}

func newSampler(mgr *outbox.Manager, interval, history time.Duration) *sampler {
	return &sampler{mgr: mgr, interval: interval, history: history, pending: make(chan struct{}, 1)}
}

// run samples every interval until ctx ends.
func (s *sampler) run(ctx context.Context, timeout time.Duration, onErr func(error)) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		_, err := s.fresh(sctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// fresh returns the points, taking a new sample first when the newest is
// older than most of an interval. Concurrent callers share one sample.
func (s *sampler) fresh(ctx context.Context) ([]point, error) {
	select {
	case s.pending <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.pending }()
	if last, ok := s.newest(); ok && time.Since(last.At) < s.interval*9/10 {
		return s.all(), nil
	}
	smp, err := s.mgr.Sample(ctx)
	if err != nil {
		return nil, err
	}
	s.add(smp)
	return s.all(), nil
}

func (s *sampler) newest() (point, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.points) == 0 {
		return point{}, false
	}
	return s.points[len(s.points)-1], true
}

// add appends smp and drops points older than the history.
func (s *sampler) add(smp outbox.Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := point{Sample: smp}
	p.flow, p.hasFlow = s.meter.Add(smp)
	s.points = append(s.points, p)
	cut := 0
	for cut < len(s.points)-1 && smp.At.Sub(s.points[cut].At) > s.history {
		cut++
	}
	if cut > 0 {
		s.points = append(s.points[:0], s.points[cut:]...)
	}
}

func (s *sampler) all() []point {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]point(nil), s.points...)
}
