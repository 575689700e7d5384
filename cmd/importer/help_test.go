package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/testimg"
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
	page := string(b)
	assert.Contains(t, page, `\fB--cache-mode\fP`)
	// The examples keep their lines (roff fills the description's
	// paragraphs, and joined them into one line), and the exit codes
	// have their section, before SEE ALSO.
	assert.Contains(t, page, ".EX\n  importer https://example.org/disk.qcow2.xz /dev/sdb\n  importer --size 20Gi")
	exit, seeAlso := strings.Index(page, ".SH EXIT STATUS"), strings.Index(page, ".SH SEE ALSO")
	require.Positive(t, exit, "an EXIT STATUS section")
	assert.Less(t, exit, seeAlso)
	for _, code := range []string{"\n0\n", "\n1\n", "\n2\n", "\n130\n", "\n143\n"} {
		assert.Contains(t, page[exit:seeAlso], code)
	}
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

// A stray word before SOURCE and DEST is named as no command, and too
// many paths are counted in words (both said "accepts at most 2 arg(s),
// received 3"); both are usage errors.
func TestCLIStrayWordIsNotACommand(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := runCLI(t, nil, env(nil), "import", filepath.Join(dir, "a"), filepath.Join(dir, "b"))
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, `importer: "import" is not a command (the commands are blank, `)
	assert.Contains(t, stderr, "an import is importer SOURCE DEST)")
	code, _, stderr = runCLI(t, nil, env(nil), filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c"))
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Equal(t, "importer: an import takes SOURCE and DEST, not 3 arguments (see importer --help)\n", stderr)
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

// closedPortURL is an http URL on a loopback port nothing listens on.
func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr + "/disk.img"
}

