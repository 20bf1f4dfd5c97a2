package outbox

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
)

// The per-partition limit of an ordered relay's reads starts at its floor
// (a batch from about an eighth of the partitions at 4 batches in flight),
// rises when reads come back short for it or find every partition with a
// backlog busy, and sinks back to the floor while reads fill.
func TestPerPartitionLimitAdapts(t *testing.T) {
	t.Parallel()
	const size, inFlight = 1000, 4
	// read is a read of n events that took the limit from the partitions
	// capped, which are then in flight until done.
	p := &partitions{held: driver.Partitions, capped: map[int32]bool{}}
	read := func(n int, capped ...int32) driver.Claim {
		for _, part := range capped {
			p.capped[part] = true
		}
		return driver.Claim{Events: make([]driver.Event, n), Capped: capped}
	}
	done := func() { clear(p.capped) }
	require.Equal(t, 32, p.nextPerPart(size, inFlight), "1,000 × 4 / 256 partitions, rounded up, twice")

	ten := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	p.adaptPerPart(read(320, ten...), size, inFlight) // 10 keys, 32 each: 680 missing
	require.Equal(t, 100, p.perPart)
	p.adaptPerPart(read(0), size, inFlight) // their partitions are all in flight
	require.Equal(t, 200, p.perPart)
	p.adaptPerPart(read(0), size, inFlight) // once for those batches: some may have held no more
	require.Equal(t, 200, p.perPart)
	done()
	p.adaptPerPart(read(0), size, inFlight) // nothing in flight had more: nothing to read
	require.Equal(t, 200, p.perPart)
	p.adaptPerPart(read(150), size, inFlight) // light traffic
	require.Equal(t, 200, p.perPart)
	p.adaptPerPart(driver.Claim{Events: make([]driver.Event, 300), Capped: []int32{1}, Cut: true}, size, inFlight)
	require.Equal(t, 200, p.perPart, "a read the byte budget or a suspect cut says nothing of the limit")
	p.adaptPerPart(read(200, 1), size, inFlight)
	p.adaptPerPart(driver.Claim{Held: true}, size, inFlight)
	require.Equal(t, size, p.perPart, "never above a batch; a read the horizon held back leaves it")
	done()
	for range 100 {
		p.adaptPerPart(read(size), size, inFlight)
	}
	require.Equal(t, 32, p.perPart, "full reads bring it back to the floor, not below")

	p.held = 0
	require.Equal(t, size, p.nextPerPart(size, inFlight), "no partitions held yet: no limit")
	p.held = 64 // other relays joined: the floor rises with fewer partitions
	require.Equal(t, 126, p.nextPerPart(size, inFlight), "and the limit held without partitions is not kept")
}
