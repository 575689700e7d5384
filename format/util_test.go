package format

import (
	"encoding/binary"
	"hash/crc32"
	"os/exec"
)

func le32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }

func crc32IEEE(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

func execLookPath(name string) (string, error) { return exec.LookPath(name) }
