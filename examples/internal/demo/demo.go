// Package demo is the scaffolding the example programs share, so each
// program shows only what is its broker's own: configuring the sink and
// consuming what it delivered. Main parses the -db flag and the sink URL
// flag, migrates a schema of the program's own and removes it when done;
// Relay writes events in one transaction, relays them until the consumer
// has read them, and prints the outbox's counts.
package demo

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// DatabaseURLDefault is the local PostgreSQL the programs use without
// -db or $DATABASE_URL.
const DatabaseURLDefault = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Flag is a program's sink URL flag.
type Flag struct {
	Name    string // the flag, such as nats for -nats
	Env     string // the environment variable it defaults to, such as NATS_URL
	Default string // the URL without either
	Usage   string
}

// Demo is a program's database and the schema it migrated.
type Demo struct {
	Pool   *pgxpool.Pool
	DB     outbox.Database
	Schema string
	// ID is a random number; the program names what it creates after
	// it (schema, stream, topic, exchange), so runs do not collide.
	ID uint32
}

// Main parses the flags, connects to the database, migrates a schema named
// after program and ID, and calls run with a context bounded to a minute
// and the sink URL. It drops the schema when run returns, and exits with
// status 1 after printing an error from any step.
func Main(program string, sink Flag, run func(ctx context.Context, d *Demo, sinkURL string) error) {
	dbURL := flag.String("db", envOr("DATABASE_URL", DatabaseURLDefault), "PostgreSQL URL (or $DATABASE_URL)")
	sinkURL := flag.String(sink.Name, envOr(sink.Env, sink.Default), sink.Usage)
	flag.Parse()
	if err := start(program, *dbURL, *sinkURL, run); err != nil {
		fmt.Fprintln(os.Stderr, "examples/"+program+":", err)
		os.Exit(1)
	}
}

func start(program, dbURL, sinkURL string, run func(ctx context.Context, d *Demo, sinkURL string) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	d := &Demo{Pool: pool, DB: outbox.Postgres(pool), ID: rand.Uint32()}
	d.Schema = fmt.Sprintf("outbox_example_%s_%d", program, d.ID)
	if _, err := outboxmigrate.Migrate(ctx, d.DB, outboxmigrate.Config{Schema: d.Schema}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer dropSchema(pool, d.Schema)
	fmt.Println("migrated schema", d.Schema)
	return run(ctx, d, sinkURL)
}

// Checkout returns the three events of one checkout of order o-1: created,
// paid and shipped, each type after typePrefix.
func Checkout(typePrefix string) []outbox.Message {
	return []outbox.Message{
		{EventType: typePrefix + "created", AggregateType: "order", AggregateID: "o-1", CorrelationID: "checkout-7", Payload: map[string]any{"total_cents": 1250}},
		{EventType: typePrefix + "paid", AggregateType: "order", AggregateID: "o-1", CorrelationID: "checkout-7", Payload: map[string]any{"method": "card"}},
		{EventType: typePrefix + "shipped", AggregateType: "order", AggregateID: "o-1", CorrelationID: "checkout-7", Payload: map[string]any{"carrier": "post"}},
	}
}

// Relay writes msgs in one transaction, as the business transaction
// would, starts a relay that publishes them with sink, calls consume to
// read them back, stops the relay and prints the outbox's counts.
func (d *Demo) Relay(ctx context.Context, sink outbox.Sink, msgs []outbox.Message, consume func(ctx context.Context) error) error {
	writer := outbox.NewWriter(outbox.WriterConfig{Schema: d.Schema})
	err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, msgs...)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("wrote %d events in one transaction\n", len(msgs))

	relay, err := outbox.NewRelay(d.DB, outbox.RelayConfig{Sink: sink, Schema: d.Schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if err := relay.Start(ctx); err != nil {
		return err
	}
	relay.Wake()
	if err := consume(ctx); err != nil {
		return err
	}

	if err := relay.Stop(ctx); err != nil {
		return err
	}
	stats, err := outbox.NewManager(d.DB, outbox.ManagerConfig{Schema: d.Schema}).Stats(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("outbox: %d processed, %d pending\n", stats.Processed, stats.Pending)
	return nil
}

func dropSchema(pool *pgxpool.Pool, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
