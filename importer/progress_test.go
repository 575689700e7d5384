package importer

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestOverallPercentIsOneMonotonicPercentage(t *testing.T) {
	var o overallPercent
	assert.Equal(t, -1.0, o.update(PhaseInfo, -1), "nothing known yet")
	assert.Equal(t, 20.0, o.update(PhaseTransferScratch, 40), "the scratch copy is the first half")
	assert.Equal(t, 50.0, o.update(PhaseTransferScratch, 100))
	assert.Equal(t, 50.0, o.update(PhaseValidate, -1))
	assert.Equal(t, 50.0, o.update(PhaseConvert, 0), "the conversion starts where the copy ended")
	assert.Equal(t, 75.0, o.update(PhaseConvert, 50))
	assert.Equal(t, 75.0, o.update(PhaseConvert, 10), "never backwards")
	assert.Equal(t, 99.99, o.update(PhaseResize, -1))
	assert.Equal(t, 99.99, o.update(PhaseCommit, -1), "not 100 before the data is durable")
	assert.Equal(t, 100.0, o.update(PhaseComplete, -1))
	assert.Equal(t, 100.0, o.update(PhaseError, -1))

	var direct overallPercent
	assert.Equal(t, 33.3, direct.update(PhaseTransferDataFile, 33.3), "a stream to the target is the whole import")
	assert.Equal(t, 99.99, direct.update(PhaseTransferDataFile, 100), "all bytes read is not durable yet")

	var ranged overallPercent
	assert.Equal(t, -1.0, ranged.update(PhaseValidate, -1))
	assert.Equal(t, 10.0, ranged.update(PhaseConvert, 10), "qemu-img reading in place is the whole import")
}
