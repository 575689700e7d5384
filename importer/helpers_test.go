package importer_test

import (
	"log/slog"
	"testing"
)

// testLogger sends the engine's log lines to the test log, so a failing
// case shows its phases.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
