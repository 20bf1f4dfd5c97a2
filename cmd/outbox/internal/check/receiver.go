package check

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// envTestDrop is a test-only hook: with OUTBOX_CHECK_TEST_DROP=n the local
// receiver acknowledges the n-th distinct event it receives (and every
// redelivery of it) without recording it, as a sink that loses an event
// after acknowledging it would. The check's tests use it to prove that a
// lost event is detected and fails the run.
const envTestDrop = "OUTBOX_CHECK_TEST_DROP"

// payload is the body of every event the check writes.
type payload struct {
	Run       string `json:"run"`
	Aggregate string `json:"aggregate"`
	Seq       int    `json:"seq"`
}

// delivery is a first delivery of an event, in arrival order.
type delivery struct {
	id        int64
	aggregate string
	seq       int
}

// receiver is the local webhook endpoint the relays publish to when no
// --sink is given: it records every delivery and answers 200.
type receiver struct {
	run    string
	ln     net.Listener
	srv    *http.Server
	served chan struct{}
	dropAt int // envTestDrop; 0 for none

	mu       sync.Mutex
	counts   map[int64]int // deliveries per event ID
	first    []delivery    // first deliveries, in arrival order
	foreign  map[int64]int // deliveries that no event of this run explains
	distinct int           // distinct IDs received, the dropped one included
	dropped  int64         // the ID envTestDrop forgets, once chosen
}

func startReceiver(ctx context.Context, run string) (*receiver, error) {
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{run: run, ln: ln, served: make(chan struct{}), counts: map[int64]int{}, foreign: map[int64]int{}}
	r.dropAt, _ = strconv.Atoi(os.Getenv(envTestDrop))
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(r.served)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

// URL is the relays' --sink.
func (r *receiver) URL() string { return "http://" + r.ln.Addr().String() + "/events" }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	id, err := strconv.ParseInt(req.Header.Get("ce-id"), 10, 64)
	if err != nil {
		// Not an event of a relay: nothing to record.
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var p payload
	if json.Unmarshal(body, &p) != nil || p.Run != r.run {
		r.mu.Lock()
		r.foreign[id]++
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		return
	}
	r.mu.Lock()
	if r.counts[id] == 0 && id != r.dropped {
		r.distinct++
		if r.distinct == r.dropAt {
			r.dropped = id
		}
	}
	if id != r.dropped {
		if r.counts[id] == 0 {
			r.first = append(r.first, delivery{id: id, aggregate: p.Aggregate, seq: p.Seq})
		}
		r.counts[id]++
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// snapshot returns copies of what the receiver recorded.
func (r *receiver) snapshot() (counts map[int64]int, first []delivery, foreign map[int64]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	counts = make(map[int64]int, len(r.counts))
	for k, v := range r.counts {
		counts[k] = v
	}
	foreign = make(map[int64]int, len(r.foreign))
	for k, v := range r.foreign {
		foreign[k] = v
	}
	return counts, append([]delivery(nil), r.first...), foreign
}

func (r *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
	_ = r.srv.Close()
	<-r.served
}
