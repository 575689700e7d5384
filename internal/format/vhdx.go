package format

// parseVHDXHeader only checks the file identifier: the virtual size sits in
// the metadata region, which lies beyond the first 64 KiB.
func parseVHDXHeader(head []byte) (Header, error) {
	if err := needHead(VHDX, head, 8, "file identifier"); err != nil {
		return Header{}, err
	}
	if string(head[:8]) != string(magicVHDX) {
		return Header{}, invalidf(VHDX, "bad file identifier")
	}
	return Header{Format: VHDX, VirtualSize: -1}, nil
}
