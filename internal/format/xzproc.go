package format

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/sandbox"
)

// childProc decodes a compressed stream with an external command-line tool
// (xz -dc, igzip -dc): it feeds the compressed input to the child's stdin
// and reads the decoded bytes from its stdout, through paced pipes
// (pacedPipeReader). What differs between tools is only the command line and how
// the child's failure message maps onto the engine's error kinds.
type childProc struct {
	ctx    context.Context
	name   string // the codec, prefixed to errors
	child  *sandbox.Child
	stdout io.ReadCloser
	stderr *sandbox.StderrBuffer
	src    *sourceReader
	fed    chan struct{} // closed when the feeder goroutine has returned
	// stdin is the child's input when the caller writes it (src nil: a
	// BlockInflater), nil when the feeder copies src.
	stdin io.WriteCloser
	// blockIn is the BlockInflater's input ring (childSpec.blockInSlots),
	// mapped writable here.
	blockIn []byte
	// inBack is where the child hands input slots back (an input ring),
	// closed once the child is reaped: the child may hand back its last
	// slots after the feeder has ended.
	inBack io.Closer
	eof    bool // the child finished cleanly and all output was read
	// failed maps a failed exit (not cancellation, not a source failure)
	// to an error from the child's stderr message and its exit error.
	failed func(msg string, err error) error

	mu      sync.Mutex
	waited  bool
	waitErr error
}

// xzMemlimit is the hard memory limit given to the xz child: the largest
// accepted dictionary plus room for buffers. It refuses hostile
// dictionaries in every mode; the multi-threaded limit (xzThreads) is soft
// and xz never lets it exceed this one.
func xzMemlimit(o Options) int64 {
	return 2*o.MaxXZDictionary + 64<<20
}

// xz decodes about 2.5x faster than ulikunitz/xz on one core, and on
// multi-block files it uses every core.
func startXZ(ctx context.Context, bin string, src *sourceReader, o Options) (*childProc, error) {
	threads, budget := xzThreadsLogged(o)
	args := []string{"-dc", fmt.Sprintf("-T%d", threads),
		fmt.Sprintf("--memlimit-decompress=%d", xzMemlimit(o)),
		fmt.Sprintf("--memlimit-mt-decompress=%d", budget)}
	return startChild(ctx, childSpec{name: "xz", bin: bin, args: args, addressSpace: xzAddressSpace(o, threads),
		failed: xzFailed, paced: true}, src, o)
}

// startXZRing decodes xz with diskimport-inflate's xz mode (liblzma, as xz
// -dc uses it, with the same threads and memory limits), which reads the
// stream from an input ring and decodes into the output ring, so no pipe
// carries either. On the bench's 2 GiB raw.xz, xz -dc's 8 KiB writes into
// its pipe cost 3 CPU-s of system time over decoding into /dev/null.
func startXZRing(ctx context.Context, bin string, src *sourceReader, o Options) (*childProc, error) {
	threads, budget := xzThreadsLogged(o)
	// One thread: no thread is ever started, so none may be.
	var processes uint64
	if threads == 1 {
		processes = 1
	}
	return startChild(ctx, childSpec{name: "xz", bin: bin,
		args: []string{"xz", strconv.Itoa(ringSlotBytes), strconv.Itoa(ringSlots),
			strconv.Itoa(inRingSlotBytes), strconv.Itoa(inRingSlots),
			strconv.Itoa(threads), strconv.FormatInt(xzMemlimit(o), 10), strconv.FormatInt(budget, 10)},
		addressSpace: xzRingAddressSpace(o, threads), processes: processes,
		failed: xzFailed, ring: true, inputRing: true}, src, o)
}

// xzThreadsLogged is the xz decoder's thread count and multi-threaded
// memory budget (xzThreadsHere), logged. The budget is soft: the decoder
// starts as many of the threads as fit in it and decodes single-threaded
// when not even two do, so it follows the memory the pod has (see
// xzThreads).
func xzThreadsLogged(o Options) (threads int, budget int64) {
	threads, budget, err := xzThreadsHere()
	if err != nil {
		o.Logger.Debug("xz: memory limits unknown, using a small thread budget", "err", err)
	}
	o.Logger.Debug("xz threads", "threads", threads, "memlimit_mt", budget)
	return threads, budget
}

// xzRingAddressSpace is the xz ring child's RLIMIT_AS: xz's
// (xzAddressSpace) and its two rings.
func xzRingAddressSpace(o Options, threads int) uint64 {
	return xzAddressSpace(o, threads) + ringSlotBytes*ringSlots + inRingSlotBytes*inRingSlots
}

