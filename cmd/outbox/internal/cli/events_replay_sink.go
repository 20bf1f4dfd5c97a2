package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxadmin"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// replaySinkFlags are the flags of events replay --sink: where to publish
// (the relay's sink flags) and how to pace and resume.
type replaySinkFlags struct {
	rf       relayFlags // only its sink URL, routing and sink options are used
	since    string
	until    string
	afterID  int64
	rate     float64
	batch    int
	asJSON   bool
	timeout  time.Duration // --sink-timeout
	registry []string      // the flags that go with --sink only
}

// register defines the --sink flags on fl.
func (sf *replaySinkFlags) register(fl *pflag.FlagSet) {
	before := map[string]bool{}
	fl.VisitAll(func(f *pflag.Flag) { before[f.Name] = true })
	rf := &sf.rf
	fl.StringVar(&rf.sinkURL, "sink", "", "publish the delivered (processed and archived) events straight to this sink, as outbox relay --sink takes it, without changing them; without it, replay sends events back to pending")
	fl.StringVar(&sf.since, "since", "", "with --sink: only events created at or after this RFC 3339 time (as --created-after)")
	fl.StringVar(&sf.until, "until", "", "with --sink: only events created before this RFC 3339 time (as --created-before)")
	fl.Int64Var(&sf.afterID, "after-id", 0, "with --sink: start after this event ID, to resume an interrupted replay from the last ID it printed")
	fl.Float64Var(&sf.rate, "rate", 0, "with --sink: publish at most this many events per second; 0 for no limit")
	fl.IntVar(&sf.batch, "batch-size", outbox.ReplayBatchSizeDefault, "with --sink: events read per statement and published per call")
	fl.BoolVar(&sf.asJSON, "json", false, "with --sink: print the result (or the --dry-run count) as one JSON object")
	fl.DurationVar(&sf.timeout, "sink-timeout", outbox.SinkTimeoutDefault, "with --sink: bound on one publish")
	fl.StringVar(&rf.route, "route", route.Default, "with a broker --sink: the template of each event's subject, topic, routing key or stream, as the relay's")
	fl.StringArrayVar(&rf.routeRules, "route-rule", nil, "with a broker --sink: 'PATTERN=TEMPLATE' routes events whose type matches PATTERN to TEMPLATE instead of --route; repeatable")
	fl.StringVar(&rf.so.Source, "source", "", "with --sink: the CloudEvents source attribute of each event (default "+webhooksink.SourceDefault+")")
	fl.StringVar(&rf.so.WebhookSecret, "webhook-secret", "", "with a webhook --sink: secret that signs each request (default $"+EnvWebhookSecret+")")
	fl.StringVar(&rf.so.WebhookCA, "webhook-ca", "", "with an https --sink: PEM file of the CA that signed the endpoint's certificate")
	fl.StringVar(&rf.so.WebhookCert, "webhook-cert", "", "with an https --sink: PEM client certificate to present (with --webhook-key)")
	fl.StringVar(&rf.so.WebhookKey, "webhook-key", "", "with an https --sink: PEM private key of --webhook-cert")
	fl.IntVar(&rf.so.Concurrency, "sink-concurrency", webhooksink.ConcurrencyDefault, "with a webhook --sink: requests in flight at once")
	fl.VisitAll(func(f *pflag.Flag) {
		if !before[f.Name] && f.Name != "sink" {
			sf.registry = append(sf.registry, f.Name)
		}
	})
}

// misplaced names a --sink-only flag given without --sink, or "".
func (sf *replaySinkFlags) misplaced(cmd *cobra.Command) string {
	for _, name := range sf.registry {
		if cmd.Flags().Changed(name) {
			return name
		}
	}
	return ""
}

