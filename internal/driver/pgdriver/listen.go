package pgdriver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotifyChannel is the channel writers notify and relays listen on; the
// payload is the schema whose outbox got new events.
const NotifyChannel = "outbox_events"

// listenCheckInterval is how long the LISTEN connection may stay silent
// before Listen pings it: a connection that went half-open (a proxy, a
// firewall or a NAT dropped it without a reset, or the server's host
// vanished) would otherwise wait for notifications forever.
// listenReplyTimeout bounds the ping and the LISTEN statement itself, which
// meets the same silence when the connection goes half-open before its
// reply arrives.
const (
	listenCheckInterval = 15 * time.Second
	listenReplyTimeout  = 5 * time.Second
)

// Listen holds one pool connection in LISTEN and calls wake for every
// notification about this driver's schema, until ctx ends. A lost
// connection is logged through onErr and re-established with backoff;
// Listen returns only when ctx ends.
func (d *Driver) Listen(ctx context.Context, wake func(), onErr func(error)) {
	d.ListenSchemas(ctx, func(schema string) {
		if schema == d.schema {
			wake()
		}
	}, func() { wake() }, onErr)
}

// ListenSchemas holds one pool connection in LISTEN and calls wake with the
// schema each notification names, whatever the schema, until ctx ends;
// connected is called each time the LISTEN takes effect, since events
// committed before it sent no notification this session receives. One
// connection serves every tenant schema of the database. A lost connection
// is logged through onErr and re-established with backoff.
func (d *Driver) ListenSchemas(ctx context.Context, wake func(schema string), connected func(), onErr func(error)) {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := d.listenOnce(ctx, wake, connected)
		if ctx.Err() != nil {
			return
		}
		onErr(err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(delay*2, 5*time.Second)
	}
}

func (d *Driver) listenOnce(ctx context.Context, wake func(string), connected func()) error {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The session is in LISTEN state: never hand it back to the pool.
	defer func() { _ = conn.Hijack().Close(context.WithoutCancel(ctx)) }()
	listenCtx, cancel := context.WithTimeout(ctx, listenReplyTimeout)
	_, err = conn.Exec(listenCtx, "LISTEN "+pgx.Identifier{NotifyChannel}.Sanitize())
	cancel()
	if err != nil {
		return fmt.Errorf("LISTEN failed: %w", err)
	}
	// Events committed before LISTEN took effect sent no notification we
	// can receive: claim once now.
	connected()
	for {
		waitCtx, cancel := context.WithTimeout(ctx, listenCheckInterval)
		n, err := conn.Conn().WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			wake(n.Payload)
		case ctx.Err() == nil && waitCtx.Err() != nil:
			// Silent for a while: make sure the server still answers. A
			// timed-out wait leaves the connection usable.
			pingCtx, cancel := context.WithTimeout(ctx, listenReplyTimeout)
			err := conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return fmt.Errorf("the LISTEN connection stopped answering: %w", err)
			}
		default:
			return err
		}
	}
}
