/* olog — JSON log lines. cJSON does the escaping so any message is a valid line. */
#include "olog.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile int g_level = OLOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void olog_set_level(OlogLevel level)
{
    g_level = (int)level;
}

int olog_parse_level(const char *s, OlogLevel *out)
{
    for (int i = 0; i < 4; i++) {
        if (s && strcmp(s, level_names[i]) == 0) {
            *out = (OlogLevel)i;
            return 0;
        }
    }
    return -EINVAL;
}

void olog(OlogLevel level, const char *key, const char *fmt, ...)
{
    if ((int)level < g_level) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char tbuf[40];
    size_t tn = strftime(tbuf, sizeof tbuf, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(tbuf + tn, sizeof tbuf - tn, ".%03ldZ", ts.tv_nsec / 1000000);

    cJSON *o = cJSON_CreateObject();
    char *line = NULL;
    if (o && cJSON_AddStringToObject(o, "ts", tbuf) &&
        cJSON_AddStringToObject(o, "level", level_names[level]) &&
        (!key || cJSON_AddStringToObject(o, "job", key)) && cJSON_AddStringToObject(o, "msg", msg))
        line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!line) {
        fprintf(stderr, "{\"level\":\"error\",\"msg\":\"out of memory while logging\"}\n");
        return;
    }
    size_t n = strlen(line);
    line[n] = '\n';
    /* One write per line so that lines of concurrent threads never interleave. */
    ssize_t w = write(STDERR_FILENO, line, n + 1);
    (void)w;
    free(line);
}
