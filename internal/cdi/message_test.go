package cdi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cdi"
)

// renderPromptly runs JSON with a deadline, so a truncation loop that never
// ends fails the test instead of hanging it.
func renderPromptly(t *testing.T, m cdi.TerminationMessage) []byte {
	t.Helper()
	done := make(chan []byte, 1)
	go func() { done <- m.JSON() }()
	select {
	case b := <-done:
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("TerminationMessage.JSON did not return within 5s")
		return nil
	}
}

// decodeMessage checks the Kubernetes limits on b and decodes it.
func decodeMessage(t *testing.T, b []byte) map[string]any {
	t.Helper()
	require.LessOrEqual(t, len(b), 4096, "termination message over Kubernetes' limit")
	require.True(t, utf8.Valid(b), "termination message is not valid UTF-8")
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got), "termination message is not JSON: %s", b)
	return got
}

func manyLabels(n int, value func(i int) string) map[string]string {
	labels := make(map[string]string, n)
	for i := range n {
		labels[fmt.Sprintf("instancetype.kubevirt.io/default-%04d", i)] = value(i)
	}
	return labels
}

func TestTerminationMessageFitsWithThousandLabels(t *testing.T) {
	cases := map[string]struct {
		labels map[string]string
		cause  error
	}{
		"1000 short labels, success": {
			labels: manyLabels(1000, func(i int) string { return fmt.Sprintf("u1.medium-%d", i) }),
		},
		"1000 huge label values, failure": {
			labels: manyLabels(1000, func(i int) string { return strings.Repeat("v<&>", 2000+i) }),
			cause:  errors.New("read source: connection reset by peer"),
		},
		"1000 labels and a huge error with multibyte runes and escapes": {
			labels: manyLabels(1000, func(i int) string { return strings.Repeat("é", i) }),
			cause:  errors.New("qcow2 check: " + strings.Repeat("L2 table «bad» <entry> \"quoted\"\n", 50000)),
		},
		"the cause alone is huge": {
			cause: errors.New(strings.Repeat("x", 1<<20)),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := &importer.Result{Labels: tc.labels, SourceFormat: "qcow2", VirtualSize: 1 << 30}
			m := cdi.NewTerminationMessage(res, tc.cause)
			b := renderPromptly(t, m)
			got := decodeMessage(t, b)

			msg, _ := got["message"].(string)
			if tc.cause == nil {
				assert.Equal(t, cdi.MessageComplete, msg)
			} else {
				// The cause comes first: its beginning survives, whatever else is cut.
				require.True(t, strings.HasPrefix(msg, "Unable to process data: "+tc.cause.Error()[:20]), "message %q", msg)
			}
			assert.Equal(t, "qcow2", got["sourceFormat"])

			kept, _ := got["labels"].(map[string]any)
			omitted, _ := got["labelsOmitted"].(float64)
			assert.Equal(t, len(tc.labels), len(kept)+int(omitted), "every label is either kept or counted as omitted")
			for k, v := range kept {
				assert.Equal(t, tc.labels[k], v, "kept label %s is changed", k)
			}
			if len(tc.labels) > 0 && tc.cause == nil {
				assert.NotEmpty(t, kept, "short labels that fit are kept")
			}

			// Deterministic: map iteration order must not change the result.
			for range 5 {
				assert.Equal(t, string(b), string(renderPromptly(t, cdi.NewTerminationMessage(res, tc.cause))))
			}
		})
	}
}

func TestTerminationMessageSmallIsUntouched(t *testing.T) {
	res := &importer.Result{Labels: map[string]string{"a": "b"}}
	got := decodeMessage(t, cdi.NewTerminationMessage(res, errors.New("boom")).JSON())
	assert.Equal(t, "Unable to process data: boom", got["message"])
	assert.Equal(t, map[string]any{"a": "b"}, got["labels"])
	assert.NotContains(t, got, "labelsOmitted")
}

func TestTerminationMessageCarriesTheContentDigestBesideThousandLabels(t *testing.T) {
	d := "blk-sha256:" + strings.Repeat("ab", 32)
	labels := map[string]string{}
	for i := range 1000 {
		labels[fmt.Sprintf("label-%04d", i)] = strings.Repeat("v", 40)
	}
	b := cdi.NewTerminationMessage(&importer.Result{ContentDigest: d, Labels: labels}, nil).JSON()
	assert.LessOrEqual(t, len(b), 4096)
	assert.Equal(t, d, decodeMessage(t, b)["contentDigest"], "the digest is kept, labels give way")
}
