package inbox

import (
	"context"
	"time"
)

// Hook observes an Inbox. A hook implements one or more of the Hook…
// interfaces; Config.Hooks takes any mix of them.
type Hook any

// HookReceive is called after each message an Inbox received: once its
// transaction committed (Handle, HandleSQL), once the row is stored (Store
// on a pool), or once a duplicate was found. Keep it fast.
type HookReceive interface {
	OnReceive(ctx context.Context, r ReceiveInfo)
}

// ReceiveInfo describes one receive.
type ReceiveInfo struct {
	// Consumer is the Inbox's consumer name.
	Consumer string
	// Duplicate is true when the message had been recorded before.
	Duplicate bool
	// Delay is the time from the event's commit at its source
	// (Message.Time) to this receive, by the two machines' clocks; zero
	// when the message carried no time.
	Delay time.Duration
}
