/* jsonpack — fixed fragments of cached JSON as single bytes; see jsonpack.h. */
#include "jsonpack.h"

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

char *jsonpack_encode(const char *json)
{
    size_t lens[NFRAG];
    for (size_t k = 0; k < NFRAG; k++)
        lens[k] = strlen(FRAGMENTS[k]);
    size_t n = strlen(json);
    /* Packing never lengthens: the work buffer is the text's size, and the result is
     * copied out at its own size (shrinking a block in place would leave its tail as a
     * free fragment between cache entries). */
    char *tmp = malloc(n + 1), *out = NULL;
    if (!tmp) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)json[i];
        if (c < 0x20) goto done;
        size_t best = NFRAG;
        for (size_t k = 0; k < NFRAG; k++)
            if (FRAGMENTS[k][0] == json[i] && (best == NFRAG || lens[k] > lens[best]) &&
                lens[k] <= n - i && memcmp(json + i, FRAGMENTS[k], lens[k]) == 0)
                best = k;
        if (best == NFRAG) {
            tmp[o++] = json[i++];
        } else {
            tmp[o++] = (char)(best + 1);
            i += lens[best];
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
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)packed; *p; p++)
        n += *p <= NFRAG ? strlen(FRAGMENTS[*p - 1]) : 1;
    char *out = malloc(n + 1), *o = out;
    if (!out) return NULL;
    for (const unsigned char *p = (const unsigned char *)packed; *p; p++) {
        if (*p <= NFRAG) {
            size_t k = strlen(FRAGMENTS[*p - 1]);
            memcpy(o, FRAGMENTS[*p - 1], k);
            o += k;
        } else {
            *o++ = (char)*p;
        }
    }
    *o = 0;
    *len = n;
    return out;
}
