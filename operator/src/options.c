/* options — kubetrain-operator's flags; see options.h. */
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

void options_usage(FILE *f)
{
    fprintf(
        f,
        "usage: kubetrain-operator [options]\n"
        "       kubetrain-operator convert-tfjob [FILE|-]   a Kubeflow TFJob as a TrainingJob\n"
        "                            (convert-tfjob --help)\n"
        "  --kubeconfig FILE         kubeconfig (default: $KUBECONFIG, ~/.kube/config, "
        "in-cluster)\n"
        "  --namespace NS            watch one namespace (default: all)\n"
        "  --trainer-image IMG       image for jobs without spec.image "
        "(kubetrain/trainer:" OPERATOR_VERSION ")\n"
        "  --cluster-domain DOMAIN   append .DOMAIN to peer names in TF_CONFIG (default: none,\n"
        "                            peers are <pod>.<job>-worker.<ns>.svc)\n"
        "  --default-queue NAME      put jobs that name no Kueue queue (label\n"
        "                            kueue.x-k8s.io/queue-name) in LocalQueue NAME of their\n"
        "                            namespace (default: none)\n"
        "  --metrics-addr ADDR       /metrics listener (:8080; \"0\" disables)\n"
        "  --health-addr ADDR        /healthz and /readyz listener (:8081; \"0\" disables)\n"
        "  --leader-elect            run only while holding the Lease\n"
        "  --leader-elect-namespace NS   namespace of the Lease (default: the kubeconfig's or "
        "\"default\")\n"
        "  --leader-elect-id ID      identity in the Lease (default: hostname_pid)\n"
        "  --leader-elect-name NAME  name of the Lease (default: kubetrain-operator); two\n"
        "                            installations in one namespace need different names\n"
        "  --qps N --burst N         API client rate limit (50, 100)\n"
        "  --workers N               reconcile threads (4)\n"
        "  --pod-parallelism N       a job's pod creations, or deletions, sent at once by its\n"
        "                            reconcile thread (8; 1: one after another)\n"
        "  --backoff-base S          delay before the first retry after a worker failure (10)\n"
        "  --backoff-max S           cap of that exponential delay (360)\n"
        "  --force-delete-after S    force-delete a pod still terminating S seconds after its\n"
        "                            grace period ended (its node is gone); 0: never (60)\n"
        "  --progress-interval S     scrape each running job's chief /metrics for\n"
        "                            status.progress at most every S seconds; 0: never (10)\n"
        "  --progress-qps N          status writes per second for progress, all jobs together;\n"
        "                            the interval grows to running jobs / N (10)\n"
        "  --template-policy P       baseline: refuse a job whose spec.template asks what Pod\n"
        "                            Security's baseline level refuses (privileged, host\n"
        "                            namespaces, hostPath, ...) or a service account other\n"
        "                            than default; none: pass templates through (baseline)\n"
        "  --log-level LEVEL         debug | info | warn | error (info)\n"
        "  --insecure-skip-tls-verify  do not verify the API server's certificate (never in\n"
        "                            production; logged as a warning at start and every minute)\n"
        "  --version, --help\n");
}

static void defaults(OperatorOptions *o)
{
    memset(o, 0, sizeof *o);
    o->ns = "";
    o->trainer_image = "kubetrain/trainer:" OPERATOR_VERSION;
    o->cluster_domain = "";
    o->default_queue = "";
    o->metrics_addr = ":8080";
    o->health_addr = ":8081";
    o->lease_name = "kubetrain-operator";
    o->qps = 50;
    o->burst = 100;
    o->workers = 4;
    o->pod_parallelism = 8;
    o->backoff_base_s = 10;
    o->backoff_max_s = 360;
    o->force_delete_after_s = 60;
    o->progress_interval_s = 10;
    o->progress_qps = 10;
    /* Safe unless told otherwise: whoever may create TrainingJobs gets pods made for them
     * without being allowed to create pods; "none" is the cluster admin's decision. */
    o->template_policy = PODPOLICY_BASELINE;
    o->log_level = OLOG_INFO;
}

/* Parses s as a number in [lo, hi] into *out; else prints a line naming the flag and
 * returns -1 (and *out keeps its value). */
static int parse_num(const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "kubetrain-operator: %s: expected a number in [%g, %g], got \"%s\"\n", flag,
                lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* parse_num for the flags kept as int; the fraction is dropped. */
static int parse_int(const char *flag, const char *s, double lo, double hi, int *out)
{
    double v;
    if (parse_num(flag, s, lo, hi, &v) != 0) return -1;
    *out = (int)v;
    return 0;
}

/* A DNS-1123 subdomain, which object names such as a Lease's must be. */
static int dns_subdomain(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-' ||
              s[i] == '.'))
            return 0;
    return 1;
}

