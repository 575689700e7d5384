package datasource

import (
	"errors"
	"io"
)

// noShortRead keeps err's text but not io.ErrUnexpectedEOF as its cause:
// readers up the pipeline (io.ReadFull users, the decoders) take that value
// for a normal short end of the image, and a broken transfer or a damaged
// layer is not one. Any other cause stays matchable with errors.Is/As.
func noShortRead(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New(err.Error())
	}
	return err
}
