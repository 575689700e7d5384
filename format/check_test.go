package format

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/diskimport/engine/errdefs"
)

func TestCheckStructureDispatchesByFormat(t *testing.T) {
	junk := bytes.Repeat([]byte{0xEE}, 4096)
	for _, f := range []Format{Raw, ISO} {
		assert.NoError(t, CheckStructure(f, bytes.NewReader(junk), int64(len(junk))), f)
	}
	for _, f := range []Format{QCOW2, VDI, VHD, VHDX, VMDK} {
		assert.ErrorIs(t, CheckStructure(f, bytes.NewReader(junk), int64(len(junk))), errdefs.ErrInvalidImage, f)
	}
}
