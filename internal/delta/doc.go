// Package delta is the delta pass of a clone: when the target already
// holds an earlier copy of the source (same size), only the blocks that
// differ are sent and written. One mechanism serves both roles: a local
// clone between two files or devices (LocalPass, whose steps the import
// engine's delta route runs as its phases; Local runs them at once) and
// clone-source → upload server, where the signature and the runs cross
// the wire (internal/cloner, uploadserver): the receiving end is a
// ReceivedPass, whose steps the same route runs, taking its Runs (the
// upload server's session hands them over, importer.ReceivedDelta) onto a
// volume's Target, or a filesystem volume's TreeTarget.
//
// A pass:
//
//  1. The receiver signs its target (Target.Sign): the blkhash hash of
//     every 64 KiB block (32 bytes per block: 0.05 % of the volume), holes
//     and zero blocks taking the zero block's hash without hashing, data
//     hashed on all cores, and the target's content digest, which falls
//     out of those hashes.
//  2. The sender signs its source the same way and lists the runs of
//     blocks whose hashes differ (Changes): zero blocks as zero runs, the
//     rest as data runs of at most MaxRun bytes.
//  3. The sender sends the runs in offset order (Send); the receiver
//     writes them in place and replaces those blocks' hashes with the
//     hashes of the bytes it received (Target.Data, Target.Zero).
//  4. The sender's digest of the source as sent (its hashes, those of the
//     runs as read while sending) must equal the receiver's digest of its
//     hashes before the target is called complete (Target.Finish): any
//     block either side got wrong fails the pass.
//  5. The sender signs the source again (Recheck): when nothing changed
//     since step 2 the pass is final, a consistent copy of a quiesced
//     source; otherwise it was a warm pass of a source in use.
//
// A target that is not a base (another size, not readable, or not the
// content digest the sender names as its base) is not passed at all: the
// caller makes a full clone instead, so a result is never a silent mix of
// two volumes. A block device larger than the source is a base where a
// full clone onto it would be taken (DevicePrefix): the pass is of its
// first size bytes, and the rest reads as that full clone leaves it.
//
// The target is written in place: a device cannot be staged, and a file
// is treated the same way (a staged copy would cost the full write a delta
// avoids). Before its first write the pass reads the target's first and
// last MiB into memory and zeroes them on the target, durably; writes that
// land there go to memory, and only once the digests matched and the rest
// was synced are they written, and synced. A pass cut off at any moment
// after writing began leaves a target with no partition table or boot
// sector, which no digest of the source matches and no boot or import
// takes for a finished copy; the next pass sends those blocks again.
package delta
