/* tbevents — TensorBoard event files written by the chief (as MWMS's chief writes its
 * summaries): scalars in the standard format that TensorBoard and tf.data read.
 *
 * A file is a sequence of TFRecords, each
 *     uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
 * (little-endian), whose data is one serialized tensorflow.Event protobuf. Only the
 * fields needed are encoded:
 *     Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *               Summary summary = 5; }
 *     Summary { repeated Value value = 1; }
 *     Value   { string tag = 1; float simple_value = 2; }
 * The first record carries file_version "brain.Event:2", as TensorFlow writes it.
 *
 * Each writer creates a new file, events.out.tfevents.<secs>.<host>.<pid>.v2, created
 * exclusively, so a resumed run adds a file beside the old ones and never rewrites
 * them; TensorBoard reads every event file of a directory in order. */
#ifndef KT_TBEVENTS_H
#define KT_TBEVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct TbWriter TbWriter;

typedef struct {
    const char *tag;  /* e.g. "step/loss"; TensorBoard groups charts by the part before '/' */
    double value;     /* stored as a float, as simple_value is */
} TbScalar;

/* Creates dir (and its parents) when missing and a new event file in it, then writes
 * the file_version record. Returns 0 or a negative errno with one line in err naming
 * the directory or file. Free with tbev_close. */
int tbev_open(TbWriter **out, const char *dir, char *err, size_t errlen);

/* The path of the event file (owned by w). */
const char *tbev_path(const TbWriter *w);

/* Appends one Event at `step` whose summary holds the n scalars. Buffered: a write
 * error is kept and reported by the next tbev_flush or tbev_close. */
void tbev_scalars(TbWriter *w, int64_t step, const TbScalar *v, size_t n);

/* Writes the buffered events to the file. Returns 0 or a negative errno with err
 * naming the file (also for an error of an earlier tbev_scalars). */
int tbev_flush(TbWriter *w, char *err, size_t errlen);

/* Flushes and closes the file and frees w; NULL is a no-op returning 0. Returns 0 or
 * a negative errno with err naming the file; w is freed either way. */
int tbev_close(TbWriter *w, char *err, size_t errlen);

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of buf[0..n), continued from
 * crc (0 to start): tbev_crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t tbev_crc32c(uint32_t crc, const void *buf, size_t n);

/* The TFRecord mask of a CRC-32C: rotate right by 15, add 0xA282EAD8. */
uint32_t tbev_mask_crc(uint32_t crc);

/* Frames data[0..n) as one TFRecord into out, which must hold n + 16 bytes; returns
 * the bytes written (n + 16). */
size_t tbev_frame_record(uint8_t *out, const void *data, size_t n);

#endif
