package datasource

import (
	"net"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"
)

// The count of range connections an object is read over, decided here and
// nowhere else (Access.Connections 0, the CLI's default, CDI's pods
// without IMPORTER_CONNECTIONS). The rule:
//
//   - A count the user set (--connections, Access.Connections,
//     IMPORTER_CONNECTIONS) is taken as it is.
//   - On a far link, DefaultConnections: a far or busy mirror caps each
//     connection, not the link, and sixteen connections took 0.98 s where
//     one took 12.6 s (the far mirror: 8 MB/s per connection, 30 ms first
//     byte; docs/far-links.md).
//   - With the CPU to spare (cpulimit.Cores: two or more CPUs, the cgroup's
//     quota counted), DefaultConnections too: on 127.0.0.1 one connection
//     and sixteen took the same wall time (a 1 GiB raw disk, 1.07 s and
//     1.08 s), so keeping them costs nothing there and keeps a near server
//     that caps each connection fast.
//   - On a near link with less than two CPUs, one GET: the import is
//     CPU-bound, not link-bound, and the ranged body costs CPU one
//     connection does not (every byte copied out of its chunk buffers,
//     the buffers first touched, sixteen TCP streams). Under CDI's 750m
//     (bench/cpu.sh: a 75 ms / 100 ms CFS quota, from 127.0.0.1 onto a
//     loop device, interleaved, load 3-6), sixteen connections -> one GET
//     on the 2 GiB bench disk: raw 2.10 -> 1.60 CPU-s and 2.76 -> 2.14 s,
//     qcow2 decoded as a stream 1.56 -> 1.37 CPU-s and 2.08 -> 1.81 s;
//     256M raw.gz 0.69 -> 0.65 CPU-s (bench/RESULTS.md).
//
// A link is near when the object's URL (after redirects) names this
// machine (localhost, a loopback address), or when its first answer
// arrived within nearLinkWait of the request, as on a pod network; a far
// mirror took 30 ms and more. This machine is told by its name, not the
// wait: Go's file server on 127.0.0.1 answered in 2.3 ms at load 3, and in
// 5.2 ms to a process under the 750m quota (its own throttling counts).
// Unsure is far: the wait is not known through a caller's own Transport,
// and a process throttled while it waits may see a near server as far,
// which only keeps the sixteen.
const (
	// nearLinkWait: a first answer within this of its request (one round
	// trip and the server's time to start) is a near link. A pod network
	// answers within a millisecond or two; the far mirror's first byte
	// takes 30 ms, an object store's usually 10 ms or more.
	nearLinkWait = 5 * time.Millisecond
	// scarceCores: below this many CPUs (cpulimit.Cores) an import on a
	// near link is CPU-bound.
	scarceCores = 2.0
)

// linkFacts is what the source's first answer told of the path to its
// server.
type linkFacts struct {
	// loopback: the answering URL's host is localhost or a loopback
	// address.
	loopback bool
	// wait is the time from the request written to the answer's first
	// byte; 0 when not known.
	wait time.Duration
}

// near tells whether the link is near (see the rule above).
func (l linkFacts) near() bool {
	return l.loopback || (l.wait > 0 && l.wait <= nearLinkWait)
}

// rangeConnections decides how many connections an object is read over:
// asked (Access.Connections, 0 for the default) when set, else by the
// rule above from the CPUs the process may use and the link. why says
// which part of the rule decided, for the log.
func rangeConnections(asked int, cores float64, link linkFacts) (n int, why string) {
	switch {
	case asked > 0:
		return asked, "asked"
	case !link.near():
		return DefaultConnections, "far link"
	case cores >= scarceCores:
		return DefaultConnections, "near link, CPU to spare"
	default:
		return 1, "near link, scarce CPU"
	}
}

// rangeChunkSize decides the size of each range request: asked
// (Config.ChunkSize) when set, else NearChunkSize on a near link and
// DefaultChunkSize on a far one.
func rangeChunkSize(asked int64, link linkFacts) int64 {
	switch {
	case asked > 0:
		return asked
	case link.near():
		return NearChunkSize
	default:
		return DefaultChunkSize
	}
}

// isLoopbackHost tells whether host (a URL's hostname) names this machine:
// localhost or a loopback address (a name below .localhost may be resolved
// anywhere, so it is left to the wait).
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// answerWait measures, for a request sent with the trace it returns, the
// time from the request written to its answer's first byte (the last hop
// of a redirect chain). The transport calls the hooks from its own
// goroutines.
type answerWait struct {
	base  time.Time    // the monotonic clock's origin for wrote
	wrote atomic.Int64 // nanoseconds since base
	wait  atomic.Int64 // nanoseconds
}

func newAnswerWait() *answerWait { return &answerWait{base: time.Now()} }

func (w *answerWait) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { w.wrote.Store(int64(time.Since(w.base)) + 1) },
		GotFirstResponseByte: func() {
			if t := w.wrote.Load(); t != 0 {
				w.wait.Store(int64(time.Since(w.base)) + 1 - t)
			}
		},
	}
}

// get is the wait measured, or 0.
func (w *answerWait) get() time.Duration { return time.Duration(w.wait.Load()) }
