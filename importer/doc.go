// Package importer imports a disk image onto a volume: the engine behind a
// replacement for KubeVirt CDI's importer, for a program that imports
// disks (a controller, a command line, a migration tool). It holds the
// import itself (the plan, the phases, the restarts) behind the few
// functions and types below; the mechanisms it drives (decoders, writers,
// the sandbox) live under internal/.
//
// # Entry points
//
//   - [Import] copies an image from a source (an http(s) URL, a container
//     image reference, a local file or block device, or a stream) onto a
//     target (a block device, a file, or a directory for an archive),
//     converting it to raw or qcow2 and growing a file to the requested size.
//   - [CreateBlank] makes an empty disk of a given size.
//   - [ResolveDigest] tells which manifest a container-image reference
//     resolves to, reading no layer, so a poller can decide whether to
//     import again.
//   - [Inspect] tells what an import of a source would find and do,
//     writing nothing; [ContentDigest] gives a source's content digest.
//   - [ReceiveDelta] applies a delta pass whose runs arrive over the wire
//     (a [ReceivedDelta]) onto a target holding an earlier copy.
//
// # How an import runs
//
// An import is a plan, decided once from the headers, executed by phases.
// The Info phase opens the target and the source, peels compression,
// identifies the image, refuses what cannot fit or is unsafe, and picks a
// route: stream raw bytes onto the target, convert a local image in place,
// convert an HTTP object over byte ranges, copy to scratch then convert, or
// extract an archive. The phases of that route then run in order, each
// logged as "New phase: X" and listed in [Result.Phases]:
//
//	Info → (TransferScratch | TransferDataFile | TransferDataDir) → Validate → Convert → Resize → Verify → Commit → Complete
//
// or Error at the first failure. Commit syncs the target and moves it to its
// final name, so [PhaseComplete] (and [Result.Complete]) means the data is
// durable; a failed import leaves no target behind, and a block device a
// converter had written has its first MiB wiped. A transfer that cannot
// resume is started over from Info with a fresh read of the source.
//
// # What runs qemu-img
//
// Raw images, archives, blank raw disks and images the stream decoder reads
// in one pass (qcow2, streamOptimized vmdk, dynamic vhd, vdi, vhdx) onto a
// raw target need nothing but this package. qemu-img (Debian's qemu-utils)
// converts the rest: a qcow2 target, a monolithicSparse vmdk or a fixed vhd
// to convert, an image read in place or over byte ranges when that route is
// faster, and Verify's comparison. Each run is sandboxed: the program
// re-executes its own binary (/proc/self/exe) to confine itself before it
// starts qemu-img (package qemu). Without qemu-img installed the stream
// decoder takes every import it can; the others fail with [ErrToolMissing].
//
// # Observing an import
//
// [Options.Progress] is called about once a second, and as each phase
// starts, with byte counts and a percentage; never twice at once. [Options.Events] is called synchronously with each [Event]:
// a phase started or ended, and [EventSourceDrained] once every byte of the
// source has been received and validated (the upload server answers an
// asynchronous upload then).
//
// # Errors
//
// Failures wrap one of the Err values ([ErrTargetTooSmall],
// [ErrInvalidImage], [ErrChecksumMismatch], ...), shared with every layer
// through package errdefs; test them with errors.Is. [*SizeError],
// [*HTTPStatusError] and [*VerifyError] carry details for errors.As.
package importer
