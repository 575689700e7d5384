// Package importer imports a disk image onto a volume: the engine behind a
// replacement for KubeVirt CDI's importer. It is the public face of the
// module; everything it drives lives under internal/.
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
// # Observing an import
//
// [Options.Progress] is called about once a second with byte counts and a
// percentage. [Options.Events] is called synchronously with each [Event]:
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
