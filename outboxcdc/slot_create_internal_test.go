package outboxcdc

import "testing"

func TestServerVersionNum(t *testing.T) {
	for in, want := range map[string]int{
		"15.20 (Debian 15.20-0+deb12u1)": 150020,
		"17.2":                           170002,
		"16beta1":                        160000,
		"18devel":                        180000,
		"9.6.24":                         0, // before failover slots and the option list either way
		"":                               0,
		"garbage":                        0,
	} {
		if got := serverVersionNum(in); got != want {
			t.Errorf("serverVersionNum(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestCreateSlotCommand(t *testing.T) {
	for _, c := range []struct {
		version  int
		cmd      string
		failover bool
	}{
		{170002, `CREATE_REPLICATION_SLOT "outbox_public_default" LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER)`, true},
		{160004, `CREATE_REPLICATION_SLOT "outbox_public_default" LOGICAL pgoutput (SNAPSHOT 'export')`, false},
		{150020, `CREATE_REPLICATION_SLOT "outbox_public_default" LOGICAL pgoutput (SNAPSHOT 'export')`, false},
		{140010, `CREATE_REPLICATION_SLOT "outbox_public_default" LOGICAL pgoutput EXPORT_SNAPSHOT`, false},
		{0, `CREATE_REPLICATION_SLOT "outbox_public_default" LOGICAL pgoutput EXPORT_SNAPSHOT`, false},
	} {
		cmd, failover := createSlotCommand("outbox_public_default", c.version)
		if cmd != c.cmd || failover != c.failover {
			t.Errorf("version %d: %q, %v; want %q, %v", c.version, cmd, failover, c.cmd, c.failover)
		}
	}
}
