package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
)

// `importer man DIR` (make man) writes a page per command from the cobra
// commands.
func TestManPages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man1")
	code, _, _ := runCLI(t, nil, env(nil), "man", dir)
	require.Equal(t, cdi.ExitOK, code)
	for _, page := range []string{"importer.1", "importer-inspect.1", "importer-blank.1", "importer-version.1"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		require.NoError(t, err, page)
		assert.True(t, strings.HasPrefix(string(b), ".nh\n.TH \"IMPORTER\" \"1\""), page)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "importer.1"))
	assert.Contains(t, string(b), `\fB--cache-mode\fP`)
}

// Shell completion offers the values of the flags that take a few words.
func TestCompletionOffersFlagValues(t *testing.T) {
	for flag, want := range map[string][]string{
		"--format":       {"raw", "qcow2"},
		"--cache-mode":   {"none", "writeback", "trynone"},
		"--content-type": {"kubevirt", "archive", "as-is"},
		"--log-format":   {"text", "json"},
	} {
		code, stdout, _ := runCLI(t, nil, env(nil), "__complete", flag, "")
		require.Equal(t, cdi.ExitOK, code)
		assert.Equal(t, append(want, ":4"), strings.Split(strings.TrimSpace(stdout), "\n"), flag)
	}
	_, stdout, _ := runCLI(t, nil, env(nil), "__complete", "inspect", "--format", "")
	assert.Contains(t, stdout, "qcow2")
	_, stdout, _ = runCLI(t, nil, env(nil), "completion", "bash")
	assert.Contains(t, stdout, "bash completion")
}

func TestVersionFlagAndCommand(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr, os.Getenv)
		if code != 0 {
			t.Fatalf("importer %s: exit %d: %s", args[0], code, stderr.String())
		}
		out := stdout.String()
		for _, want := range []string{"importer ", "\ncommit   ", "\ngo       " + runtime.Version() + "\n", "\nqemu-img "} {
			if !strings.Contains(out, want) {
				t.Errorf("importer %s printed\n%s\nwant %q", args[0], out, want)
			}
		}
	}
}

// `importer inspct x` is a misspelled subcommand, not an import of the file
// "inspct"; a file of that name is still imported.
func TestCLIMisspelledSubcommandIsSuggested(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := runCLI(t, nil, env(nil), "inspct", filepath.Join(dir, "x"))
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Equal(t, "importer: unknown command \"inspct\": did you mean \"inspect\"? (a source that is a file must exist; see importer --help)\n", stderr)
	assert.NoFileExists(t, filepath.Join(dir, "x"))

	t.Chdir(dir)
	testimg.Raw(t, dir, "inspct", 1<<20, 3)
	code, _, _ = runCLI(t, nil, env(nil), "-q", "inspct", "out.img")
	assert.Equal(t, cdi.ExitOK, code, "an existing file is a source")
	assert.FileExists(t, filepath.Join(dir, "out.img"))
}

// An unknown flag near a known one is offered it, on the root and on a
// subcommand.
func TestCLIUnknownFlagDidYouMean(t *testing.T) {
	code, _, stderr := runCLI(t, nil, env(nil), "--sise", "1Gi", "a", "b")
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Equal(t, "importer: unknown flag: --sise: did you mean --size?\n", stderr)
	_, _, stderr = runCLI(t, nil, env(nil), "inspect", "--s3-endpoit", "http://h", "s3://b/k")
	assert.Equal(t, "importer: unknown flag: --s3-endpoit: did you mean --s3-endpoint?\n", stderr)
	_, _, stderr = runCLI(t, nil, env(nil), "--zzzzzz", "a", "b")
	assert.Equal(t, "importer: unknown flag: --zzzzzz (see importer --help)\n", stderr)
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"inspct", "inspect", 1}, {"sise", "size", 1}, {"", "abc", 3}, {"digest", "digest", 0}, {"blnak", "blank", 2}} {
		assert.Equal(t, tc.want, editDistance(tc.a, tc.b), tc)
	}
}

// inspect and digest take every flag that says how to read a source, as
// an import does (--s3-endpoint was unknown to inspect).
func TestCLIInspectTakesTheImportsSourceFlags(t *testing.T) {
	code, _, stderr := runCLI(t, nil, env(nil), "inspect", "--s3-endpoint", "http://127.0.0.1:1", "--s3-region", "eu-west-1",
		"--stall-timeout", "10s", "--retry-max-elapsed", "1s", "s3://bucket/disk.qcow2")
	assert.Equal(t, cdi.ExitFailed, code, "read, not refused as usage")
	assert.Contains(t, stderr, "GET http://127.0.0.1:1/bucket/disk.qcow2: ")
	assert.Contains(t, stderr, "connection refused")
}

// --help names every kind of SOURCE, registry and OCI ones included.
func TestCLIHelpNamesEverySourceForm(t *testing.T) {
	code, stdout, _ := runCLI(t, nil, env(nil), "--help")
	assert.Equal(t, cdi.ExitOK, code)
	for _, form := range []string{"http(s) URL", "s3://", "gs://", "docker://", "oci-archive:", "oci:", "standard input", "Examples:"} {
		assert.Contains(t, stdout, form)
	}
}

// inspect --json gives a refused image's reason, as an import's JSON does.
func TestInspectJSONHasTheRefusalsReason(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	base := testimg.Convert(t, testimg.Raw(t, dir, "base.raw", 1<<20, 5), filepath.Join(dir, "base.qcow2"), "qcow2")
	child := filepath.Join(dir, "child.qcow2")
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", child).CombinedOutput()
	require.NoError(t, err, string(out))
	code, stdout, _ := runCLI(t, nil, env(nil), "inspect", "--json", child)
	assert.Equal(t, cdi.ExitFailed, code)
	var in map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &in))
	assert.Equal(t, "UnsafeImage", in["reason"])
	assert.Contains(t, in["refused"], "backing file \""+base+"\"")
}
