package importer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// Result.Sandbox names the confinement qemu-img ran under, so it is set
// by the routes that run qemu-img and by no other: a raw stream and a
// clone never start it; a local qcow2 is validated and converted by it.
func TestSandboxIsReportedOnlyWhereQemuImgRuns(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 21)
	qcow2 := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	for _, c := range []struct {
		name, source string
		runsQemuImg  bool
	}{
		{name: "raw stream", source: "-"},
		{name: "raw file, a clone", source: raw},
		{name: "qcow2 in place", source: qcow2, runsQemuImg: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := importer.Options{Source: c.source, Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testimg.Logger(t)}
			if c.source == "-" {
				f, err := os.Open(raw)
				require.NoError(t, err)
				t.Cleanup(func() { f.Close() })
				o.SourceReader = f
			}
			res, err := importer.Import(context.Background(), o)
			require.NoError(t, err)
			assert.Equal(t, testimg.Digest(t, raw, 4<<20), testimg.Digest(t, o.Target, 4<<20))
			if c.runsQemuImg {
				assert.Regexp(t, `^(landlock v[0-9]+|rlimits only)$`, res.Sandbox)
			} else {
				assert.Empty(t, res.Sandbox, "no qemu-img ran")
			}
		})
	}
}
