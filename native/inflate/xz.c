/*
 * Xz mode: an .xz stream, or several concatenated with their padding,
 * from the input ring into the output slots in order, every block's check
 * verified. liblzma decodes straight into the slot the importer reads, as
 * xz -dc decodes into its 8 KiB buffer: on the bench's 2 GiB raw.xz that
 * buffer's writes into a pipe cost 3.0-3.1 CPU-s of system time over
 * xz -dc into /dev/null (9.5-10.2), an import 12.6 CPU-s in all. See
 * main.c.
 */
#include "ring.h"

#include <lzma.h>

static const char *xz_error(lzma_ret ret)
{
	switch (ret) {
	case LZMA_MEMLIMIT_ERROR:
		return "memory usage limit reached: the stream needs more memory than it is allowed";
	case LZMA_MEM_ERROR:
		return "out of memory";
	case LZMA_FORMAT_ERROR:
		return "corrupt data: not in the .xz format";
	case LZMA_OPTIONS_ERROR:
		return "corrupt data: unsupported options";
	case LZMA_DATA_ERROR:
		return "corrupt data";
	case LZMA_BUF_ERROR:
		return "unexpected end of input: the stream is cut short (truncated?)";
	default:
		return "corrupt data: the decoder failed";
	}
}

/*
 * threads 1 is liblzma's single-threaded decoder; more, its multi-threaded
 * one, which starts as many threads as the blocks' sizes let fit in
 * memlimit_threading (a single-block file decodes on one). memlimit is
 * the hard limit either way: a stream that needs more fails.
 */
int run_xz(uint32_t threads, uint64_t memlimit, uint64_t memlimit_threading)
{
	lzma_stream strm = LZMA_STREAM_INIT;
	lzma_ret ret;
	if (threads <= 1) {
		ret = lzma_stream_decoder(&strm, memlimit, LZMA_CONCATENATED);
	} else {
		lzma_mt mt = {
			.flags = LZMA_CONCATENATED,
			.threads = threads,
			.memlimit_threading = memlimit_threading,
			.memlimit_stop = memlimit,
		};
		ret = lzma_stream_decoder_mt(&strm, &mt);
	}
	if (ret != LZMA_OK)
		fail(xz_error(ret));
	lzma_action action = LZMA_RUN;
	uint32_t slot = take_slot(), pos = 0;
	for (;;) {
		if (strm.avail_in == 0 && action == LZMA_RUN) {
			const uint8_t *next;
			uint32_t avail;
			if (next_input(&next, &avail)) {
				strm.next_in = next;
				strm.avail_in = avail;
			} else {
				action = LZMA_FINISH;
			}
		}
		strm.next_out = ring + (size_t)slot * slot_bytes + pos;
		strm.avail_out = slot_bytes - pos;
		ret = lzma_code(&strm, action);
		pos = slot_bytes - (uint32_t)strm.avail_out;
		if (pos == slot_bytes) {
			hand_over(slot, pos, 0);
			slot = take_slot();
			pos = 0;
		}
		if (ret == LZMA_STREAM_END)
			break;
		if (ret != LZMA_OK) {
			/* What was decoded before the fault goes out first, as xz
			 * -dc writes it: the importer then fails where the stream
			 * does (a cut qcow2.xz after its header was read), not
			 * before it has a byte. */
			if (pos > 0)
				hand_over(slot, pos, 0);
			fail(xz_error(ret));
		}
	}
	if (pos > 0)
		hand_over(slot, pos, 0);
	return 0;
}
