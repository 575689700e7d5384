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
