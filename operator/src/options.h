/* options — kubetrain-operator's command line: the flags, their defaults and their
 * checks (docs/design.md, "Leader election, endpoints, logs"). The operator reads no
 * variables of its own; $KUBECONFIG is kcfg_load's. */
#ifndef KT_OPTIONS_H
#define KT_OPTIONS_H

#include "olog.h"
#include "podpolicy.h"

#include <stdio.h>

/* OPERATOR_VERSION, the VERSION file's text, comes from the build (operator/operator.mk). */
#ifndef OPERATOR_VERSION
#error "OPERATOR_VERSION is not defined: build with the Makefile (it passes the VERSION file)"
#endif

/* The strings point into argv or at literals: nothing here is freed. */
typedef struct OperatorOptions {
    const char *kubeconfig;     /* NULL: $KUBECONFIG, ~/.kube/config, in-cluster */
    const char *ns;             /* the one namespace watched; "": all */
    const char *trainer_image;  /* for jobs without spec.image */
    const char *cluster_domain; /* "": peers are <pod>.<job>-worker.<ns>.svc */
    const char *default_queue;  /* "": none; the Kueue LocalQueue of unlabelled jobs */
    const char *metrics_addr;   /* "0": no /metrics listener */
    const char *health_addr;    /* "0": no /healthz, /readyz listener */
    int leader_elect;           /* run only while holding the Lease */
    const char *lease_ns;       /* NULL: --namespace, else the kubeconfig's, else "default" */
    const char *lease_id;       /* NULL: hostname_pid */
    const char *lease_name;     /* a DNS-1123 subdomain */
    double qps;
    int burst;
    int workers;
    int pod_parallelism; /* ControllerConfig.pod_parallelism */
    double backoff_base_s, backoff_max_s, force_delete_after_s;
    double progress_interval_s, progress_qps; /* ProgressConfig (progress.h) */
    PodPolicyLevel template_policy;
    OlogLevel log_level;
    int insecure_skip_tls_verify;
} OperatorOptions;

/* Fills o with the defaults, then argv's flags. Returns 0 to run; 1 when --help or
 * --version was printed on stdout (exit 0); -EINVAL when a flag or argument is wrong,
 * after one line per mistake, naming the flag, and the usage on stderr (exit 2). */
int options_parse(OperatorOptions *o, int argc, char **argv);

/* Writes the flag summary (--help) to f. */
void options_usage(FILE *f);

#endif
