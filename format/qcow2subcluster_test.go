package format

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testimg"
)

// TestCheckQCOW2SubclusterSamples: real extended-L2 images that qemu-img
// check accepts pass our check too.
func TestCheckQCOW2SubclusterSamples(t *testing.T) {
	for _, cs := range []string{"16384", "65536"} {
		for _, cp := range []string{"off", "on"} {
			for _, l2 := range []string{"off", "on"} {
				name := fmt.Sprintf("slx/image_cs-%s_cp-%s_l2-%s.qcow2", cs, cp, l2)
				t.Run(name, func(t *testing.T) {
					b := testimg.SharedImageBytes(t, name)
					h, err := ParseHeader(QCOW2, b[:min(len(b), DefaultPeekSize)])
					require.NoError(t, err)
					assert.Equal(t, l2 == "on", h.ExtendedL2)
					require.NoError(t, CheckQCOW2(bytes.NewReader(b), int64(len(b))))
				})
			}
		}
	}
}

// TestCheckQCOW2PartialClusters builds extended-L2 images whose last
// cluster holds only its first subclusters (as qemu writes them) and cuts
// them inside the last allocated subcluster.
func TestCheckQCOW2PartialClusters(t *testing.T) {
	needTool(t, "qemu-img")
	needTool(t, "qemu-io")
	for _, tc := range []struct {
		clusterSize int
		writes      []string // qemu-io commands
	}{
		{64 << 10, []string{"write -P 0xab 0 2k", "write -P 0xcd 1M 6k"}},
		{16 << 10, []string{"write -P 0x11 3M 512", "write -P 0x22 5M 1536"}},
		{2 << 20, []string{"write -P 0x33 4M 64k", "write -P 0x44 8M 200k"}},
	} {
		t.Run(fmt.Sprintf("cs-%d", tc.clusterSize), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "el2.qcow2")
			run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", fmt.Sprintf("extended_l2=on,cluster_size=%d", tc.clusterSize), p, "16M")
			for _, w := range tc.writes {
				run(t, "qemu-io", "-f", "qcow2", "-c", w, p)
			}
			out := run(t, "qemu-img", "check", "-f", "qcow2", p)
			require.Contains(t, string(out), "No errors")
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NotZero(t, len(b)%tc.clusterSize, "the last cluster should be partial for this test to mean anything")
			require.NoError(t, CheckQCOW2(bytes.NewReader(b), int64(len(b))))

			// Cut inside the last allocated subcluster: refused.
			for _, cut := range []int{len(b) - 1, len(b) - 256} {
				err := CheckQCOW2(bytes.NewReader(b[:cut]), int64(cut))
				require.ErrorIs(t, err, errdefs.ErrInvalidImage, "cut at %d of %d", cut, len(b))
				assert.True(t, strings.Contains(err.Error(), "allocated subcluster"), err.Error())
			}
		})
	}
}
