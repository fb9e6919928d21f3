/* olog — the operator's JSON log lines on stderr, one object per line:
 *   {"ts":"2026-11-21T23:40:00.123Z","level":"info","job":"default/mnist","msg":"..."}
 * Thread-safe (one write(2) per line). */
#ifndef KT_OLOG_H
#define KT_OLOG_H

typedef enum { OLOG_DEBUG, OLOG_INFO, OLOG_WARN, OLOG_ERROR } OlogLevel;

/* Sets the lowest level printed; the default is OLOG_INFO. */
void olog_set_level(OlogLevel level);

/* Parses "debug" | "info" | "warn" | "error"; returns 0 or -EINVAL. */
int olog_parse_level(const char *s, OlogLevel *out);

/* Logs one line; `key` ("namespace/name" of the job) may be NULL. */
void olog(OlogLevel level, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