int options_parse(OperatorOptions *o, int argc, char **argv)
{
    enum {
        O_KCFG = 256,
        O_NS,
        O_IMAGE,
        O_DOMAIN,
        O_QUEUE,
        O_MADDR,
        O_HADDR,
        O_LE,
        O_LENS,
        O_LEID,
        O_LENAME,
        O_QPS,
        O_BURST,
        O_WORKERS,
        O_PODPAR,
        O_BBASE,
        O_BMAX,
        O_FORCE,
        O_PINTERVAL,
        O_PQPS,
        O_TPOLICY,
        O_LEVEL,
        O_INSECURE,
        O_VERSION,
        O_HELP
    };
    static const struct option opts[] = {
        {"kubeconfig", required_argument, 0, O_KCFG},
        {"namespace", required_argument, 0, O_NS},
        {"trainer-image", required_argument, 0, O_IMAGE},
        {"cluster-domain", required_argument, 0, O_DOMAIN},
        {"default-queue", required_argument, 0, O_QUEUE},
        {"metrics-addr", required_argument, 0, O_MADDR},
        {"health-addr", required_argument, 0, O_HADDR},
        {"leader-elect", no_argument, 0, O_LE},
        {"leader-elect-namespace", required_argument, 0, O_LENS},
        {"leader-elect-id", required_argument, 0, O_LEID},
        {"leader-elect-name", required_argument, 0, O_LENAME},
        {"qps", required_argument, 0, O_QPS},
        {"burst", required_argument, 0, O_BURST},
        {"workers", required_argument, 0, O_WORKERS},
        {"pod-parallelism", required_argument, 0, O_PODPAR},
        {"backoff-base", required_argument, 0, O_BBASE},
        {"backoff-max", required_argument, 0, O_BMAX},
        {"force-delete-after", required_argument, 0, O_FORCE},
        {"progress-interval", required_argument, 0, O_PINTERVAL},
        {"progress-qps", required_argument, 0, O_PQPS},
        {"template-policy", required_argument, 0, O_TPOLICY},
        {"log-level", required_argument, 0, O_LEVEL},
        {"insecure-skip-tls-verify", no_argument, 0, O_INSECURE},
        {"version", no_argument, 0, O_VERSION},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };
    /* Every wrong flag is reported, not only the first; the level is checked last. */
    const char *level = "info";
    int c, bad = 0;
    defaults(o);
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_KCFG:
            o->kubeconfig = optarg;
            break;
        case O_NS:
            o->ns = optarg;
            break;
        case O_IMAGE:
            o->trainer_image = optarg;
            break;
        case O_DOMAIN:
            o->cluster_domain = optarg;
            break;
        case O_QUEUE:
            o->default_queue = optarg;
            /* A label value naming a LocalQueue: both limits at once. */
            if (!dns_subdomain(optarg) || strlen(optarg) > 63) {
                fprintf(stderr,
                        "kubetrain-operator: --default-queue: \"%s\" is not a LocalQueue name "
                        "usable as a label value (lowercase letters, digits, '-' and '.', at "
                        "most 63 characters, starting and ending with a letter or digit)\n",
                        optarg);
                bad = 1;
            }
            break;
        case O_MADDR:
            o->metrics_addr = optarg;
            break;
        case O_HADDR:
            o->health_addr = optarg;
            break;
        case O_LE:
            o->leader_elect = 1;
            break;
        case O_INSECURE:
            o->insecure_skip_tls_verify = 1;
            break;
        case O_LENS:
            o->lease_ns = optarg;
            break;
        case O_LEID:
            o->lease_id = optarg;
            break;
        case O_LENAME:
            o->lease_name = optarg;
            if (!dns_subdomain(optarg)) {
                fprintf(stderr,
                        "kubetrain-operator: --leader-elect-name: \"%s\" is not a valid Lease "
                        "name (lowercase letters, digits, '-' and '.', at most 253 characters, "
                        "starting and ending with a letter or digit)\n",
                        optarg);
                bad = 1;
            }
            break;
        case O_QPS:
            bad |= parse_num("--qps", optarg, 0, 100000, &o->qps);
            break;
        case O_BURST:
            bad |= parse_int("--burst", optarg, 1, 100000, &o->burst);
            break;
        case O_WORKERS:
            bad |= parse_int("--workers", optarg, 1, 64, &o->workers);
            break;
        case O_PODPAR:
            bad |= parse_int("--pod-parallelism", optarg, 1, 64, &o->pod_parallelism);
            break;
        case O_BBASE:
            bad |= parse_num("--backoff-base", optarg, 0, 86400, &o->backoff_base_s);
            break;
        case O_PINTERVAL:
            bad |= parse_num("--progress-interval", optarg, 0, 86400, &o->progress_interval_s);
            break;
        case O_PQPS:
            bad |= parse_num("--progress-qps", optarg, 0.01, 100000, &o->progress_qps);
            break;
        case O_BMAX:
            bad |= parse_num("--backoff-max", optarg, 0, 86400, &o->backoff_max_s);
            break;
        case O_FORCE:
            bad |= parse_num("--force-delete-after", optarg, 0, 86400, &o->force_delete_after_s);
            break;
        case O_TPOLICY:
            if (podpolicy_parse_level(optarg, &o->template_policy) != 0) {
                fprintf(stderr,
                        "kubetrain-operator: --template-policy: expected baseline|none, got "
                        "\"%s\"\n",
                        optarg);
                bad = 1;
            }
            break;
        case O_LEVEL:
            level = optarg;
            break;
        case O_VERSION:
            printf("kubetrain-operator %s\n", OPERATOR_VERSION);
            return 1;
        case O_HELP:
            options_usage(stdout);
            return 1;
        default:
            bad = 1;
        }
    }
    if (olog_parse_level(level, &o->log_level) != 0) {
        fprintf(stderr,
                "kubetrain-operator: --log-level: expected debug|info|warn|error, got \"%s\"\n",
                level);
        bad = 1;
    }
    if (bad || optind != argc) {
        if (optind != argc)
            fprintf(stderr, "kubetrain-operator: unexpected argument \"%s\"\n", argv[optind]);
        options_usage(stderr);
        return -EINVAL;
    }
    return 0;
}
