/* parse-metrics: the operator's reading of a /metrics answer (progress_parse), for the
 * kubetrain package's tests (test_report.py): the text on stdin, what the operator takes
 * from it on stdout as one JSON object (an absent value left out); exit 1 when it is not
 * a kubetrain endpoint (no kubetrain_steps_total). */
#include "progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static void num(const char *name, double v, int *first)
{
    printf("%s\"%s\": %.17g", *first ? "" : ", ", name, v);
    *first = 0;
}

int main(void)
{
    static char text[256 * 1024];
    size_t n = fread(text, 1, sizeof text - 1, stdin);
    text[n] = '\0';
    ProgressScrape s;
    if (progress_parse(text, &s) != 0) {
        fprintf(stderr, "parse-metrics: no kubetrain_steps_total in %zu bytes\n", n);
        return 1;
    }
    const struct {
        const char *name;
        long v;
    } longs[] = {{"step", s.step},
                 {"total_steps", s.total_steps},
                 {"start_step", s.start_step},
                 {"epoch", s.epoch},
                 {"checkpoint_step", s.checkpoint_step}};
    const struct {
        const char *name;
        double v;
    } doubles[] = {{"loss", s.loss},
                   {"accuracy", s.accuracy},
                   {"samples_per_second", s.samples_per_second},
                   {"checkpoint_time", s.checkpoint_time}};
    int first = 1;
    printf("{");
    for (size_t i = 0; i < sizeof longs / sizeof longs[0]; i++)
        if (longs[i].v >= 0) num(longs[i].name, (double)longs[i].v, &first);
    for (size_t i = 0; i < sizeof doubles / sizeof doubles[0]; i++)
        if (!isnan(doubles[i].v)) num(doubles[i].name, doubles[i].v, &first);
    printf("}\n");
    return 0;
}
