// Command outbox operates a transactional outbox in PostgreSQL: it migrates
// the schema, runs the relay, and inspects, retries, replays and purges
// events. Run `outbox --help` for the commands.
package main

import (
	"os"

	"github.com/outboxkit/outbox/cmd/outbox/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
