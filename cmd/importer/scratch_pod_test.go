package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
)

// CDI's controller mounts no /scratch for an HTTP import. A compressed
// monolithicSparse vmdk needs it (it has no grain markers to stream by; a
// compressed qcow2, streamOptimized vmdk, dynamic VHD, VDI or VHDX is
// decoded straight onto the volume), so the first pod must write nothing
// to the volume and exit 0 with scratchSpaceRequired; the controller then
// adds a scratch volume and recreates the pod, which completes. A
// /scratch that is a directory of the pod's own root file system, not a
// mounted volume, counts as none.
func TestPodScratchSpaceHandshake(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 61)
	q := testimg.Convert(t, raw, filepath.Join(dir, "disk.vmdk"), "vmdk", "subformat=monolithicSparse")
	xz := testimg.Compress(t, q, "xz")
	base := testimg.Serve(t, dir)
	data := t.TempDir()
	env := httpEnv(base+filepath.Base(xz), nil)

	code, log, out := runPod(t, pod{env: env, volumes: map[string]string{"/data": data}})
	require.Equal(t, cdi.ExitOK, code, "scratch required exits 0, or the kubelet restarts the same pod")
	m := decode(t, log)
	assert.True(t, m.ScratchSpaceRequired, "%s", log)
	assert.Contains(t, out, "Scratch space required")
	assert.Contains(t, out, "xz-compressed", "the log says why scratch is needed")
	assert.Empty(t, dirEntries(t, data), "nothing may reach the volume before scratch space is there")

	code, log, out = runPod(t, pod{env: env, volumes: map[string]string{"/data": data}, dirs: []string{"/scratch"}})
	require.Equal(t, cdi.ExitOK, code)
	assert.True(t, decode(t, log).ScratchSpaceRequired, "a /scratch that is no mount point is the container's own layer: %s", log)
	assert.Contains(t, out, "No scratch volume mounted at /scratch")
	assert.Empty(t, dirEntries(t, data))

	scratch := t.TempDir()
	code, log, _ = runPod(t, pod{env: env, volumes: map[string]string{"/data": data, "/scratch": scratch}})
	require.Equal(t, cdi.ExitOK, code)
	m = decode(t, log)
	assert.False(t, m.ScratchSpaceRequired)
	assert.Equal(t, "Import Complete", m.Message)
	assert.True(t, m.ScratchUsed)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, filepath.Join(data, "disk.img"), 4<<20))
	assert.Empty(t, dirEntries(t, scratch), "scratch not cleaned")
}

// A failed import leaves CDI's plain text in the termination log (the
// controller parses JSON only after exit 0) and exits 1.
func TestPodFailureLeavesText(t *testing.T) {
	base := testimg.Serve(t, t.TempDir())
	data := t.TempDir()
	code, log, _ := runPod(t, pod{
		env:     httpEnv(base+"missing.img", nil),
		volumes: map[string]string{"/data": data, "/scratch": t.TempDir()},
	})
	assert.Equal(t, cdi.ExitFailed, code)
	text := failureText(t, log)
	assert.Equal(t, "Unable to process data: expected status code 200, got 404. Status: 404 Not Found (GET "+base+"missing.img)", text,
		"env mode keeps CDI's words, which its controller shows")
	assert.Empty(t, dirEntries(t, data))
}
