package outboxadmin

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIDResult(t *testing.T) {
	t.Parallel()
	ids := make([]int64, maxIDs)
	var changed []int64
	for i := range ids {
		ids[i] = int64(i + 1)
		if i%3 == 0 {
			changed = append(changed, int64(i+1))
		}
	}
	slices.Reverse(changed)
	res := idResult(ids, changed)
	require.Equal(t, int64(len(changed)), res.Count)
	require.Len(t, res.Unchanged, len(ids)-len(changed))
	for _, id := range res.Unchanged {
		require.NotZero(t, (id-1)%3, id)
	}
	require.Equal(t, []int64{}, idResult([]int64{1}, nil).Changed)
}

// BenchmarkIDResult is an action naming maxIDs events of which half
// changed; go test -run '^$' -bench IDResult ./outboxadmin.
func BenchmarkIDResult(b *testing.B) {
	ids := make([]int64, maxIDs)
	var changed []int64
	for i := range ids {
		ids[i] = int64(i + 1)
		if i%2 == 0 {
			changed = append(changed, int64(i+1))
		}
	}
	for b.Loop() {
		idResult(ids, changed)
	}
}
