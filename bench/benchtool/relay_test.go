package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net"
	"testing"
	"time"
)

// TestRelayCarriesBothDirectionsExactly: 8 MiB of random bytes sent
// through the relay (a window of 1 MiB, so the window has to be freed
// again and again) come back from an echo server through it byte for
// byte, and the client's half-close reaches the server and ends the
// answer.
func TestRelayCarriesBothDirectionsExactly(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c) // ends at the relayed half-close
			}()
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		farLink{delay: 5 * time.Millisecond, window: 1 << 20}.serve(ctx, ln, echo.Addr().String())
	}()
	defer func() {
		cancel()
		ln.Close()
		<-served
	}()

	data := make([]byte, 8<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(2 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		sent <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("echo through the relay: %d bytes, sha256 %x; sent %d bytes, sha256 %x", len(got), sha256.Sum256(got), len(data), sha256.Sum256(data))
	}
}

// The relay's pacing keeps the rate when its writer wakes late: parcels
// queued behind a late one go back to back from the schedule, not from
// the clock, and a parcel that reaches an idle link starts when it came.
func TestPacerKeepsTheRateWhenTheWriterWakesLate(t *testing.T) {
	const rate = 125_000_000 // bytes per second
	t0 := time.Unix(1_000_000, 0)
	var p pacer
	// 100 parcels of 125,000 bytes (1 ms each), all queued at t0: however
	// late the writer woke for each, the last leaves at 100 ms.
	var end time.Time
	for range 100 {
		end = p.send(t0, 125_000, rate)
	}
	if want := t0.Add(100 * time.Millisecond); !end.Equal(want) {
		t.Errorf("100 queued parcels of 1 ms end at %v after the first's arrival, want %v", end.Sub(t0), want.Sub(t0))
	}
	// A parcel arriving after the link went idle starts when it arrives.
	later := t0.Add(time.Second)
	if got, want := p.send(later, 125_000, rate), later.Add(time.Millisecond); !got.Equal(want) {
		t.Errorf("a parcel on an idle link ends %v after it came, want 1ms", got.Sub(later))
	}
}
