package main

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// smallWindowListener keeps each accepted connection's receive buffer
// small, so a slow reader holds the sender back instead of the kernel
// taking the whole stream into its buffers.
type smallWindowListener struct{ net.Listener }

func (l smallWindowListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(32 << 10)
	}
	return c, err
}

// A cloner pod sending to a server that takes its stream slowly (CDI's
// upload server, which offers no sparse-v2) serves CDI's clone progress
// metric rising while it sends, as CDI's controller scrapes it for the
// DataVolume's progress; the server receives the source's bytes.
func TestClonePodProgressMetric(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "source.img", 40<<20, 63)
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	want := sha256.Sum256(data)
	received := make(chan string, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return // HEAD: no sparse-v2 offered
		}
		h := sha256.New()
		body := s2.NewReader(r.Body)
		buf := make([]byte, 64<<10)
		for {
			n, err := body.Read(buf)
			h.Write(buf[:n])
			if err == io.EOF {
				break
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			time.Sleep(8 * time.Millisecond) // about 8 MB/s: 5 s, of which the buffers between the two take about 9 MB
		}
		received <- hex.EncodeToString(h.Sum(nil))
	}))
	srv.Listener = smallWindowListener{srv.Listener}
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	// httptest's one certificate: the server's, its own CA, and here the
	// cloner's too.
	certPEM, keyPEM, _ := testCertificate(t)
	port := freePort(t)
	const owner = "5d1c2b3a-4e5f-6a7b-8c9d-0e1f2a3b4c5d"
	rp := startPod(t, pod{
		env: map[string]string{
			"UPLOAD_URL": srv.URL + "/v1beta1/upload", "VOLUME_MODE": "block", "MOUNT_POINT": "/dev/cdi-block-volume",
			"CLIENT_CERT": certPEM, "CLIENT_KEY": keyPEM, "SERVER_CA_CERT": certPEM,
			"OWNER_UID": owner, "PREALLOCATION": "false", "IMPORTER_METRICS_LISTEN": "127.0.0.1:" + port,
		},
		volumes: map[string]string{"/dev/cdi-block-volume": src},
	})
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var seen []float64
	for scraping := true; scraping; {
		select {
		case <-rp.done:
			scraping = false
		case <-time.After(100 * time.Millisecond):
		}
		body, err := scrapeOnce(client, "https://127.0.0.1:"+port+"/metrics")
		if err != nil {
			continue
		}
		if v := cdiProgress(body, owner); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			seen = append(seen, f)
		}
	}
	require.Equal(t, cdi.ExitOK, rp.wait(t), rp.stderr.String())
	t.Logf("percentages scraped: %v", seen)
	for i := 1; i < len(seen); i++ {
		assert.GreaterOrEqual(t, seen[i], seen[i-1], "the percentage went back at scrape %d: %v", i, seen)
	}
	between := map[float64]bool{}
	for _, v := range seen {
		if v > 0 && v < 100 {
			between[v] = true
		}
	}
	assert.GreaterOrEqual(t, len(between), 3, "several percentages between 0 and 100 while it ran: %v", seen)
	select {
	case got := <-received:
		assert.Equal(t, hex.EncodeToString(want[:]), got, "the server received the source's bytes")
	default:
		t.Fatal("the server received no whole stream")
	}
}
