package main_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPurge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(t, 7)
	// 0-2 processed 8 days ago, 3 processed now, 4 failed 2 days ago,
	// 5 failed now, 6 pending.
	for _, id := range ids[:4] {
		b.setProcessed(t, id)
	}
	b.exec(t, `UPDATE {table} SET processed_at = now() - interval '8 days' WHERE id = ANY($1)`, ids[:3])
	b.setFailed(t, ids[4], "old")
	b.setFailed(t, ids[5], "new")
	b.exec(t, `UPDATE {table} SET updated_at = now() - interval '2 days' WHERE id = $1`, ids[4])

	// Nothing is 9 days old.
	res := outboxCmd(t, b.schema, "purge", "--older-than", "9d")
	requireOK(t, res)
	require.Equal(t, "purged 0 processed events older than 9d\n", res.stdout)

	// Small batches still delete everything that matches.
	res = outboxCmd(t, b.schema, "purge", "--older-than", "7d", "--batch-size", "2")
	requireOK(t, res) // no progress line: stderr is not a terminal
	require.Equal(t, "purged 3 processed events older than 7d\n", res.stdout)

	res = outboxCmd(t, b.schema, "purge", "--older-than", "36h", "--status", "failed")
	requireOK(t, res)
	require.Equal(t, "purged 1 failed events older than 36h\n", res.stdout)

	s := b.stats(t)
	require.Equal(t, int64(1), s.Processed)
	require.Equal(t, int64(1), s.Failed)
	require.Equal(t, int64(1), s.Pending)
}

func TestPurgeBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing older-than", nil, "missing --older-than"},
		{"bad duration", []string{"--older-than", "7x"}, `invalid --older-than "7x": use a positive duration such as 7d, 36h or 90m`},
		{"bad days", []string{"--older-than", "d"}, `invalid --older-than "d"`},
		{"zero", []string{"--older-than", "0d"}, `invalid --older-than "0d"`},
		{"negative", []string{"--older-than", "-1h"}, `invalid --older-than "-1h"`},
		{"pending", []string{"--older-than", "1h", "--status", "pending"}, `invalid --status "pending": purge deletes processed or failed events only`},
		{"batch size", []string{"--older-than", "1h", "--batch-size", "0"}, "invalid --batch-size 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := outboxCmd(t, b.schema, append([]string{"purge"}, tt.args...)...)
			requireFail(t, res, 2, tt.want)
		})
	}
}
