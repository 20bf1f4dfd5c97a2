package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// output is where a command's results go (stdout). It keeps the first write
// error, so that output lost to a closed pipe or a full disk fails the
// command instead of passing silently.
type output struct {
	w   io.Writer
	err error
}

func (o *output) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	if err != nil {
		o.err = fmt.Errorf("write output: %w", err)
	}
	return n, err
}

// printf writes a result line; a failure is kept in o.err.
func (o *output) printf(format string, args ...any) { _, _ = fmt.Fprintf(o, format, args...) }

// notef writes a note for the operator (narration, a hint) to stderr. There
// is nowhere to report a failed write to stderr.
func notef(w io.Writer, format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, padding int) *table {
	return &table{tw: tabwriter.NewWriter(w, 0, 0, padding, ' ', 0)}
}

// row adds a row; cells are separated by tabs. The tabwriter buffers rows,
// so write errors surface in flush.
func (t *table) row(format string, args ...any) { _, _ = fmt.Fprintf(t.tw, format, args...) }

func (t *table) flush() error { return t.tw.Flush() }
