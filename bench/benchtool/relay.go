package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// runRelay forwards TCP from a loopback port to -to as a far link would:
// each direction delayed by -delay, paced to -rate, with at most -window
// bytes unacknowledged per direction (a byte counts until its
// acknowledgement would be back, 2 × delay after it was sent, so one
// connection gets at most window / RTT, as TCP does). This kernel has no
// netem qdisc, so the link is emulated here, in userspace, between two
// real programs. It prints the address it listens on and relays until
// SIGTERM or SIGINT.
func runRelay(args []string) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	to := fs.String("to", "", "HOST:PORT to forward to")
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	delay := fs.Duration("delay", 20*time.Millisecond, "one-way delay of each direction")
	rate := fs.String("rate", "0", "bytes per second per direction (decimal units: 1G); 0: no cap")
	window := fs.Int64("window", 4<<20, "bytes in flight per direction (Linux's largest default TCP send buffer)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *to == "" {
		return errors.New("relay: -to is required")
	}
	r, err := parseRate(*rate)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	link := farLink{delay: *delay, rate: r, window: *window}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		link.serve(ctx, ln, *to)
	}()
	fmt.Println(ln.Addr().String())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	cancel()
	ln.Close()
	<-done
	return nil
}

// farLink is the emulated link's shape.
type farLink struct {
	delay  time.Duration
	rate   int64 // bytes per second per direction; 0: no cap
	window int64
}

// serve relays every connection accepted on ln to target until ctx ends.
func (l farLink) serve(ctx context.Context, ln net.Listener, target string) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.relay(ctx, c, target)
		}()
	}
}

// relay joins client to a new connection to target, each direction
// through its own delay line; a direction's end (EOF) is passed on as a
// half-close once the bytes before it arrived.
func (l farLink) relay(ctx context.Context, client net.Conn, target string) {
	defer client.Close()
	var d net.Dialer
	server, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return
	}
	defer server.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		client.Close()
		server.Close()
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.direction(ctx, client, server) }()
	go func() { defer wg.Done(); l.direction(ctx, server, client) }()
	wg.Wait()
}

// parcel is a read's bytes and when they are due at the far end.
type parcel struct {
	b   []byte
	due time.Time
	err error // the read's error (io.EOF: half-close), with no bytes
}

// direction carries src's bytes to dst: a reader stamps each read with
// its due time and waits while the window is full; a writer delivers
// each parcel at its due time, paced to the rate.
func (l farLink) direction(ctx context.Context, src, dst net.Conn) {
	line := make(chan parcel, 1024)
	inflight := make(chan struct{}, 1) // wakes a reader waiting for the window
	var mu sync.Mutex
	var held int64
	release := func(n int64) {
		mu.Lock()
		held -= n
		mu.Unlock()
		select {
		case inflight <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(line)
		for {
			mu.Lock()
			full := held >= l.window
			mu.Unlock()
			if full {
				select {
				case <-inflight:
					continue
				case <-ctx.Done():
					return
				}
			}
			buf := make([]byte, 64<<10)
			n, err := src.Read(buf)
			now := time.Now()
			if n > 0 {
				mu.Lock()
				held += int64(n)
				mu.Unlock()
				// The window is freed when the acknowledgement of these
				// bytes would be back.
				time.AfterFunc(2*l.delay, func() { release(int64(n)) })
				select {
				case line <- parcel{b: buf[:n], due: now.Add(l.delay)}:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				select {
				case line <- parcel{err: err, due: now.Add(l.delay)}:
				case <-ctx.Done():
				}
				return
			}
		}
	}()
	var link pacer
	for p := range line {
		if wait := time.Until(p.due); wait > 0 {
			time.Sleep(wait)
		}
		if p.err != nil {
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(p.err, io.EOF) {
				_ = tc.CloseWrite()
			} else {
				dst.Close()
			}
			return
		}
		if l.rate > 0 {
			time.Sleep(time.Until(link.send(p.due, len(p.b), l.rate)))
		}
		if _, err := dst.Write(p.b); err != nil {
			src.Close()
			return
		}
	}
}

// pacer is a link's schedule at its rate: when each parcel's last byte
// has left.
type pacer struct{ free time.Time }

// send schedules n bytes that reached the link at due and returns when
// they have left: they start once the link is free of the parcels before
// them, or at due if it was idle. The schedule never starts from the
// clock: a writer that slept past a parcel's end (Go's timers overshoot
// a 0.5 ms sleep by up to a millisecond) sends the parcels queued behind
// it back to back, as a link's queue does, instead of losing that time
// on every parcel (paced from the clock, a 125 MB/s relay carried
// 50 MB/s: 752 MB through curl in 15 s).
func (p *pacer) send(due time.Time, n int, rate int64) time.Time {
	start := p.free
	if start.Before(due) {
		start = due
	}
	p.free = start.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
	return p.free
}
