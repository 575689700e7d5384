package importer

// How an import runs inside the package: a plan decided once, then phases
// that own their resources.
//
// Import runs attempts (importWithRestarts) until one ends without asking to
// start over. Each attempt is a machine run: the Info phase opens the
// target and the source (sourceReader), identifies the image, runs the
// checks that can be made before a byte is written (sizes, the clone rules
// of checkClone), gathers what the route depends on once (importFacts: the
// image, the source's declared capabilities, a range probe and a qcow2's
// tables where the choice reads them) and has decide, which does no I/O,
// return an immutable importPlan and the reason for its route, logged in one
// line: the routeKind, the formats, how to verify and the ordered phases
// (phasesFor). The machine then runs
// those phases in order, logs "New phase: X" for each, emits Events to
// its observer and stops at the first error by entering PhaseError.
//
// Each phase is a small type over what it owns, or a method of the attempt
// when it owns nothing (the attempt type lists what they share by design:
// the request, the target and source reader from Info, the plan, the
// result being filled, the progress meter):
//
//	TransferDataFile  attempt.transferRaw   raw bytes onto the target
//	                  attempt.decodeStream  the stream decoder's guest writes onto the target
//	TransferScratch   scratchTransfer       the image to a scratch file, handed to imageInput
//	TransferDataDir   archiveExtraction     a tar into a staging directory it owns
//	TransferDelta     attempt.transferDelta both sides signed, the runs that differ into the target in place
//	                                        (received: the runs the upload server's session hands over)
//	Validate          validation            structure, self-containment, sizes; starts the ranged export
//	Convert           conversion            qemu-img onto the target (a device through nbdserver.DeviceExport)
//	Resize            attempt.resize        a file to its requested size
//	Verify            verification          source and target read back and compared
//	                  attempt.verifyDelta   a delta pass's target digest against the source's
//	Commit            attempt.commit / archiveExtraction.commit: fsync and rename;
//	                  attempt.commitDelta: a delta pass's held ends written and synced
//
// imageInput is what qemu-img reads on a converting route; it
// owns the scratch copy and the ranged NBD export (nbdserver.ImageExport) once they are
// handed to it. On routeDelta Info opens a delta.LocalPass (the
// source, and the target claimed where it lies) or, for a pass received
// over the wire (request.DeltaReceived), claims and signs the target of
// a delta.ReceivedPass (ReceiveDelta: the caller's runs), instead of a volume.Target, and the delta phases
// run its steps. A blank disk (request.Blank) has no source: Info opens
// the target and plans routeBlank, whose Resize creates the disk.
//
// To add a phase: a type with run(ctx) error over what it owns (or an
// attempt method, if it owns nothing), a Phase constant (phase.go), its place in phasesFor for the routes that
// take it, and its
// entry in attempt.steps.
