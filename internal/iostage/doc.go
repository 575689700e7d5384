// Package iostage holds the small io.Reader stages the engine chains between
// a source and a target: counting for progress, checksum verification over
// the bytes as received, holding back a stream's tail (a fixed VHD's
// footer must never reach the disk), reading ahead of a stream; and the
// io.ReaderAt stages over a ranged object: counting its range reads
// (RangeCounter) and serving small reads from prefetched windows
// (WindowReaderAt); and IsZero, the one zero detector every stage and
// writer uses. Each stage lives in its own file and does one job; none
// copies the data it passes on except where its job needs it.
package iostage