// xzThreadAddressSpace is what each xz decoder thread maps beyond the
// memory xz itself accounts for (its 8 MiB stack, buffers; glibc's
// per-thread malloc arenas are optional and fall back under the limit);
// xzBaseAddressSpace is the rest of xz: binary, libraries, main heap.
// Measured with xz 5.4 -T2, smallest RLIMIT_AS that decodes: 63 MiB for
// 8 MiB blocks of preset 0, 302 MiB for blocks with 128 MiB dictionaries
// (256 MiB accounted), against 320+2*16+64 = 416 MiB here.
const (
	xzThreadAddressSpace = 16 << 20
	xzBaseAddressSpace   = 64 << 20
)

// xzAddressSpace is the xz child's RLIMIT_AS: xz never accounts more than
// its hard memory limit (xzMemlimit), so the cap lies above what xz may
// legitimately map with that many threads, and xz's own "memory usage
// limit" message, not an allocation failure, is what a hostile file meets.
func xzAddressSpace(o Options, threads int) uint64 {
	return uint64(xzMemlimit(o)) + uint64(threads)*xzThreadAddressSpace + xzBaseAddressSpace
}

// xzFailed maps the failure messages of xz and of diskimport-inflate's xz
// mode (its words in lower case).
func xzFailed(msg string, err error) error {
	msg = strings.TrimPrefix(msg, "diskimport-inflate: ")
	switch lower := strings.ToLower(msg); {
	case strings.Contains(lower, "memory usage limit"):
		return fmt.Errorf("xz: %s: %w", msg, errdefs.ErrUnsafeImage)
	case strings.Contains(lower, "unexpected end of input"):
		return fmt.Errorf("xz: unexpected end of stream (truncated?): %s: %w", msg, errdefs.ErrInvalidImage)
	}
	return fmt.Errorf("xz: %v: %s: %w", err, msg, errdefs.ErrInvalidImage)
}

// childSpec is what differs between decoding tools.
type childSpec struct {
	name string // the codec, prefixed to errors and log messages
	bin  string
	args []string
	// addressSpace and processes are the child's RLIMIT_AS and
	// RLIMIT_NPROC (0: not limited); see sandbox.Policy.
	addressSpace, processes uint64
	// failed maps a failed exit (not cancellation, not a source failure)
	// to an error from the child's stderr message and its exit error.
	failed func(msg string, err error) error
	// paced reads the child's stdout only once the pipe is half full and
	// writes its stdin only once it is half empty. That suits xz, which
	// reads and writes 8 KiB at a time at a few hundred MB/s. igzip is
	// much faster at both ends (its output, runs of zeros, at GB/s; its
	// input at ~270 MB/s): a pipe it fills or drains within one minimum
	// sleep stalls it, so both its ends are used as they come. Measured
	// on raw.gz: output paced, 2 GiB 2.5 s instead of 1.6 s; input paced,
	// 1 GiB decoded into nothing 1.14-1.55 s (median 1.33) instead of
	// 1.07-1.25 s (1.07), 5 interleaved runs (a whole import over HTTP
	// onto a loop device, where the decoder is not what binds, took the
	// same either way: mean 1.37 s and 1.36 s, 23 interleaved runs).
	paced bool
	// ring: the child decodes into a shared memory ring (ringReader)
	// instead of writing to its stdout; of ringSlots slots of
	// ringSlotBytes (0: the gzip child's, ringSlots and ringSlotBytes).
	ring                     bool
	ringSlots, ringSlotBytes int
	// zeroRuns: the ring child names the granules of zeros it decoded
	// (the gzip mode), which the reader then gives as runs.
	zeroRuns bool
	// inputRing: src reaches the child through an input ring
	// (inputRing: inRingSlots of inRingSlotBytes, its descriptors after
	// the output's), records on its stdin, instead of through the pipe.
	inputRing bool
	// blockInSlots of blockInSlotBytes: the caller's blocks reach the
	// child through a sealed input ring (sealedInput, its descriptor 5),
	// records on its stdin (BlockInflater), instead of through the pipe.
	blockInSlots, blockInSlotBytes int
}

