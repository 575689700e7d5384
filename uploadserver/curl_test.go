package uploadserver_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// curl, as a user would run it: a sync upload with a token, a form upload,
// and a curl process killed mid-upload followed by a good retry.
func TestUploadWithCurl(t *testing.T) {
	testimg.Need(t, "curl")
	im := makeImages(t)

	t.Run("sync and form", func(t *testing.T) {
		for _, form := range []bool{false, true} {
			o := fileTarget(t)
			_, base := serve(t, uploadserver.Options{Import: o, Token: "s3cret"})
			args := []string{"-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Authorization: Bearer s3cret"}
			if form {
				args = append(args, "-F", "file=@"+im.gz, base+uploadserver.PathUploadForm)
			} else {
				args = append(args, "-T", im.qcow2, base+uploadserver.PathUpload)
			}
			out, err := exec.Command("curl", args...).Output()
			require.NoError(t, err)
			assert.Equal(t, "200", string(out))
			assert.Equal(t, im.digest, testimg.Digest(t, o.Target, diskSize))
		}
	})

	t.Run("killed client then retry", func(t *testing.T) {
		o := fileTarget(t)
		h, base := serve(t, uploadserver.Options{Import: o})
		slow := exec.Command("curl", "-sS", "--limit-rate", "256k", "-T", im.raw, base+uploadserver.PathUpload)
		require.NoError(t, slow.Start())
		t.Cleanup(func() { _ = slow.Process.Kill(); _ = slow.Wait() })
		waitStatus(t, h, func(s uploadserver.Status) bool { return s.Busy && s.Bytes > 256<<10 })
		require.NoError(t, slow.Process.Kill())
		_ = slow.Wait()
		st := waitStatus(t, h, func(s uploadserver.Status) bool { return !s.Busy })
		assert.Equal(t, "Error", st.Phase)
		assert.False(t, st.Complete)
		assert.Contains(t, st.Error, "client disconnected")

		deadline := time.Now().Add(10 * time.Second)
		var out []byte
		var err error
		for time.Now().Before(deadline) {
			out, err = exec.Command("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-T", im.raw, base+uploadserver.PathUpload).Output()
			if err == nil && strings.TrimSpace(string(out)) != "409" {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		require.NoError(t, err)
		assert.Equal(t, "200", strings.TrimSpace(string(out)))
		assert.Equal(t, im.digest, testimg.Digest(t, o.Target, diskSize))
	})
}
