package errtable_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/errtable"
)

// TestEverySentinelHasARow: each package-level errors.New of errdefs (read
// from its source, so a sentinel added there without a row fails here)
// is the Err of exactly one row.
func TestEverySentinelHasARow(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "errdefs", "*.go"))
	require.NoError(t, err)
	declared := map[string]string{} // message → name
	for _, name := range files {
		if filepath.Ext(name) != ".go" || len(name) > 8 && name[len(name)-8:] == "_test.go" {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				for i, val := range v.Values {
					call, ok := val.(*ast.CallExpr)
					if !ok || len(call.Args) != 1 {
						continue
					}
					if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "New" {
						continue
					}
					lit, ok := call.Args[0].(*ast.BasicLit)
					require.True(t, ok, "%s: a sentinel with a literal message", v.Names[i].Name)
					msg, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					declared[msg] = v.Names[i].Name
				}
			}
		}
	}
	require.Greater(t, len(declared), 20, "errdefs' sentinels read")
	rows := map[string]int{}
	for _, r := range errtable.Rows() {
		rows[r.Err.Error()]++
	}
	for msg, name := range declared {
		assert.Equal(t, 1, rows[msg], "errdefs.%s has one row", name)
	}
	assert.Len(t, errtable.Rows(), len(declared), "no row for something errdefs does not declare")
}

// TestReasonOneWordPerSentinel: each word names one sentinel, and names
// it wrapped; what wraps none is Failed.
func TestReasonOneWordPerSentinel(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range errtable.Rows() {
		if r.Reason == "" {
			assert.Equal(t, errtable.ReasonFailed, errtable.Reason(fmt.Errorf("wrapped: %w", r.Err)), "a signal alone: %v", r.Err)
			continue
		}
		assert.False(t, seen[r.Reason], "reason %s used twice", r.Reason)
		seen[r.Reason] = true
		assert.Equal(t, r.Reason, errtable.Reason(fmt.Errorf("wrapped: %w", r.Err)))
	}
	assert.Equal(t, "", errtable.Reason(nil))
	assert.Equal(t, errtable.ReasonFailed, errtable.Reason(errors.New("other")))
	// A signal is named by the failure it carries.
	assert.Equal(t, "InvalidImage", errtable.Reason(fmt.Errorf("%w: %w", errdefs.ErrNotStreamable, errdefs.ErrInvalidImage)))
}

// TestClassIsTheFirstClassedRow: a sentinel with no class of its own does
// not hide a later one's (a missing tool over a bad image is a bad image,
// as CDI's roles read it).
func TestClassIsTheFirstClassedRow(t *testing.T) {
	assert.Equal(t, errtable.Succeeded, errtable.Classify(nil))
	assert.Equal(t, errtable.BadImage, errtable.Classify(fmt.Errorf("%w: %w", errdefs.ErrToolMissing, errdefs.ErrInvalidImage)))
	assert.Equal(t, errtable.Failed, errtable.Classify(errdefs.ErrVerifyMismatch))
	assert.Equal(t, errtable.ChecksumMismatch, errtable.Classify(fmt.Errorf("%w: %w", errdefs.ErrCancelled, errdefs.ErrChecksumMismatch)))
	assert.Equal(t, errtable.SourceFailed, errtable.Classify(&errdefs.EgressError{}))
}
