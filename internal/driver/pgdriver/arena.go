package pgdriver

import "unsafe"

// arena holds copies of a claimed batch's variable-length columns (event
// type, aggregate, idempotency key, payload) in a few shared buffers, so a
// claim allocates per batch rather than per event. What it hands out stays
// valid and unchanged for good: bytes are only ever appended to a buffer,
// and a full buffer is replaced, never grown in place. A sink that keeps an
// event, or one of its strings, keeps the buffers holding its values alive:
// at most arenaMaxChunk bytes each.
type arena struct{ buf []byte }

const (
	arenaMinChunk = 4 << 10
	arenaMaxChunk = 256 << 10
	// arenaOwnChunk is the size from which a value gets a buffer of its
	// own: a large payload neither strands the rest of the current buffer
	// nor keeps its neighbours alive.
	arenaOwnChunk = arenaMaxChunk / 4
)

// bytes returns a copy of b whose capacity is its length, so appending to
// it never touches a neighbour.
func (a *arena) bytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	if len(b) >= arenaOwnChunk {
		return append(make([]byte, 0, len(b)), b...)
	}
	if cap(a.buf)-len(a.buf) < len(b) {
		a.buf = make([]byte, 0, min(max(2*cap(a.buf), arenaMinChunk), arenaMaxChunk))
	}
	start := len(a.buf)
	a.buf = append(a.buf, b...)
	return a.buf[start:len(a.buf):len(a.buf)]
}

// string returns b as a string backed by the arena.
func (a *arena) string(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	c := a.bytes(b)
	return unsafe.String(&c[0], len(c))
}
