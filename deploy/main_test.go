package deploy_test

import (
	"flag"
	"os"
	"testing"
)

// cleanups run after every test, for what tests share (the release build).
var cleanups []func()

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	os.Exit(code)
}
