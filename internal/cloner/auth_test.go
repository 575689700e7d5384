package cloner_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/testkit/testpki"
)

// TestCloneRefusesUnauthorizedClients: a certificate of another CA, one of
// the right CA with another name, and none at all are refused before a
// byte is written, in both wire formats; the right one then succeeds.
func TestCloneRefusesUnauthorizedClients(t *testing.T) {
	dir := t.TempDir()
	img := testimg.Raw(t, dir, "source.img", 2*mib, 17)
	p := newPKI(t)
	other := testpki.NewCA(t, t.TempDir(), "other")
	stranger := other.Client(clientName)
	wrongName := p.ca.Client("someone-else")
	dst := filepath.Join(t.TempDir(), "disk.img")
	s := startServer(t, p, importer.Options{Target: dst})
	for _, tc := range []struct {
		name string
		pair *testpki.Pair
	}{
		{"another CA", &stranger},
		{"wrong CLIENT_NAME", &wrongName},
		{"no certificate", nil},
	} {
		for _, protocol := range []string{cloner.ProtocolSparseV2, cloner.ProtocolSnappy} {
			t.Run(tc.name+" "+protocol, func(t *testing.T) {
				_, err := cloner.Send(context.Background(), cloner.Options{
					URL: s.url(""), ContentType: cloner.ContentTypeBlock, Source: img, Protocol: protocol,
					Client: p.clientFor(t, tc.pair), Logger: testimg.Logger(t), Retries: -1,
				})
				require.Error(t, err)
				if tc.pair != &stranger {
					// Past the handshake: the server's 401.
					assert.True(t, errors.Is(err, errdefs.ErrSourceRefused), "%v", err)
					assert.Contains(t, err.Error(), "401")
				}
				assert.NoFileExists(t, dst)
				entries, err := os.ReadDir(filepath.Dir(dst))
				require.NoError(t, err)
				assert.Empty(t, entries, "nothing written beside the target")
			})
		}
	}
	_, err := send(t, p, s.url(""), cloner.ContentTypeBlock, img, cloner.ProtocolAuto)
	require.NoError(t, err)
	_, serr := s.wait(t)
	require.NoError(t, serr)
	assert.Equal(t, fileSHA(t, img), fileSHA(t, dst))
}
