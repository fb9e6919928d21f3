/* tfconfig — the cluster this worker belongs to, from the TF_CONFIG environment
 * variable (the MultiWorkerMirroredStrategy convention): who the peers are, how many
 * there are, and which one this process is. The trainer runs synchronous all-reduce
 * only, so a cluster with parameter servers or an evaluator is refused. */
#ifndef KT_TFCONFIG_H
#define KT_TFCONFIG_H

#include <stddef.h>

#define TFCONFIG_HOST_MAX 256

typedef struct TfPeer {
    char host[TFCONFIG_HOST_MAX]; /* name or address, IPv6 without brackets */
    int port;                     /* 1..65535; 0 only in the single-worker default */
} TfPeer;

typedef struct TfConfig {
    int world;      /* number of workers, >= 1 */
    int rank;       /* this worker, 0 = chief */
    TfPeer *peers;  /* world entries in rank order: the chief (if any) then workers */
} TfConfig;

/* Parses a TF_CONFIG JSON document into *out. `json` NULL or empty means no
 * TF_CONFIG: one worker, rank 0, peer "127.0.0.1" port 0. `index_override` >= 0
 * replaces the task index (the --index flag); -1 keeps TF_CONFIG's.
 * Ranks: the `chief` entry (at most one) is rank 0, then `worker` in list order.
 * Returns 0, or -EINVAL with one line in err naming the field and what was expected
 * (the CLI exits 2). On success the caller frees out with tfconfig_free. */
int tfconfig_parse(const char *json, int index_override, TfConfig *out, char *err, size_t errlen);

/* Splits "host:port", "host: port" or "[v6addr]:port" into host and port.
 * Returns 0 or -EINVAL with the reason in err. */
int tfconfig_parse_address(const char *addr, char *host, size_t hostlen, int *port, char *err,
                           size_t errlen);

/* Frees what tfconfig_parse allocated and zeroes *c; NULL is a no-op. */
void tfconfig_free(TfConfig *c);

#endif
