package cdi

// Exit codes of the importer binary.
const (
	ExitOK     = 0
	ExitFailed = 1
	// ExitUsage is the command line's "you asked wrongly"; the environment
	// contract never uses it, as CDI's controller only tells 0 from non-zero.
	ExitUsage = 2
)

// ExitCode is the exit code under CDI's contract. Like CDI's importer, two
// failures exit 0 so that the controller reads the JSON termination
// message instead of letting the kubelet restart the same pod: a checksum
// mismatch (the controller fails the import for good rather than download
// the same wrong bytes again) and scratch space required (the controller
// creates a scratch volume and recreates the pod with it).
func ExitCode(err error) int {
	switch Classify(err) {
	case Succeeded, ChecksumMismatch, ScratchSpaceRequired:
		return ExitOK
	}
	return ExitFailed
}

// CLIExitCode is the exit code of a command-line run: 2 when the options
// were wrong (fix the command and retry), 1 for any other failure.
func CLIExitCode(err error) int {
	switch Classify(err) {
	case Succeeded:
		return ExitOK
	case InvalidOptions:
		return ExitUsage
	}
	return ExitFailed
}
