package uploadserver_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/bubblenet"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// hostIP is a non-loopback IPv4 address of this machine.
func hostIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address here")
	return ""
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// runServer runs s until the test ends; the channel gets Run's error.
func runServer(t *testing.T, s *uploadserver.Server) <-chan error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_, err := s.Run(ctx)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		<-ended
	})
	return done
}

// reachable dials addr until it answers, for a minute at most (it returns
// at the first answer; the bound is only for a server that never listens).
func reachable(addr string) bool {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// TestUnprotectedServerListensOnLoopbackOnly: no TLS, token or client CA
// moves a server asked for every interface to 127.0.0.1; ListenAnywhere
// allows it.
func TestUnprotectedServerListensOnLoopbackOnly(t *testing.T) {
	ip := hostIP(t)
	for _, anywhere := range []bool{false, true} {
		port := freePort(t)
		runServer(t, &uploadserver.Server{
			Options: uploadserver.Options{Import: importer.Options{Target: t.TempDir()}, Logger: testimg.Logger(t)},
			Addr:    "0.0.0.0:" + port, ListenAnywhere: anywhere,
		})
		require.True(t, reachable("127.0.0.1:"+port), "loopback")
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, port), time.Second)
		if err == nil {
			c.Close()
		}
		assert.Equal(t, anywhere, err == nil, "reachable at %s with ListenAnywhere=%v: %v", ip, anywhere, err)
	}
}

// TestDeadlinePassed: with no upload before the deadline Run ends with
// ErrDeadlinePassed, and the target is untouched. In a synctest bubble over
// an in-memory listener: the HEAD lands before the 300 ms deadline and the
// server ends exactly at it, whatever the machine's load (on loopback a
// slow start could let the deadline pass before the HEAD).
func TestDeadlinePassed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		l := bubblenet.NewListener()
		start := time.Now()
		done := runServer(t, &uploadserver.Server{
			Options:  uploadserver.Options{Import: importer.Options{Target: dir}, Logger: testimg.Logger(t)},
			Listener: l,
			Deadline: start.Add(300 * time.Millisecond),
		})
		client := &http.Client{Transport: &http.Transport{DialContext: l.DialContext}}
		resp, err := client.Head(bubblenet.URL + uploadserver.PathUpload)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "HEAD on an upload path")
		client.CloseIdleConnections()
		err = <-done
		assert.ErrorIs(t, err, errdefs.ErrDeadlinePassed)
		assert.Equal(t, 300*time.Millisecond, time.Since(start), "ended at the deadline")
		assert.NoFileExists(t, dir+"/disk.img")
	})
}
