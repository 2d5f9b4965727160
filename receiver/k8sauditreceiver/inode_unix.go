//go:build unix

package k8sauditreceiver

import (
	"io/fs"
	"syscall"
)

func inode(info fs.FileInfo) (uint64, bool) {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino), true //nolint:unconvert // Ino is uint32 on some platforms.
	}
	return 0, false
}

// device is the ID of the filesystem holding the file: an inode number is unique only within one.
func device(info fs.FileInfo) (uint64, bool) {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), true //nolint:unconvert,gosec // Dev is int32 or uint32 on some platforms.
	}
	return 0, false
}
