package imagetest

import (
	"io/fs"
	"syscall"
)

// fileOwner is the uid owning a file.
func fileOwner(info fs.FileInfo) int {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
