package cdi

// Exit codes of the importer binary.
const (
	ExitOK     = 0
	ExitFailed = 1
	// ExitUsage is the command line's "you asked wrongly"; the environment
	// contract never uses it, as CDI's controller only tells 0 from non-zero.
	ExitUsage = 2
)

// ExitCode is the exit code under CDI's contract. Like CDI's importer, a
// checksum mismatch exits 0: the controller then reads the termination
// message and fails the import for good instead of restarting the pod to
// download the same wrong bytes again.
func ExitCode(err error) int {
	switch Classify(err) {
	case Succeeded, ChecksumMismatch:
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