// replayToSink runs events replay --sink: it checks the flags, counts for
// --dry-run, or publishes and prints the result.
func (a *app) replayToSink(cmd *cobra.Command, args []string, status string, ff *filterFlags, sf *replaySinkFlags, dryRun, yes bool) error {
	switch {
	case len(args) > 0:
		return usagef("replay --sink selects events with filters (--type, --aggregate-id, --since, --until, --after-id), not by ID")
	case status != "" && status != string(outbox.StatusProcessed):
		return usagef("invalid --status %q: replay --sink publishes delivered events only (processed and archived); leave --status out", clip(status))
	case sf.rf.sinkURL == "":
		return usagef("invalid --sink: is empty: name the sink, such as --sink nats://127.0.0.1:4222")
	case cmd.Flags().Changed("since") && cmd.Flags().Changed("created-after"):
		return usagef("--since and --created-after set the same bound: keep one")
	case cmd.Flags().Changed("until") && cmd.Flags().Changed("created-before"):
		return usagef("--until and --created-before set the same bound: keep one")
	case sf.afterID < 0:
		return usagef("invalid --after-id %d: use an event ID, or 0 to start from the first", sf.afterID)
	case sf.rate < 0 || math.IsNaN(sf.rate) || math.IsInf(sf.rate, 0):
		return usagef("invalid --rate %v: use events per second, such as --rate 500, or 0 for no limit", sf.rate)
	case sf.batch < 1 || sf.batch > outbox.ReplayBatchSizeMax:
		return usagef("invalid --batch-size %d: use 1 to %d", sf.batch, outbox.ReplayBatchSizeMax)
	case sf.timeout <= 0:
		return usagef("invalid --sink-timeout %v: use a positive duration", sf.timeout)
	}
	if sf.since != "" {
		ff.createdAfter = sf.since
	}
	if sf.until != "" {
		ff.createdBefore = sf.until
	}
	filtered := ff.given(cmd) || cmd.Flags().Changed("since") || cmd.Flags().Changed("until")
	f, err := ff.filter(outbox.StatusProcessed)
	if err != nil {
		if cmd.Flags().Changed("since") || cmd.Flags().Changed("until") {
			return renameTimeFlags(err)
		}
		return err
	}
	if !filtered && !yes && !dryRun {
		return usagef("replaying every delivered event to the sink sends the whole history: narrow it with --type, --aggregate-type, --aggregate-id, --since or --until, check the count with --dry-run, or pass --yes")
	}
	// The sink's settings: flags, then $OUTBOX_WEBHOOK_SECRET, then the
	// --config file's relay keys (routing, source, webhook), so a replay
	// reaches consumers as the relay does. The sink URL itself is the
	// flag's: the environment's $OUTBOX_SINK is the relay's, not this.
	rf := &sf.rf
	m := &merger{flags: cmd.Flags(), file: a.file, origins: map[string]string{}}
	if err := m.apply(a, rf); err != nil {
		return err
	}
	router, err := m.router(rf)
	if err != nil {
		return err
	}
	a.redact.add(rf.so.WebhookSecret)
	p := outbox.ReplayParams{EventFilter: f, AfterID: sf.afterID, BatchSize: sf.batch, Rate: sf.rate, SinkTimeout: sf.timeout}
	desc := describeSink(rf.sinkURL, a.redact)
	ctx := cmd.Context()
	mgr, closePool, err := a.manager(ctx)
	if err != nil {
		return err
	}
	defer closePool()
	if dryRun {
		if _, err := parseSinkScheme(rf.sinkURL); err != nil {
			return err
		}
		n, err := mgr.CountReplay(ctx, p)
		if err != nil {
			return err
		}
		if sf.asJSON {
			return a.printJSON(outboxadmin.ReplayToSinkResultJSON{Sink: desc, DryRun: true, Count: n, AfterID: sf.afterID})
		}
		a.stdout.printf("would publish %d delivered events to %s (dry run: nothing sent)\n", n, desc)
		return nil
	}
	so := rf.so
	so.Timeout, so.Stdout, so.Logger, so.Router, so.given, so.name = p.SinkTimeout, a.stdout, a.logger, router, m.sinkOptionsGiven(), m.name
	sink, err := openSink(ctx, rf.sinkURL, so, a.redact)
	if err != nil {
		return describeSinkError(desc, err)
	}
	defer func() {
		if err := closeSink(sink); err != nil {
			a.logger.Warn("closing the sink failed", "error", err)
		}
	}()
	pr := newProgress(a.stderr, "published")
	if isTerminal(a.stderr) {
		total, err := mgr.CountReplay(ctx, p)
		if err != nil {
			return err
		}
		pr.setTotal(total)
	}
	p.Progress = func(rp outbox.ReplayProgress) { pr.update(rp.Published) }
	res, err := mgr.ReplayTo(ctx, sink, p)
	pr.done()
	complete := err == nil
	if sf.asJSON {
		if jerr := a.printJSON(outboxadmin.NewReplayToSinkResultJSON(desc, sf.afterID, res, complete)); jerr != nil {
			return jerr
		}
	} else if sinkSchemeOf(rf.sinkURL) == "stdout" {
		// The events are on stdout: keep the summary out of them.
		notef(a.stderr, "published %d events to %s; last ID %d\n", res.Published, desc, res.LastID)
	} else {
		a.stdout.printf("published %d events to %s; last ID %d\n", res.Published, desc, res.LastID)
	}
	if err != nil {
		var ce *outbox.ConfigError
		if errors.As(err, &ce) {
			return &usageError{err: err}
		}
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("replay stopped after %d events: resume with --after-id %d", res.Published, res.LastID)
		}
		return fmt.Errorf("replay stopped after %d events: resume with --after-id %d: %w", res.Published, res.LastID, err)
	}
	return nil
}

// renameTimeFlags says --since and --until in an error about the time
// flags they stand for.
func renameTimeFlags(err error) error {
	msg := err.Error()
	for from, to := range map[string]string{"--created-after": "--since", "--created-before": "--until"} {
		msg = strings.ReplaceAll(msg, from, to)
	}
	return &usageError{err: errors.New(msg)}
}

// parseSinkScheme checks that raw names a known sink, without connecting.
func parseSinkScheme(raw string) (string, error) {
	name := sinkSchemeOf(raw)
	for _, s := range sinkSchemes {
		if s.name == name {
			return name, nil
		}
	}
	if !schemeSyntax.MatchString(name) {
		return "", usagef("invalid --sink: it has no URL scheme: use one of %s, such as nats://127.0.0.1:4222", schemeNames())
	}
	return "", usagef("unknown sink scheme %q: use one of %s", clip(name), schemeNames())
}

// printJSON prints v, an outboxadmin document, as one line of JSON.
func (a *app) printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	a.stdout.printf("%s\n", b)
	return nil
}
