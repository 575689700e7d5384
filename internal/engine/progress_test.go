package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestOverallPercentIsOneMonotonicPercentage(t *testing.T) {
	var o overallPercent
	assert.Equal(t, -1.0, o.update(Info, -1), "nothing known yet")
	assert.Equal(t, 20.0, o.update(TransferScratch, 40), "the scratch copy is the first half")
	assert.Equal(t, 50.0, o.update(TransferScratch, 100))
	assert.Equal(t, 50.0, o.update(Validate, -1))
	assert.Equal(t, 50.0, o.update(Convert, 0), "the conversion starts where the copy ended")
	assert.Equal(t, 75.0, o.update(Convert, 50))
	assert.Equal(t, 75.0, o.update(Convert, 10), "never backwards")
	assert.Equal(t, 99.99, o.update(Resize, -1))
	assert.Equal(t, 99.99, o.update(Commit, -1), "not 100 before the data is durable")
	assert.Equal(t, 100.0, o.update(Complete, -1))
	assert.Equal(t, 100.0, o.update(Error, -1))

	var direct overallPercent
	assert.Equal(t, 33.3, direct.update(TransferDataFile, 33.3), "a stream to the target is the whole import")
	assert.Equal(t, 99.99, direct.update(TransferDataFile, 100), "all bytes read is not durable yet")

	var ranged overallPercent
	assert.Equal(t, -1.0, ranged.update(Validate, -1))
	assert.Equal(t, 10.0, ranged.update(Convert, 10), "qemu-img reading in place is the whole import")
}
