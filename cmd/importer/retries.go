package main

// cliRetries maps --retries to importer.Options.Retries, where 0 means the
// default and a negative value means none: on the command line 0 is none.
func cliRetries(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