// A refused connection on the command line fails at once: retries are for
// transfers that started and broke. "At once" is read from the log (no
// retry in it), not from a stopwatch a loaded machine can stop late.
func TestCLIConnectionRefusedFailsFast(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := runCLI(t, nil, env(nil), closedPortURL(t), filepath.Join(dir, "disk.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "connection refused")
	assert.NotContains(t, stderr, "retrying")
	assert.NoFileExists(t, filepath.Join(dir, "disk.img"))
}

func TestCLIMissingLocalFileSaysSo(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.qcow2")
	code, _, stderr := runCLI(t, nil, env(nil), missing, filepath.Join(dir, "disk.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "source file "+missing+" does not exist")
	assert.NotContains(t, stderr, "connect")
}

func TestCLIRefusesBadFlagValues(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "disk.raw", 1<<20, 1)
	for _, args := range [][]string{
		{"--cache-mode", "weird"},
		{"--format", "vmdk"},
		{"--format-in", "qcow2"},
		{"--content-type", "tarball"},
		{"--log-format", "xml"},
	} {
		code, _, stderr := runCLI(t, nil, env(nil), append(args, src, filepath.Join(dir, "out.img"))...)
		assert.Equal(t, cdi.ExitUsage, code, args)
		assert.Contains(t, stderr, args[1], args)
		assert.NoFileExists(t, filepath.Join(dir, "out.img"))
	}
}

// A streamed raw image too big for its target names both sizes, in bytes
// and in human units: the whole size when the source tells it, else what
// the stream had passed.
func TestCLITooBigRawNamesBothSizes(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "disk.raw", 3<<20, 2)
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)

	code, _, stderr := runCLI(t, nil, env(nil), "--size", "2Mi", srv.URL+"/disk.raw", filepath.Join(dir, "out.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "image size 3145728 is larger than the reported available storage 2097152 (3.0 MiB for 2.0 MiB, 1048576 bytes short): a larger volume is required")
	assert.NotContains(t, stderr, "PVC")

	code, _, stderr = runCLI(t, data, env(nil), "--size", "2Mi", "-", filepath.Join(dir, "out.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "(more than 2.0 MiB for 2.0 MiB)")
	assert.NoFileExists(t, filepath.Join(dir, "out.img"))
}

// The result JSON names the failure's kind and the HTTP status, so a
// script does not parse the message.
func TestCLIResultNamesReasonAndStatus(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	code, stdout, _ := runCLI(t, nil, env(nil), "--json", srv.URL+"/disk.img", filepath.Join(dir, "disk.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	m := decode(t, []byte(stdout))
	assert.Equal(t, "SourceRefused", m.Reason)
	assert.Equal(t, 404, m.HTTPStatus)

	code, stdout, _ = runCLI(t, nil, env(nil), "--json", closedPortURL(t), filepath.Join(dir, "disk.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	m = decode(t, []byte(stdout))
	assert.Equal(t, "SourceUnreachable", m.Reason)
	assert.Zero(t, m.HTTPStatus)
}

// A failure reads as one sentence in the user's words: the server's answer
// and the URL once, no CDI prefix, no sentinel words in the middle.
func TestCLIFailuresReadInTheUsersWords(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	refused := closedPortURL(t)
	addr := strings.TrimSuffix(strings.TrimPrefix(refused, "http://"), "/disk.img")
	missing := filepath.Join(dir, "nope.qcow2")
	for _, tc := range []struct {
		name, source, want string
	}{
		{"404", srv.URL + "/disk.img", "the server answered 404 Not Found for " + srv.URL + "/disk.img"},
		{"connection refused", refused, "GET " + refused + ": dial tcp " + addr + ": connect: connection refused"},
		{"missing file", missing, "source file " + missing + " does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := filepath.Join(dir, "disk.img")
			code, stdout, stderr := runCLI(t, nil, env(nil), "--json", tc.source, dest)
			assert.Equal(t, cdi.ExitFailed, code)
			assert.Equal(t, "importer: import failed: "+tc.want+"\nimporter: nothing was written to "+dest+"\n", stderr)
			assert.Equal(t, tc.want, decode(t, []byte(stdout)).Message, "the JSON's message has no CDI prefix")
		})
	}
}

// An empty standard input is called standard input, not "upload".
func TestCLIEmptyStdinIsStandardInput(t *testing.T) {
	code, _, stderr := runCLI(t, nil, env(nil), "-", filepath.Join(t.TempDir(), "disk.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "reading the header of standard input: ")
	assert.NotContains(t, stderr, "upload")
}

// Cancelled in the middle of a download (Ctrl-C cancels the context), the
// run says so in two words: no "context canceled", no read error.
func TestCLICancelledSaysCancelled(t *testing.T) {
	srv := pacedServer(t, bytes.Repeat([]byte{7}, 16<<20), 64<<10, 50*time.Millisecond, 0)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	var stdout, stderr bytes.Buffer
	dest := filepath.Join(t.TempDir(), "disk.img")
	code := run(ctx, []string{"--json", srv.URL + "/disk.img", dest}, nil, &stdout, &stderr, env(nil))
	t.Logf("stderr: %s", stderr.String())
	assert.Equal(t, cdi.ExitFailed, code)
	first, left, _ := strings.Cut(stderr.String(), "\n")
	assert.Equal(t, "importer: import cancelled", first)
	assert.Contains(t, left, dest, "the last line says what is left of DEST")
	assert.Equal(t, 1, strings.Count(left, "\n"))
	m := decode(t, stdout.Bytes())
	assert.Equal(t, "import cancelled", m.Message)
	assert.Equal(t, "Cancelled", m.Reason)
	require.NotContains(t, stderr.String(), "context canceled")
}

// A usage error under --json prints the JSON too (reason InvalidOptions),
// exit 2: a script that asked for JSON gets JSON (it got plain text only).
func TestCLIUsageErrorUnderJSONIsJSON(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runCLI(t, nil, env(nil), "--json", "--size", "10Qi", filepath.Join(dir, "a"), filepath.Join(dir, "b"))
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, `size "10Qi"`)
	m := decode(t, []byte(stdout))
	assert.Equal(t, "InvalidOptions", m.Reason)
	assert.Contains(t, m.Message, `size "10Qi"`)
}

// clone-source is a cobra command like the others: its help lists each
// flag once, its man page has its flags, a misspelled flag gets a "did you
// mean", and CDI's cloner command line (one dash, klog's -v=N and
// -alsologtostderr) still parses (before: Go flag's help, the flags
// printed twice, a man page listing only -h).
func TestCLICloneSourceIsACobraCommand(t *testing.T) {
	code, stdout, _ := runCLI(t, nil, env(nil), "clone-source", "--help")
	require.Equal(t, cdi.ExitOK, code)
	assert.Equal(t, 1, strings.Count(stdout, "--content-type string"), stdout)
	assert.Contains(t, stdout, "--upload-bytes uint")

	dir := filepath.Join(t.TempDir(), "man1")
	code, _, _ = runCLI(t, nil, env(nil), "man", dir)
	require.Equal(t, cdi.ExitOK, code)
	b, err := os.ReadFile(filepath.Join(dir, "importer-clone-source.1"))
	require.NoError(t, err)
	assert.Contains(t, string(b), `\fB--content-type\fP`)

	code, _, stderr := runCLI(t, nil, env(nil), "clone-source", "-mont", "/x")
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, "did you mean --mount?")

	missing := filepath.Join(t.TempDir(), "no-such-device")
	code, _, stderr = runCLI(t, nil, env(nil), "clone-source", "-v=3", "-alsologtostderr", "-content-type", "blockdevice-clone",
		"-upload-bytes", "1048576", "-mount", missing, "-url", closedPortURL(t))
	assert.Equal(t, cdi.ExitFailed, code, "parsed, then failed on the missing source")
	assert.Contains(t, stderr, "opening clone source "+missing)
}

func TestTwoDashesTakesOneDashFlagsOnly(t *testing.T) {
	assert.Equal(t,
		[]string{"--content-type", "x", "--v=3", "--retries", "-1", "-h", "--v", "3", "--q", "-", "--", "-mount"},
		twoDashes([]string{"-content-type", "x", "-v=3", "-retries", "-1", "-h", "-v", "3", "-q", "-", "--", "-mount"}))
}
