package engine

// Phase names a step of an import. The values are what is logged ("New
// phase: X") and match CDI's importer where the step exists there; Verify
// and Commit are ours.
type Phase string

const (
	// Info inspects the source and the target and decides the plan.
	Info Phase = "Info"
	// TransferScratch copies the (decompressed) image to a scratch file
	// for qemu-img to read at random.
	TransferScratch Phase = "TransferScratch"
	// TransferDataFile streams raw data straight onto the target.
	TransferDataFile Phase = "TransferDataFile"
	// TransferDataDir extracts a tar stream into a staging directory.
	TransferDataDir Phase = "TransferDataDir"
	// Validate checks the image qemu-img is about to read.
	Validate Phase = "Validate"
	// Convert writes the target with qemu-img.
	Convert Phase = "Convert"
	// Resize grows a file target to the requested size and applies
	// preallocation (for a blank disk: creates it at its size).
	Resize Phase = "Resize"
	// Verify reads source and target back and compares them.
	Verify Phase = "Verify"
	// Commit makes the data durable under its final name (fsync, rename).
	Commit Phase = "Commit"
	// Complete is entered only once the data is durable; it does no work.
	Complete Phase = "Complete"
	// Error is entered after the first failure.
	Error Phase = "Error"
)
