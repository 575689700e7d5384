/*
 * diskimport-inflate: the importer's decoder child. It decodes into a ring
 * of slots in shared memory, so the decoded bytes reach the importer
 * without a pipe: the decoder writes each byte once, where the importer
 * reads it. ISA-L's inflate for gzip and deflate, liblzma for xz.
 *
 * Its first argument is the ring protocol the importer speaks (2, these
 * records); it refuses any other, so builds of two versions never misread
 * each other. Then the mode:
 *
 *   diskimport-inflate 2 gzip SLOT_BYTES SLOTS [IN_SLOT_BYTES IN_SLOTS]
 *     decodes a gzip stream (one or more members, each member's CRC32 and
 *     ISIZE checked) from standard input into the slots, in order. Bytes
 *     after the last member that do not start another one are ignored,
 *     as igzip ignores them. With IN_SLOT_BYTES and IN_SLOTS the stream
 *     comes through an input ring instead, so no pipe copies it either:
 *     standard input carries records, native order, uint32 slot, uint32
 *     length (1 to IN_SLOT_BYTES), each naming the next bytes of the
 *     stream in that slot of fd 5; the end of standard input ends the
 *     stream. Each slot decoded is handed back on fd 6 (uint32 slot).
 *   diskimport-inflate 2 xz SLOT_BYTES SLOTS IN_SLOT_BYTES IN_SLOTS THREADS MEMLIMIT MEMLIMIT_MT
 *     decodes an .xz stream (or several, concatenated, with their padding;
 *     every block's check verified, as xz -dc does) from the input ring,
 *     as the gzip mode reads it, into the slots in order. THREADS 1
 *     decodes on this thread; more lets liblzma decode blocks on up to
 *     that many threads within MEMLIMIT_MT bytes. A stream that needs
 *     more than MEMLIMIT bytes fails ("memory usage limit").
 *   diskimport-inflate 2 zlib|deflate SLOT_BYTES SLOTS IN_SLOT_BYTES IN_SLOTS
 *     inflates independent blocks (a vmdk grain: one zlib stream; a qcow2
 *     compressed cluster: raw deflate), each into a slot of its own. Each
 *     block lies in a slot of the input ring (fd 5), named by a record on
 *     standard input, native order: uint32 input slot, uint32 input length
 *     (at most IN_SLOT_BYTES), uint32 output length (1 to SLOT_BYTES). A
 *     block's input slot is the importer's again once the block's result
 *     record is written: nothing is handed back on fd 6. A zlib block must
 *     be one complete stream (no preset dictionary) of at most its output
 *     length, its Adler-32 right; a deflate block gives the first
 *     output-length bytes of its stream, or fewer, whatever follows.
 *
 * fd 3: the ring, a shared memory file of SLOTS * SLOT_BYTES bytes.
 * fd 1: result records to the importer, 16 bytes each, native order:
 *       uint32 slot, uint32 length (a slot holds length decoded bytes),
 *       uint64 zeros: bit i set when the slot's 64 KiB at i * 64 KiB are
 *       all zeros (the gzip mode names the whole granules it found so;
 *       the others name none); in the block modes, a block that cannot be
 *       inflated is uint32 0xffffffff, uint32 a reason (BAD_* in blocks.c)
 *       and takes no slot.
 * fd 4: "free" records from the importer, 4 bytes each: uint32 slot, a
 *       slot the importer is done with. Every slot starts free.
 * fd 5: with an input ring, the ring, IN_SLOTS * IN_SLOT_BYTES bytes,
 *       mapped read-only (the importer seals it against writers).
 * fd 6: in the gzip and xz modes with an input ring, the input slots
 *       handed back.
 * It exits 0 once the input ended (in the stream modes after a complete
 * member or stream) and every result was handed over; on bad input or a
 * record out of bounds it names the cause on fd 2 and exits 1.
 *
 * It opens nothing: the importer runs it in its sandbox, as it runs igzip.
 */
#include "ring.h"

#include <stdlib.h>
#include <string.h>

static uint32_t arg_u32(const char *s)
{
	return (uint32_t)strtoul(s, NULL, 10);
}

/* RING_PROTOCOL is the first argument: the importer's ring protocol.
 * 2: result records of 16 bytes, naming granules of zeros. */
#define RING_PROTOCOL "2"

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], RING_PROTOCOL) != 0)
		fail("ring protocol " RING_PROTOCOL " is this build's; the importer asked for another: "
		     "install the diskimport-inflate built with the importer");
	argc--;
	argv++;
	const char *mode = argc >= 2 ? argv[1] : "";
	int blocks = strcmp(mode, "zlib") == 0 || strcmp(mode, "deflate") == 0;
	int gzip = strcmp(mode, "gzip") == 0, xz = strcmp(mode, "xz") == 0;
	if (!((gzip && (argc == 4 || argc == 6)) || (blocks && argc == 6) || (xz && argc == 9)))
		fail("usage: diskimport-inflate " RING_PROTOCOL " gzip SLOT_BYTES SLOTS [IN_SLOT_BYTES IN_SLOTS], "
		     "xz SLOT_BYTES SLOTS IN_SLOT_BYTES IN_SLOTS THREADS MEMLIMIT MEMLIMIT_MT, "
		     "or zlib|deflate SLOT_BYTES SLOTS IN_SLOT_BYTES IN_SLOTS");
	ring_setup(arg_u32(argv[2]), arg_u32(argv[3]), argc > 4 ? arg_u32(argv[4]) : 0, argc > 5 ? arg_u32(argv[5]) : 0);
	if (blocks)
		return run_blocks(mode[0] == 'z');
	if (xz) {
		uint32_t threads = arg_u32(argv[6]);
		if (threads < 1 || threads > 1024)
			fail("thread count out of range");
		return run_xz(threads, strtoull(argv[7], NULL, 10), strtoull(argv[8], NULL, 10));
	}
	return run_gzip();
}
