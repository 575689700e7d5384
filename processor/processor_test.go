package processor

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func step(next Phase) Executor {
	return func(context.Context) (Phase, error) { return next, nil }
}

func TestRunLogsEachPhase(t *testing.T) {
	var logs bytes.Buffer
	var seen []Phase
	p := New(slog.New(slog.NewTextHandler(&logs, nil)), func(ph Phase) { seen = append(seen, ph) })
	p.Register(Info, step(TransferScratch))
	p.Register(TransferScratch, step(Validate))
	p.Register(Validate, step(Convert))
	p.Register(Convert, step(Resize))
	p.Register(Resize, step(Complete))
	path, err := p.Run(context.Background(), Info)
	require.NoError(t, err)
	want := []Phase{Info, TransferScratch, Validate, Convert, Resize, Complete}
	assert.Equal(t, want, path)
	assert.Equal(t, want, seen)
	for _, ph := range want {
		assert.Contains(t, logs.String(), "New phase: "+string(ph))
	}
}

func TestRunStopsAtFirstError(t *testing.T) {
	boom := errors.New("boom")
	called := false
	p := New(slog.New(slog.DiscardHandler), nil)
	p.Register(Info, step(TransferDataFile))
	p.Register(TransferDataFile, func(context.Context) (Phase, error) { return Error, boom })
	p.Register(Resize, func(context.Context) (Phase, error) { called = true; return Complete, nil })
	path, err := p.Run(context.Background(), Info)
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, []Phase{Info, TransferDataFile, Error}, path)
	assert.False(t, called)
}

func TestRunDetectsLoops(t *testing.T) {
	p := New(slog.New(slog.DiscardHandler), nil)
	p.Register(Info, step("Foo"))
	p.Register("Foo", step(Info))
	_, err := p.Run(context.Background(), Info)
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "loop detected on phase Info"), err.Error())
}

func TestRunUnknownPhase(t *testing.T) {
	p := New(slog.New(slog.DiscardHandler), nil)
	p.Register(Info, step("Bar"))
	_, err := p.Run(context.Background(), Info)
	assert.ErrorContains(t, err, "unknown processing phase Bar")
}

func TestRegisterReplacesExecutor(t *testing.T) {
	p := New(slog.New(slog.DiscardHandler), nil)
	p.Register(Info, step(Convert))
	p.Register(Info, step(Complete))
	path, err := p.Run(context.Background(), Info)
	require.NoError(t, err)
	assert.Equal(t, []Phase{Info, Complete}, path)
}

func TestRunHonoursCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := New(slog.New(slog.DiscardHandler), nil)
	p.Register(Info, func(context.Context) (Phase, error) { cancel(); return Convert, nil })
	p.Register(Convert, step(Complete))
	_, err := p.Run(ctx, Info)
	assert.ErrorIs(t, err, context.Canceled)
}
