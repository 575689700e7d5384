package importer

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

func planOf(r routeKind, verify bool) func(context.Context) (*importPlan, error) {
	return func(context.Context) (*importPlan, error) {
		p := &importPlan{Route: r}
		p.Phases, p.SourceDrainedAfter = phasesFor(r, verify)
		return p, nil
	}
}

func noop(context.Context) error { return nil }

func allSteps(ran *[]Phase) func(*importPlan) map[Phase]phaseStep {
	return func(*importPlan) map[Phase]phaseStep {
		m := map[Phase]phaseStep{}
		for _, ph := range []Phase{PhaseTransferScratch, PhaseTransferDataFile, PhaseTransferDataDir, PhaseValidate, PhaseConvert, PhaseResize, PhaseVerify, PhaseCommit} {
			m[ph] = func(context.Context) error { *ran = append(*ran, ph); return nil }
		}
		return m
	}
}

func TestRunLogsEachPhaseOfThePlan(t *testing.T) {
	var logs bytes.Buffer
	var events []Event
	var ran []Phase
	m := &machine{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Observe: func(e Event) { events = append(events, e) }}
	plan, path, err := m.Run(context.Background(), planOf(routeScratch, true), allSteps(&ran))
	require.NoError(t, err)
	want := []Phase{PhaseInfo, PhaseTransferScratch, PhaseValidate, PhaseConvert, PhaseResize, PhaseVerify, PhaseCommit, PhaseComplete}
	assert.Equal(t, want, path)
	assert.Equal(t, routeScratch, plan.Route)
	assert.Equal(t, want[1:len(want)-1], ran)
	for _, ph := range want {
		assert.Contains(t, logs.String(), "New phase: "+string(ph))
	}
	var drained []Phase
	var started []Phase
	for _, e := range events {
		switch e.Kind {
		case EventSourceDrained:
			drained = append(drained, e.Phase)
		case EventPhaseStarted:
			started = append(started, e.Phase)
		}
	}
	assert.Equal(t, []Phase{PhaseValidate}, drained)
	assert.Equal(t, want, started)
}

func TestRunStopsAtFirstError(t *testing.T) {
	boom := errors.New("boom")
	var ran []Phase
	var ended []Event
	m := &machine{Logger: slog.New(slog.DiscardHandler), Observe: func(e Event) {
		if e.Kind == EventPhaseEnded {
			ended = append(ended, e)
		}
	}}
	_, path, err := m.Run(context.Background(), planOf(routeStream, false), func(p *importPlan) map[Phase]phaseStep {
		s := allSteps(&ran)(p)
		s[PhaseTransferDataFile] = func(context.Context) error { return boom }
		return s
	})
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, []Phase{PhaseInfo, PhaseTransferDataFile, PhaseError}, path)
	assert.Empty(t, ran)
	require.Len(t, ended, 2)
	assert.ErrorIs(t, ended[1].Err, boom)
}

func TestRunInfoFails(t *testing.T) {
	boom := errors.New("boom")
	m := &machine{Logger: slog.New(slog.DiscardHandler)}
	plan, path, err := m.Run(context.Background(), func(context.Context) (*importPlan, error) { return nil, boom }, nil)
	assert.ErrorIs(t, err, boom)
	assert.Nil(t, plan)
	assert.Equal(t, []Phase{PhaseInfo, PhaseError}, path)
}

func TestRunRefusesAPlanWithoutCompleteOrStep(t *testing.T) {
	m := &machine{Logger: slog.New(slog.DiscardHandler)}
	_, _, err := m.Run(context.Background(), func(context.Context) (*importPlan, error) {
		return &importPlan{Phases: []Phase{PhaseConvert}}, nil
	}, func(*importPlan) map[Phase]phaseStep { return nil })
	assert.ErrorContains(t, err, "must end in Complete")

	m = &machine{Logger: slog.New(slog.DiscardHandler)}
	_, path, err := m.Run(context.Background(), planOf(routeBlank, false), func(*importPlan) map[Phase]phaseStep {
		return map[Phase]phaseStep{PhaseResize: noop}
	})
	assert.ErrorContains(t, err, "phase Commit, which has no step")
	assert.Equal(t, []Phase{PhaseInfo, PhaseError}, path, "refused before any phase ran")
}

func TestRunHonoursCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var ran []Phase
	m := &machine{Logger: slog.New(slog.DiscardHandler)}
	_, path, err := m.Run(ctx, func(ctx context.Context) (*importPlan, error) {
		cancel()
		return planOf(routeStream, false)(ctx)
	}, allSteps(&ran))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, ran)
	assert.Equal(t, []Phase{PhaseInfo, PhaseTransferDataFile, PhaseError}, path)
}

func TestWrapDecoratesSteps(t *testing.T) {
	var ran []Phase
	var wrapped []Phase
	m := &machine{Logger: slog.New(slog.DiscardHandler), Wrap: func(ph Phase, s phaseStep) phaseStep {
		wrapped = append(wrapped, ph)
		return s
	}}
	_, _, err := m.Run(context.Background(), planOf(routeArchive, false), allSteps(&ran))
	require.NoError(t, err)
	assert.Equal(t, []Phase{PhaseInfo, PhaseTransferDataDir, PhaseCommit}, wrapped)
}

func TestPhasesForEveryRouteEndInCommitThenComplete(t *testing.T) {
	for _, r := range []routeKind{routeStream, routeScratch, routeInPlace, routeRanged, routeArchive, routeBlank, routeStreamDecode} {
		ph, _ := phasesFor(r, false)
		require.GreaterOrEqual(t, len(ph), 2, r.String())
		assert.Equal(t, []Phase{PhaseCommit, PhaseComplete}, ph[len(ph)-2:], r.String())
	}
	ph, drained := phasesFor(routeStream, true)
	assert.Equal(t, []Phase{PhaseTransferDataFile, PhaseResize, PhaseVerify, PhaseCommit, PhaseComplete}, ph)
	assert.Equal(t, PhaseTransferDataFile, drained)
	ph, drained = phasesFor(routeStreamDecode, false)
	assert.Equal(t, []Phase{PhaseTransferDataFile, PhaseResize, PhaseCommit, PhaseComplete}, ph)
	assert.Equal(t, PhaseTransferDataFile, drained)
	assert.Equal(t, "stream-decode", routeStreamDecode.String())
	assert.False(t, routeStreamDecode.Converts())
}

// TestPhasesListsEveryDeclaredPhase: Phases is the one list of the Phase
// constants, so whatever enumerates phases from it misses none (CDI's
// phase gauge listed them by hand and read 0 through TransferDelta,
// Verify and Commit).
func TestPhasesListsEveryDeclaredPhase(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "phase.go", nil, 0)
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
