/* jsonpack — fixed fragments of cached JSON as single bytes; see jsonpack.h. */
#include "jsonpack.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Byte i + 1 stands for FRAGMENTS[i]. Chosen from the operator's objects as cached
 * (prune_pod, prune_owned, a TrainingJob with its status): member names with the
 * punctuation around them, the owner reference every pod and Service carries, the
 * values every pod repeats. Changing the table changes only what new entries take: a
 * cache lives no longer than its process. */
static const char *const FRAGMENTS[] = {
    "{\"metadata\":{\"name\":\"",
    "\",\"namespace\":\"",
    "\"ownerReferences\":[{\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
    "\"name\":\"",
    "\",\"controller\":true,\"blockOwnerDeletion\":true}]",
    "\"annotations\":{",
    "\"kubetrain.dev/",
    "\"uid\":\"",
    "\"creationTimestamp\":\"",
    "\"resourceVersion\":\"",
    "\"},\"spec\":{\"nodeName\":\"",
    "\"status\":{\"phase\":\"",
    "\"conditions\":[{\"type\":\"",
    "\",\"status\":\"True\"",
    "\"},{\"type\":\"",
    "\"podIP\":\"",
    "\"containerStatuses\":[{\"name\":\"trainer\",\"state\":{\"",
    "running\":{\"startedAt\":\"",
    "terminated\":{\"",
    "\"lastTransitionTime\":\"",
    "\",\"reason\":\"",
    "\",\"message\":\"",
    "\"generation\":",
    "-worker-",
    "ContainersReady",
    "PodScheduled",
    "Initialized",
    "{\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{"
    "\"name\":\"",
    "\"workers\":",
    "attempt\":\"",
    "\"observedGeneration\":",
    "\",\"status\":\"False\"",
};
#define NFRAG (sizeof FRAGMENTS / sizeof *FRAGMENTS)
_Static_assert(NFRAG <= 31, "one byte from 0x01 to 0x1f per fragment");

/* Where to look for a fragment at a byte: the fragments that begin with byte b are
 * BY_FIRST[FIRST_AT[b] .. FIRST_AT[b + 1]), longest first, so the first that matches is
 * the longest; PAIRS has bit (b0 << 8 | b1) set when some fragment begins with b0 b1. A
 * byte that begins no fragment costs a load, and a quote (which begins most of them)
 * followed by a letter no fragment follows it with costs two (checking every fragment at
 * every quote was a fifth of the operator's CPU under a status write per job and 10 s).
 * Every fragment is at least two bytes long. */
static unsigned char BY_FIRST[NFRAG], FIRST_AT[257], LENS[NFRAG];
static unsigned char PAIRS[65536 / 8];
static pthread_once_t INDEX_ONCE = PTHREAD_ONCE_INIT;

static void build_index(void)
{
    size_t count[256] = {0};
    for (size_t k = 0; k < NFRAG; k++) {
        const unsigned char *f = (const unsigned char *)FRAGMENTS[k];
        LENS[k] = (unsigned char)strlen(FRAGMENTS[k]);
        count[f[0]]++;
        unsigned pair = (unsigned)f[0] << 8 | f[1];
        PAIRS[pair >> 3] |= (unsigned char)(1u << (pair & 7));
    }
    FIRST_AT[0] = 0;
    for (size_t b = 0; b < 256; b++)
        FIRST_AT[b + 1] = (unsigned char)(FIRST_AT[b] + count[b]);
    size_t fill[256];
    for (size_t b = 0; b < 256; b++)
        fill[b] = FIRST_AT[b];
    for (size_t k = 0; k < NFRAG; k++) {
        unsigned char b = (unsigned char)FRAGMENTS[k][0];
        /* Insertion by length, longest first. */
        size_t at = fill[b]++;
        while (at > FIRST_AT[b] && LENS[BY_FIRST[at - 1]] < LENS[k]) {
            BY_FIRST[at] = BY_FIRST[at - 1];
            at--;
        }
        BY_FIRST[at] = (unsigned char)k;
    }
}

char *jsonpack_encode(const char *json)
{
    pthread_once(&INDEX_ONCE, build_index);
    size_t n = strlen(json);
    /* Packing never lengthens: the work buffer is the text's size, and the result is
     * copied out at its own size (shrinking a block in place would leave its tail as a
     * free fragment between cache entries). */
    char *tmp = malloc(n + 1), *out = NULL;
    if (!tmp) return NULL;
    const unsigned char *in = (const unsigned char *)json;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = in[i];
        if (c < 0x20) goto done;
        size_t best = NFRAG;
        unsigned pair = (unsigned)c << 8 | in[i + 1]; /* in[n] is the NUL */
        if (PAIRS[pair >> 3] & (1u << (pair & 7))) {
            for (size_t j = FIRST_AT[c]; j < FIRST_AT[c + 1]; j++) {
                size_t k = BY_FIRST[j];
                if (FRAGMENTS[k][1] == json[i + 1] && LENS[k] <= n - i &&
                    memcmp(json + i, FRAGMENTS[k], LENS[k]) == 0) {
                    best = k;
                    break;
                }
            }
        }
        if (best == NFRAG) {
            tmp[o++] = (char)c;
            i++;
        } else {
            tmp[o++] = (char)(best + 1);
            i += LENS[best];
        }
    }
    tmp[o] = 0;
    out = malloc(o + 1);
    if (out) memcpy(out, tmp, o + 1);
done:
    free(tmp);
    return out;
}

char *jsonpack_decode(const char *packed, size_t *len)
{
    pthread_once(&INDEX_ONCE, build_index);
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)packed; *p; p++)
        n += *p <= NFRAG ? LENS[*p - 1] : 1;
    char *out = malloc(n + 1), *o = out;
    if (!out) return NULL;
    for (const unsigned char *p = (const unsigned char *)packed; *p; p++) {
        if (*p <= NFRAG) {
            memcpy(o, FRAGMENTS[*p - 1], LENS[*p - 1]);
            o += LENS[*p - 1];
        } else {
            *o++ = (char)*p;
        }
    }
    *o = 0;
    *len = n;
    return out;
}
