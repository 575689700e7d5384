package engine

import (
	"bytes"
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func planOf(r Route, verify bool) func(context.Context) (*Plan, error) {
	return func(context.Context) (*Plan, error) {
		p := &Plan{Route: r}
		p.Phases, p.SourceDrainedAfter = PhasesFor(r, verify)
		return p, nil
	}
}

func noop(context.Context) error { return nil }

func allSteps(ran *[]Phase) func(*Plan) map[Phase]Step {
	return func(*Plan) map[Phase]Step {
		m := map[Phase]Step{}
		for _, ph := range []Phase{TransferScratch, TransferDataFile, TransferDataDir, Validate, Convert, Resize, Verify, Commit} {
			m[ph] = func(context.Context) error { *ran = append(*ran, ph); return nil }
		}
		return m
	}
}

func TestRunLogsEachPhaseOfThePlan(t *testing.T) {
	var logs bytes.Buffer
	var events []Event
	var ran []Phase
	m := &Machine{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Observe: func(e Event) { events = append(events, e) }}
	plan, path, err := m.Run(context.Background(), planOf(RouteScratch, true), allSteps(&ran))
	require.NoError(t, err)
	want := []Phase{Info, TransferScratch, Validate, Convert, Resize, Verify, Commit, Complete}
	assert.Equal(t, want, path)
	assert.Equal(t, RouteScratch, plan.Route)
	assert.Equal(t, want[1:len(want)-1], ran)
	for _, ph := range want {
		assert.Contains(t, logs.String(), "New phase: "+string(ph))
	}
	var drained []Phase
	var started []Phase
	for _, e := range events {
		switch e.Kind {
		case SourceDrained:
			drained = append(drained, e.Phase)
		case PhaseStarted:
			started = append(started, e.Phase)
		}
	}
	assert.Equal(t, []Phase{Validate}, drained)
	assert.Equal(t, want, started)
}

func TestRunStopsAtFirstError(t *testing.T) {
	boom := errors.New("boom")
	var ran []Phase
	var ended []Event
	m := &Machine{Logger: slog.New(slog.DiscardHandler), Observe: func(e Event) {
		if e.Kind == PhaseEnded {
			ended = append(ended, e)
		}
	}}
	_, path, err := m.Run(context.Background(), planOf(RouteStream, false), func(p *Plan) map[Phase]Step {
		s := allSteps(&ran)(p)
		s[TransferDataFile] = func(context.Context) error { return boom }
		return s
	})
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, []Phase{Info, TransferDataFile, Error}, path)
	assert.Empty(t, ran)
	require.Len(t, ended, 2)
	assert.ErrorIs(t, ended[1].Err, boom)
}

func TestRunInfoFails(t *testing.T) {
	boom := errors.New("boom")
	m := &Machine{Logger: slog.New(slog.DiscardHandler)}
	plan, path, err := m.Run(context.Background(), func(context.Context) (*Plan, error) { return nil, boom }, nil)
	assert.ErrorIs(t, err, boom)
	assert.Nil(t, plan)
	assert.Equal(t, []Phase{Info, Error}, path)
}

func TestRunRefusesAPlanWithoutCompleteOrStep(t *testing.T) {
	m := &Machine{Logger: slog.New(slog.DiscardHandler)}
	_, _, err := m.Run(context.Background(), func(context.Context) (*Plan, error) {
		return &Plan{Phases: []Phase{Convert}}, nil
	}, func(*Plan) map[Phase]Step { return nil })
	assert.ErrorContains(t, err, "must end in Complete")

	m = &Machine{Logger: slog.New(slog.DiscardHandler)}
	_, path, err := m.Run(context.Background(), planOf(RouteBlank, false), func(*Plan) map[Phase]Step {
		return map[Phase]Step{Resize: noop}
	})
	assert.ErrorContains(t, err, "phase Commit, which has no step")
	assert.Equal(t, []Phase{Info, Error}, path, "refused before any phase ran")
}

func TestRunHonoursCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var ran []Phase
	m := &Machine{Logger: slog.New(slog.DiscardHandler)}
	_, path, err := m.Run(ctx, func(ctx context.Context) (*Plan, error) {
		cancel()
		return planOf(RouteStream, false)(ctx)
	}, allSteps(&ran))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, ran)
	assert.Equal(t, []Phase{Info, TransferDataFile, Error}, path)
}

func TestWrapDecoratesSteps(t *testing.T) {
	var ran []Phase
	var wrapped []Phase
	m := &Machine{Logger: slog.New(slog.DiscardHandler), Wrap: func(ph Phase, s Step) Step {
		wrapped = append(wrapped, ph)
		return s
	}}
	_, _, err := m.Run(context.Background(), planOf(RouteArchive, false), allSteps(&ran))
	require.NoError(t, err)
	assert.Equal(t, []Phase{Info, TransferDataDir, Commit}, wrapped)
}

func TestPhasesForEveryRouteEndInCommitThenComplete(t *testing.T) {
	for _, r := range []Route{RouteStream, RouteScratch, RouteInPlace, RouteRanged, RouteArchive, RouteBlank, RouteStreamDecode} {
		ph, _ := PhasesFor(r, false)
		require.GreaterOrEqual(t, len(ph), 2, r.String())
		assert.Equal(t, []Phase{Commit, Complete}, ph[len(ph)-2:], r.String())
	}
	ph, drained := PhasesFor(RouteStream, true)
	assert.Equal(t, []Phase{TransferDataFile, Resize, Verify, Commit, Complete}, ph)
	assert.Equal(t, TransferDataFile, drained)
	ph, drained = PhasesFor(RouteStreamDecode, false)
	assert.Equal(t, []Phase{TransferDataFile, Resize, Commit, Complete}, ph)
	assert.Equal(t, TransferDataFile, drained)
	assert.Equal(t, "stream-decode", RouteStreamDecode.String())
	assert.False(t, RouteStreamDecode.Converts())
}

// TestPhasesListsEveryDeclaredPhase: Phases is the one list of the Phase
// constants, so whatever enumerates phases from it misses none (CDI's
// phase gauge listed them by hand and read 0 through TransferDelta,
// Verify and Commit).
func TestPhasesListsEveryDeclaredPhase(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "machine.go", nil, 0)
	require.NoError(t, err)
	var declared []Phase
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Phase" {
				continue
			}
			for _, val := range v.Values {
				lit := val.(*ast.BasicLit)
				s, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				declared = append(declared, Phase(s))
			}
		}
	}
	require.NotEmpty(t, declared)
	assert.ElementsMatch(t, declared, Phases())
	assert.Len(t, Phases(), len(declared), "no phase listed twice")
}
