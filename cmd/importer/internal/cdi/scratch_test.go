package cdi

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/diskimport/engine/importer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// inPrivateMountNamespace runs fn on a thread of its own in a private
// mount namespace, where it may mount: the thread is never unlocked, so it
// ends with its goroutine and takes the namespace and its mounts along.
// It skips t where that cannot be done (not root, no CAP_SYS_ADMIN).
func inPrivateMountNamespace(t *testing.T, fn func() error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a private mount namespace and bind mounts need root")
	}
	setup, done := make(chan error, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			setup <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			setup <- err
			return
		}
		setup <- nil
		done <- fn()
	}()
	if err := <-setup; err != nil {
		t.Skipf("cannot make a private mount namespace here: %v", err)
	}
	require.NoError(t, <-done)
}

// A bind mount of a directory of the same filesystem (podman's and the
// kubelet's volumes) is a mount point, reached by its path or a symlink,
// with a space in its name too; a plain directory is not, though its
// st_dev is the same as the mount's.
func TestIsMountPointTellsABindMountFromADirectory(t *testing.T) {
	dir := t.TempDir()
	volume, mounted, spaced, plain := filepath.Join(dir, "volume"), filepath.Join(dir, "scratch"), filepath.Join(dir, "with space"), filepath.Join(dir, "plain")
	for _, d := range []string{volume, mounted, spaced, plain} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(mounted, link))
	got := map[string]bool{}
	var devMounted, devPlain uint64
	var missingErr error
	inPrivateMountNamespace(t, func() error {
		for _, target := range []string{mounted, spaced} {
			if err := unix.Mount(volume, target, "", unix.MS_BIND, ""); err != nil {
				return err
			}
		}
		var st unix.Stat_t
		if err := unix.Stat(mounted, &st); err != nil {
			return err
		}
		devMounted = st.Dev
		if err := unix.Stat(plain, &st); err != nil {
			return err
		}
		devPlain = st.Dev
		for _, p := range []string{mounted, link, spaced, plain, dir + "/./scratch"} {
			m, err := isMountPoint(p)
			if err != nil {
				return err
			}
			got[p] = m
		}
		_, missingErr = isMountPoint(filepath.Join(dir, "missing"))
		return nil
	})
	assert.Equal(t, devPlain, devMounted, "the bind mount has its parent's st_dev: comparing devices cannot tell")
	assert.True(t, got[mounted], "a bind mount")
	assert.True(t, got[link], "a symlink to a bind mount")
	assert.True(t, got[spaced], "a mount point whose name the kernel escapes")
	assert.True(t, got[dir+"/./scratch"], "an uncleaned path")
	assert.False(t, got[plain], "a plain directory")
	assert.ErrorIs(t, missingErr, fs.ErrNotExist)
}

// The pod's scratch policy: the volume mounted at /scratch, else no
// scratch space at all, whether /scratch is missing or a plain directory
// (the image's own, the container's writable layer).
func TestScratchIsOnlyAMountedVolume(t *testing.T) {
	for name, c := range map[string]struct {
		dir, mount bool
	}{"mounted volume": {true, true}, "plain directory": {true, false}, "missing": {false, false}} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			paths := PathsFromEnv(func(k string) string {
				if k == "IMPORTER_PATH_PREFIX" {
					return root
				}
				return ""
			})
			if c.dir {
				require.NoError(t, os.Mkdir(paths.Scratch, 0o755))
			}
			volume := t.TempDir()
			var o importer.Options
			var warning string
			inPrivateMountNamespace(t, func() error {
				if c.mount {
					if err := unix.Mount(volume, paths.Scratch, "", unix.MS_BIND, ""); err != nil {
						return err
					}
				}
				warning = useScratchVolume(&o, paths)
				return nil
			})
			assert.Empty(t, warning)
			if c.mount {
				assert.Equal(t, paths.Scratch, o.ScratchDir)
				assert.False(t, o.NoScratch)
			} else {
				assert.Empty(t, o.ScratchDir)
				assert.True(t, o.NoScratch, "no scratch space without a mounted volume")
			}
		})
	}
}
