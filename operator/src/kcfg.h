/* kcfg — where and how to reach the API server: kubeconfig files (current context,
 * its cluster and user: certificate authority, client certificate and key as files
 * or inline data, bearer token or token file, exec credential plugins) and the
 * in-cluster service account. TLS verification is on unless the caller sets
 * insecure_skip_tls_verify itself: a kubeconfig's insecure-skip-tls-verify is only
 * recorded (insecure_requested), and kubetrain-operator refuses to start on it without
 * its explicit --insecure-skip-tls-verify flag. */
#ifndef KT_KCFG_H
#define KT_KCFG_H

#include <stddef.h>

typedef struct KubeConfig {
    char *server;    /* "https://host:port" (http:// only for loopback test servers) */
    char *namespace; /* the context's namespace or the service account's; may be NULL */
    char *ca_file;   /* PEM files, or ... */
    char *cert_file;
    char *key_file;
    unsigned char *ca_data, *cert_data, *key_data; /* ... decoded inline PEM */
    size_t ca_len, cert_len, key_len;
    char *token;        /* static bearer token */
    char *token_file;   /* re-read when it changes (service-account tokens rotate) */
    char *exec_command; /* client.authentication.k8s.io exec plugin */
    char **exec_args;   /* NULL-terminated */
    char **exec_env;    /* NULL-terminated "NAME=VALUE" */
    char *exec_api_version;
    char source[512];             /* the file or "in-cluster", for messages */
    int insecure_requested;       /* the cluster entry sets insecure-skip-tls-verify */
    int insecure_skip_tls_verify; /* set by the caller only: TLS is not verified */
} KubeConfig;

/* Loads the configuration from the first of: `path` (when non-NULL), $KUBECONFIG
 * (its existing files merged as kubectl merges them: the first current-context, and
 * the first cluster, context or user of each name), ~/.kube/config, the in-cluster
 * service account. Returns 0 and *out (free with kcfg_free), or a negative errno with
 * one line in err. */
int kcfg_load(const char *path, KubeConfig **out, char *err, size_t errlen);

/* Parses kubeconfig YAML. Relative file names are resolved against base_dir. `source`
 * names the text in messages. Same return contract as kcfg_load. */
int kcfg_parse(const char *text, size_t len, const char *base_dir, const char *source,
               KubeConfig **out, char *err, size_t errlen);

/* The in-cluster configuration: $KUBERNETES_SERVICE_HOST/PORT, and token, ca.crt and
 * namespace from sa_dir (NULL: /var/run/secrets/kubernetes.io/serviceaccount). */
int kcfg_in_cluster(const char *sa_dir, KubeConfig **out, char *err, size_t errlen);

/* Frees c; NULL is a no-op. */
void kcfg_free(KubeConfig *c);

/* Frees what c owns but not c itself: for a KubeConfig embedded in another object,
 * which is not to be used afterwards. NULL is a no-op. */
void kcfg_clear(KubeConfig *c);

/* Reads a whole file into a NUL-terminated malloc'd buffer (*len excludes the NUL).
 * Returns 0 or a negative errno. The caller frees *out. */
int kcfg_read_file(const char *path, char **out, size_t *len);

#endif
