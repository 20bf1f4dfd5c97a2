package stdoutsink

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewNilWriterIsStdout(t *testing.T) {
	t.Parallel()
	require.Same(t, os.Stdout, New(nil).w)
}
