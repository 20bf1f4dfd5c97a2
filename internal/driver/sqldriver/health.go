package sqldriver

import (
	"context"

	"github.com/outboxkit/outbox/internal/driver"
)

// TableHealth reads the tables' storage and the purge horizon through the
// dialect.
func (d *Driver) TableHealth(ctx context.Context) (driver.TableHealth, error) {
	h, err := d.d.TableHealth(ctx, d.db, d.schema)
	return h, d.wrap(err)
}
