package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// relayFlagNames maps RelayConfig fields to the flags that set them, so a
// configuration error names what the operator typed.
var relayFlagNames = map[string]string{
	"BatchSize": "--batch-size", "Workers": "--workers", "PollInterval": "--poll-interval",
	"Lease": "--lease", "SinkTimeout": "--sink-timeout", "MaxAttempts": "--max-attempts",
	"BackoffBase": "--backoff-base", "BackoffMax": "--backoff-max", "RelayID": "--relay-id",
	"Sink": "--sink", "ShutdownTimeout": "--shutdown-timeout",
}

func (a *app) relayCommand() *cobra.Command {
	var (
		sinkURL string
		cfg     outbox.RelayConfig
		so      sinkOptions
		obs     observability
	)
	cmd := &cobra.Command{
		Use:   "relay --sink URL",
		Short: "Publish pending events to a sink until stopped",
		Long: `relay claims due pending events in batches under a lease, publishes them to
the sink and marks them processed; failed publishes are retried with
exponential backoff and dead-lettered (status failed) after --max-attempts.
Any number of relays may serve one table.

The --sink URL's scheme picks the sink:
  stdout:             JSON lines on standard output
  http://… https://…  CloudEvents webhook (HTTP POST), signed with --webhook-secret

It runs until SIGINT or SIGTERM, then stops claiming, lets in-flight batches
finish (events still publishing after --shutdown-timeout are released to
pending without spending an attempt) and exits 0. Its connections show in pg_stat_activity as
application_name outbox-relay:<relay-id>.`,
		Example: "  outbox relay --sink stdout:\n  outbox relay --sink https://example.com/hooks/outbox --webhook-secret \"$SECRET\"",
		Args:    cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if sinkURL == "" {
				return usagef("missing --sink: say where to publish, such as --sink stdout: or --sink https://example.com/hook")
			}
			if err := checkPositive(cmd, map[string]bool{
				"batch-size": cfg.BatchSize > 0, "workers": cfg.Workers > 0, "poll-interval": cfg.PollInterval > 0,
				"lease": cfg.Lease > 0, "sink-timeout": cfg.SinkTimeout > 0, "max-attempts": cfg.MaxAttempts > 0,
				"backoff-base": cfg.BackoffBase > 0, "backoff-max": cfg.BackoffMax > 0, "sink-concurrency": so.Concurrency > 0,
				"shutdown-timeout": cfg.ShutdownTimeout > 0,
			}); err != nil {
				return err
			}
			if err := obs.check(a.redact); err != nil {
				return err
			}
			if !cmd.Flags().Changed("sink-timeout") {
				// Leave it to the library: the default, or half the lease
				// when that is shorter.
				cfg.SinkTimeout = 0
			}
			if so.WebhookSecret == "" {
				so.WebhookSecret = os.Getenv(EnvWebhookSecret)
			}
			a.redact.add(so.WebhookSecret)
			pc, err := a.poolConfig("")
			if err != nil {
				return err
			}
			cfg.Schema, cfg.Logger = a.schema, a.logger
			if cfg.RelayID == "" {
				cfg.RelayID = outbox.DefaultRelayID()
			}
			cfg = cfg.WithDefaults()
			so.Timeout, so.Stdout, so.Logger = cfg.SinkTimeout, a.stdout, a.logger

			sink, err := openSink(sinkURL, so, a.redact)
			if err != nil {
				return err
			}
			defer func() {
				if err := closeSink(sink); err != nil {
					a.logger.Warn("closing the sink failed", "error", err)
				}
			}()
			cfg.Sink = sink
			if err := cfg.Validate(); err != nil {
				return relayConfigError(err)
			}
			return a.runRelay(cmd.Context(), pc, cfg, describeSink(sinkURL, a.redact), &obs)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&sinkURL, "sink", "", "where to publish: stdout:, http://… or https://… (required)")
	f.IntVar(&cfg.BatchSize, "batch-size", outbox.BatchSizeDefault, "most events claimed and published at once")
	f.IntVar(&cfg.Workers, "workers", outbox.WorkersDefault, "claim-publish-mark loops running at once")
	f.DurationVar(&cfg.PollInterval, "poll-interval", outbox.PollIntervalDefault, "wait after a claim that came back short")
	f.DurationVar(&cfg.Lease, "lease", outbox.LeaseDefault, "how long a claim holds its events before another relay may take them over")
	f.DurationVar(&cfg.SinkTimeout, "sink-timeout", outbox.SinkTimeoutDefault, "bound on one publish, shorter than --lease; unset, half the lease when that is shorter")
	f.IntVar(&cfg.MaxAttempts, "max-attempts", outbox.MaxAttemptsDefault, "failed publishes before an event is dead-lettered (status failed)")
	f.DurationVar(&cfg.BackoffBase, "backoff-base", outbox.BackoffBaseDefault, "retry delay base: the n-th failure waits backoff-base·2^n (with jitter)")
	f.DurationVar(&cfg.BackoffMax, "backoff-max", outbox.BackoffMaxDefault, "longest retry delay")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 0, "on SIGTERM, how long in-flight batches may finish before they are released (default sink timeout + 5s, within the lease)")
	f.StringVar(&cfg.RelayID, "relay-id", "", "this relay's name in locked_by, logs and application_name (default hostname:pid)")
	f.StringVar(&so.WebhookSecret, "webhook-secret", "", "webhook: secret that signs each request (default $"+EnvWebhookSecret+")")
	f.IntVar(&so.Concurrency, "sink-concurrency", webhooksink.ConcurrencyDefault, "webhook: requests in flight at once")
	f.StringVar(&so.Source, "source", webhooksink.SourceDefault, "webhook: CloudEvents source attribute (ce-source) of each request")
	obs.addFlags(f)
	return cmd
}