// startChild runs the tool sp describes as the decoder of src, confined
// as a sandbox.PipeFilter: it opens no file, and dies with its context
// and with us.
func startChild(ctx context.Context, sp childSpec, src *sourceReader, o Options) (*childProc, error) {
	name := sp.name
	// The launcher execs an absolute path; a bare name is looked up on
	// PATH, as exec.Command does.
	bin, err := exec.LookPath(sp.bin)
	if err == nil {
		bin, err = filepath.Abs(bin)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w: %w", name, sp.bin, errdefs.ErrInvalidOptions, err)
	}
	// The child's whole environment: nothing of ours may change its
	// behaviour (XZ_OPT, XZ_DEFAULTS could, for example, lift the memory
	// limit), and the C locale keeps its messages stable for failed.
	args, failed := sp.args, sp.failed
	if sp.ring {
		// A ring child is diskimport-inflate, told first which protocol
		// the importer speaks, so that another build refuses to start
		// instead of being misread.
		args = append([]string{inflateProtocol}, args...)
		failed = otherProtocolFailed(bin, failed)
	}
	policy := sandbox.PipeFilter(bin, args, []string{"LC_ALL=C"})
	policy.AddressSpace, policy.Processes = sp.addressSpace, sp.processes
	// Our own pipes rather than exec's, so they can be grown, kept out of
	// the poller and paced (pacedPipeReader).
	inR, inW, err := blockingPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	inSize := growPipe(inW, xzPipeSize)
	stdin := newPacedPipeWriter(inW, inSize)
	if !sp.paced {
		stdin.half = 0
	}
	stdout, childOut, extra, err := sp.output()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	in, blockIn, inExtra, err := sp.input(stdin)
	if err != nil {
		inR.Close()
		inW.Close()
		stdout.Close()
		childOut.Close()
		for _, f := range extra {
			f.Close()
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	extra = append(extra, inExtra...)
	o.Logger.Debug(name+" child", "stdin_bytes", inSize, "ring", sp.ring,
		"sandbox", sandbox.Describe(), "as", policy.AddressSpace, "nproc", policy.Processes)
	p := &childProc{ctx: ctx, name: name, stdout: stdout, stderr: sandbox.NewStderrBuffer(4096, 0),
		src: src, fed: make(chan struct{}), failed: failed}
	p.child, err = sandbox.Start(ctx, policy, sandbox.Stdio{Stdin: inR, Stdout: childOut, Stderr: p.stderr, Extra: extra})
	// The child has its own copies of its ends now (or never will).
	inR.Close()
	childOut.Close()
	for _, f := range extra {
		f.Close()
	}
	if err != nil {
		if in != nil {
			in.close() // closes stdin too
			in.back.Close()
		} else {
			stdin.Close()
		}
		if blockIn != nil {
			_ = unix.Munmap(blockIn)
		}
		stdout.Close()
		return nil, fmt.Errorf("%s: %w: %w", name, errdefs.ErrInvalidOptions, err)
	}
	switch {
	case in != nil:
		p.inBack = in.back
		go p.feedRing(in)
	case src == nil:
		p.stdin, p.blockIn = stdin, blockIn
		close(p.fed)
	default:
		go p.feed(stdin)
	}
	return p, nil
}

// input makes the child's input ring when it has one, the gzip feeder's
// (inputRing, its records to stdin) or a BlockInflater's (blockIn, the
// mapping it copies blocks into), and returns it with the child's ends of
// it, its descriptors from 5 on.
func (sp childSpec) input(stdin io.WriteCloser) (in *inputRing, blockIn []byte, files []*os.File, err error) {
	switch {
	case sp.inputRing:
		in, files, err = newInputRing(inRingSlotBytes, inRingSlots, stdin)
	case sp.blockInSlots > 0:
		var mem *os.File
		if blockIn, mem, err = sealedInput(sp.blockInSlots * sp.blockInSlotBytes); err == nil {
			files = []*os.File{mem}
		}
	}
	return in, blockIn, files, err
}

// output makes where the child's decoded bytes go and how they are read:
// the reader, the child's stdout and its descriptors from 3 on.
func (sp childSpec) output() (io.ReadCloser, *os.File, []*os.File, error) {
	if sp.ring {
		slots, slotBytes := ringSlots, ringSlotBytes
		if sp.ringSlots > 0 {
			slots, slotBytes = sp.ringSlots, sp.ringSlotBytes
		}
		r, stdout, extra, err := newRingReader(slotBytes, slots)
		if err != nil {
			return nil, nil, nil, err
		}
		r.zeroRuns = sp.zeroRuns
		return r, stdout, extra, nil
	}
	// Our own pipe rather than exec's, so it can be grown, kept out of
	// the poller and paced (pacedPipeReader).
	outR, outW, err := blockingPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	stdout := newPacedPipeReader(outR, growPipe(outR, xzPipeSize))
	if !sp.paced {
		stdout.target = 0
	}
	return stdout, outW, nil, nil
}

// feed copies the compressed input into the child. It returns when the
// input ends or fails, or when the child goes away (the write then fails).
func (p *childProc) feed(stdin io.WriteCloser) {
	defer close(p.fed)
	defer stdin.Close()
	// Whole buffers, so the pipe sees few large writes whatever sizes the
	// source's reads return.
	buf := make([]byte, 512<<10)
	for {
		n, eof, err := iostage.ReadChunk(p.src, buf)
		if n > 0 {
			if _, werr := stdin.Write(buf[:n]); werr != nil {
				return // the child went away; its exit status says why
			}
		}
		if eof || err != nil {
			return // a source error is in p.src.failure()
		}
	}
}

// feedRing passes the compressed input to the child through its input
// ring. It returns when the input ends or fails, or when the child goes
// away (it hands no slot back then).
func (p *childProc) feedRing(in *inputRing) {
	defer close(p.fed)
	defer in.close()
	for {
		slot, ok := in.take()
		if !ok || !in.fill(p.src, slot) {
			return // a source error is in p.src.failure()
		}
	}
}

func (p *childProc) Read(b []byte) (int, error) {
	if p.eof {
		return 0, io.EOF
	}
	n, err := p.stdout.Read(b)
	return n, p.outputErr(err)
}

// ReadRun is Read, passing on the granules of zeros a ring child named
// as runs (iostage.RunReader).
func (p *childProc) ReadRun(b []byte) (int, int64, error) {
	if p.eof {
		return 0, 0, io.EOF
	}
	n, zeros, err := iostage.ReadRun(p.stdout, b)
	return n, zeros, p.outputErr(err)
}

// KnowsRuns says whether the child's output gives runs.
func (p *childProc) KnowsRuns() bool { return iostage.KnowsRuns(p.stdout) }

// outputErr is what a read of the child's output that ended in err
// returns (nil for nil).
func (p *childProc) outputErr(err error) error {
	if err == nil {
		return nil
	}
	// The child closed its output: it has finished or died. Its exit
	// status decides whether this is a clean end.
	if werr := p.wait(); werr != nil {
		return werr
	}
	if err == io.EOF {
		p.eof = true
		return io.EOF
	}
	return fmt.Errorf("%s: reading output: %v: %w", p.name, err, errdefs.ErrInvalidImage)
}

// wait reaps the child once and turns a failure into an error naming the
// cause: cancellation, a failing source, or the child's own message.
func (p *childProc) wait() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waited {
		return p.waitErr
	}
	p.waited = true
	err := p.child.Wait()
	p.closeAfterExit() // the child is gone: nothing more can come
	if err == nil {
		// The child read its input to the end, so the feeder is done; a
		// source that failed exactly between two streams still counts.
		<-p.fed
		p.waitErr = p.src.failure()
		return p.waitErr
	}
	msg := strings.TrimSpace(p.stderr.String())
	if setup, ok := sandbox.SetupError(p.child.ExitCode(), msg); ok {
		p.waitErr = fmt.Errorf("%s: %s: %w", p.name, setup, errdefs.ErrInvalidOptions)
		return p.waitErr
	}
	switch {
	case p.ctx.Err() != nil:
		p.waitErr = fmt.Errorf("%s: %w: %w", p.name, errdefs.ErrCancelled, p.ctx.Err())
	case p.src.failure() != nil:
		p.waitErr = p.src.failure()
	default:
		p.waitErr = p.failed(msg, err)
	}
	return p.waitErr
}

// closeAfterExit closes our ends of the child's output and of its input
// ring's slots handed back, once it was reaped.
func (p *childProc) closeAfterExit() {
	p.stdout.Close()
	if p.inBack != nil {
		p.inBack.Close()
	}
}

// Close stops the child if it still runs and reaps it. Stopping it early is
// the caller's choice, so that is not reported as an error. The feeder
// goroutine ends as soon as its pending read of the source returns.
func (p *childProc) Close() error {
	p.mu.Lock()
	waited := p.waited
	p.mu.Unlock()
	if waited {
		return nil
	}
	if err := p.child.Kill(); err != nil {
		return fmt.Errorf("%s: stopping child: %w", p.name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.waited {
		p.waited = true
		_ = p.child.Wait()
		p.closeAfterExit()
		p.waitErr = errors.New(p.name + ": decoder closed")
	}
	return nil
}
