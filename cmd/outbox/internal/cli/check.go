package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/cmd/outbox/internal/check"
)

// ExitInterrupted is the exit code of a check stopped by SIGINT or
// SIGTERM, as a shell reports a process ended by SIGINT.
const ExitInterrupted = 130

// checkFlags are outbox check's flags.
type checkFlags struct {
	cfg       check.Config
	sinkURL   string
	relayArgs []string
	asJSON    bool
}

func (a *app) checkCommand() *cobra.Command {
	var cf checkFlags
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Prove on your own database that no event is lost while relays crash and connections drop",
		Long: `check runs a self-contained chaos test against the database that
--database-url names: it creates a scratch outbox of its own (a schema
outbox_check_<random> on PostgreSQL, a database of that name on MySQL/MariaDB,
a file of that name beside the SQLite file), writes --events events spread
over --aggregates aggregates for --duration, and relays them with --relays
outbox relay processes (this same binary) that it SIGKILLs --kills times at
random moments and restarts, while a TCP proxy between the relays and the
database resets, refuses and blackholes their connections --cuts times.
Then it waits for every event to be delivered and reports lost, ghost,
duplicated, out-of-order (per aggregate, informational: the relay does not
order deliveries) and dead-lettered events.

By default the relays publish to a local HTTP receiver of the check's own,
which counts every delivery. With --sink they publish to your sink instead,
and the check verifies delivery by the sink's acknowledgements only (the
events the relays marked processed): it cannot see what the sink did with an
event, nor duplicates.

It never touches your outbox tables. The scratch outbox is dropped at the
end — after a failure and after Ctrl-C too — unless --keep is given.

Exit codes: 0 when no event was lost and no ghost appeared, 1 when one was
(or the check could not run), 2 on bad usage, 130 when interrupted (the
report then shows what finished). docs/check.md has the details.`,
		Example: `  outbox check --database-url postgres://app@db.internal:5432/app
  outbox check --database-url postgres://app@pgbouncer:6432/app --pgbouncer
  outbox check --sink 'nats://127.0.0.1:4222?stream=CHECK' --events 5000 --duration 1m --json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error { return a.runCheck(cmd, &cf) }),
	}
	f := cmd.Flags()
	f.IntVar(&cf.cfg.Events, "events", check.EventsDefault, "events to write")
	f.IntVar(&cf.cfg.Aggregates, "aggregates", check.AggregatesDefault, "aggregates the events are spread over")
	f.IntVar(&cf.cfg.Relays, "relays", check.RelaysDefault, "relay processes running at once")
	f.DurationVar(&cf.cfg.Duration, "duration", check.DurationDefault, "how long events are written and faults injected")
	f.IntVar(&cf.cfg.Kills, "kills", check.KillsDefault, "relay processes SIGKILLed (and restarted) during --duration; 0 for none")
	f.IntVar(&cf.cfg.Cuts, "cuts", check.CutsDefault, "network faults (connection resets, refusals, blackholes) between the relays and the database; 0 for none, and no proxy")
	f.DurationVar(&cf.cfg.DrainTimeout, "drain-timeout", check.DrainTimeoutDefault, "after --duration, how long to wait for every event to be delivered; what is left counts as lost")
	f.StringVar(&cf.sinkURL, "sink", "", "publish to this sink instead of the local receiver (any relay --sink URL; $"+EnvSinkURL+" is not read): delivery is then verified by acknowledgements only")
	f.StringArrayVar(&cf.relayArgs, "relay-arg", nil, "an argument passed to every relay, such as --relay-arg=--route=check.{event_type} (repeatable)")
	f.BoolVar(&cf.cfg.Keep, "keep", false, "keep the scratch outbox for inspection instead of dropping it")
	f.Uint64Var(&cf.cfg.Seed, "seed", 0, "seed of the random choices (fault moments, aggregates), to repeat a run; 0 picks one")
	f.BoolVar(&cf.asJSON, "json", false, "print the report as JSON")
	return cmd
}

func (a *app) runCheck(cmd *cobra.Command, cf *checkFlags) error {
	if err := checkPositive(cmd, map[string]bool{
		"events": cf.cfg.Events > 0, "aggregates": cf.cfg.Aggregates > 0, "relays": cf.cfg.Relays > 0,
		"duration": cf.cfg.Duration > 0, "drain-timeout": cf.cfg.DrainTimeout > 0,
	}); err != nil {
		return err
	}
	for name, v := range map[string]*int{"kills": &cf.cfg.Kills, "cuts": &cf.cfg.Cuts} {
		switch {
		case *v < 0:
			return usagef("invalid --%s %d: use 0 or more", name, *v)
		case *v == 0:
			*v = -1 // none, not the default
		}
	}
	if cf.cfg.Events > maxCheckEvents {
		return usagef("invalid --events %d: use at most %d", cf.cfg.Events, maxCheckEvents)
	}
	if cf.cfg.Relays > maxCheckRelays {
		return usagef("invalid --relays %d: use at most %d", cf.cfg.Relays, maxCheckRelays)
	}
	if cmd.Flags().Changed("schema") {
		return usagef("invalid --schema: outbox check creates a scratch outbox of its own and never touches yours; remove the flag")
	}
	if cmd.Flags().Changed("sink") && cf.sinkURL == "" {
		return usagef("invalid --sink: is empty: name a sink URL, or remove the flag for the local receiver")
	}
	db, raw, err := a.parseDatabase()
	if err != nil {
		return err
	}
	cfg := cf.cfg
	cfg.Postgres = db.Postgres // nil for SQLite and MySQL/MariaDB
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the outbox binary to run relays: %w", err)
	}
	a.redact.add(cf.sinkURL)
	cfg.DatabaseURL, cfg.PgBouncer, cfg.Sink, cfg.RelayArgs = raw, a.pgbouncer, cf.sinkURL, cf.relayArgs
	cfg.Executable, cfg.Env, cfg.Logger = exe, os.Environ(), a.logger
	rep, err := check.Run(cmd.Context(), cfg)
	interrupted := cmd.Context().Err() != nil
	// A run that failed for another reason has nothing to count.
	if rep != nil && (err == nil || interrupted) {
		rep.Database = a.redact.String(redactDatabaseURL(raw))
		rep.LastExit = a.redact.String(rep.LastExit)
		if cf.sinkURL != "" {
			rep.Sink = describeSink(cf.sinkURL, a.redact)
		}
		if perr := a.printCheckReport(rep, cf.asJSON); perr != nil {
			return perr
		}
	}
	switch {
	case errors.Is(err, check.ErrRelayUsage):
		return &usageError{err: err}
	case err != nil && interrupted:
		return &exitError{code: ExitInterrupted, err: err}
	case err != nil:
		return err
	case rep.Interrupted:
		return &exitError{code: ExitInterrupted, err: errors.New("the check stopped before it finished; the report shows what did")}
	case !rep.Passed:
		return fmt.Errorf("check failed: %d lost, %d ghost events (see the report)", rep.Lost, rep.Ghosts)
	}
	return nil
}

// Bounds of outbox check's flags: the check keeps every event ID in
// memory, and each relay holds database connections.
const (
	maxCheckEvents = 10_000_000
	maxCheckRelays = 64
)

// printCheckReport writes rep as text or JSON on stdout.
func (a *app) printCheckReport(rep *check.Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		if err := enc.Encode(rep); err != nil {
			return err
		}
		return a.stdout.err
	}
	verdict := "PASS: no event lost, no ghost event"
	switch {
	case rep.Interrupted:
		verdict = "INTERRUPTED: partial report"
	case !rep.Passed:
		verdict = fmt.Sprintf("FAIL: %d lost, %d ghost events", rep.Lost, rep.Ghosts)
	}
	a.stdout.printf("outbox check: %s\n", verdict)
	t := newTable(a.stdout, 2)
	scratch := rep.Scratch + " (dropped)"
	if rep.Kept {
		scratch = rep.Scratch + " (kept: drop it when done)"
	}
	sink := "local receiver (every delivery counted)"
	if rep.Verified == check.VerifyAcknowledgements {
		sink = rep.Sink + " (verified by acknowledgements only)"
	}
	t.row("  database\t%s\n", rep.Database)
	t.row("  scratch\t%s\n", scratch)
	t.row("  sink\t%s\n", sink)
	written := fmt.Sprintf("%d events on %d aggregates", rep.Written, rep.Aggregates)
	if rep.WriteRetries > 0 {
		written += fmt.Sprintf(" (%d failed writes retried)", rep.WriteRetries)
	}
	t.row("  written\t%s\n", written)
	t.row("  relays\t%d processes: %d killed, %d restarted, %d exited on their own\n", rep.Relays, rep.Kills, rep.Restarts, rep.RelayExits)
	if rep.LastExit != "" {
		t.row("  last exit\t%s\n", printableLine(rep.LastExit))
	}
	if rep.ProxySkipped != "" {
		t.row("  network\tno faults: %s\n", rep.ProxySkipped)
	} else {
		t.row("  network\t%d resets, %d refusals, %d blackholes\n", rep.Resets, rep.Refusals, rep.Blackholes)
	}
	delivered := fmt.Sprintf("%d events", rep.Delivered)
	if rep.Deliveries != nil {
		delivered += fmt.Sprintf(" in %d deliveries", *rep.Deliveries)
	}
	t.row("  delivered\t%s\n", delivered)
	if rep.Interrupted {
		t.row("  lost\tnot counted: interrupted with %d events undelivered\n", rep.Undelivered)
	} else {
		t.row("  lost\t%d%s\n", rep.Lost, idList(rep.LostIDs))
	}
	t.row("  ghosts\t%d%s\n", rep.Ghosts, idList(rep.GhostIDs))
	t.row("  duplicated\t%s\n", optCount(rep.Duplicated, "redeliveries after kills and cuts: expected, at-least-once"))
	t.row("  out of order\t%s\n", optCount(rep.OutOfOrder, "per aggregate; informational, the relay does not order deliveries"))
	t.row("  dead-lettered\t%d\n", rep.DeadLettered)
	t.row("  elapsed\t%s (seed %d)\n", time.Duration(rep.Elapsed).Round(100*time.Millisecond), rep.Seed)
	if err := t.flush(); err != nil {
		return err
	}
	return a.stdout.err
}

// idList is " (IDs 3, 17, …)" for a non-empty sample.
func idList(ids []int) string {
	if len(ids) == 0 {
		return ""
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return " (IDs " + strings.Join(s, ", ") + ")"
}

// optCount is n with a note, or why there is no n.
func optCount(n *int, note string) string {
	if n == nil {
		return "unknown: counted only with the local receiver"
	}
	return fmt.Sprintf("%d (%s)", *n, note)
}

// printableLine replaces control characters, which a relay's stderr may
// hold, so that they cannot drive the terminal.
func printableLine(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

// exitError is an error with an exit code of its own.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