// runRelay connects a pool of the relay's own and runs the relay until ctx
// ends, then stops it gracefully.
func (a *app) runRelay(ctx context.Context, pc *pgxpool.Config, cfg outbox.RelayConfig, sinkName string, obs *observability) error {
	pc.ConnConfig.RuntimeParams["application_name"] = "outbox-relay:" + cfg.RelayID
	// One connection per worker, one for the lease rescue, one spare.
	pc.MaxConns = max(pc.MaxConns, int32(min(cfg.Workers+2, 1<<20)))
	pool, err := a.open(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	if err := outbox.NewManager(db, outbox.ManagerConfig{Schema: cfg.Schema}).Ping(ctx); err != nil {
		return a.tableError(err)
	}
	observers, err := a.startObservers(ctx, obs, db, &cfg, sinkName)
	if err != nil {
		return err
	}
	defer observers.stop()
	relay, err := outbox.NewRelay(db, cfg)
	if err != nil {
		return relayConfigError(err)
	}
	a.logger.Info("relay publishing to sink", "sink", sinkName, "relay_id", cfg.RelayID,
		"application_name", pc.ConnConfig.RuntimeParams["application_name"])
	return relay.Run(ctx)
}

// checkPositive refuses a numeric flag the operator set to zero or less:
// left alone, zero would silently mean the default.
func checkPositive(cmd *cobra.Command, positive map[string]bool) error {
	var bad []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if ok, checked := positive[f.Name]; checked && !ok {
			bad = append(bad, f.Name)
		}
	})
	if len(bad) > 0 {
		f := cmd.Flags().Lookup(bad[0])
		return usagef("invalid --%s %s: use a positive value", f.Name, f.Value.String())
	}
	return nil
}

// relayConfigError names the flag behind an invalid RelayConfig field.
func relayConfigError(err error) error {
	var ce *outbox.ConfigError
	if errors.As(err, &ce) {
		if name, ok := relayFlagNames[ce.Field]; ok {
			return usagef("invalid %s: %v", name, ce.Err)
		}
		return &usageError{err: err}
	}
	return err
}

// closeSink closes sinks that hold resources (connections, goroutines).
func closeSink(s outbox.Sink) error {
	if c, ok := s.(io.Closer); ok {
		if err := c.Close(); err != nil {
			return fmt.Errorf("close sink: %w", err)
		}
	}
	return nil
}
