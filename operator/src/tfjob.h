/* tfjob — Kubeflow's TFJob (kubeflow.org/v1) turned into a TrainingJob, for users
 * moving from the training operator: `kubetrain-operator convert-tfjob [FILE|-]`. The
 * mapping is the table in docs/tensorflow.md ("Coming from TFJob"):
 *
 *   tfReplicaSpecs Worker        spec.workers, spec.image/command/args, spec.template
 *   tfReplicaSpecs Chief|Master  spec.chief     (a Chief alone: spec.workers 1)
 *   tfReplicaSpecs PS            spec.ps        (needs a Chief, as in the TrainingJob)
 *   tfReplicaSpecs Evaluator     spec.evaluator
 *   container tensorflow         container trainer; its image/command/args the role's
 *   port tfjob-port              spec.port
 *   replica restartPolicy        spec.restartPolicy (one for the group)
 *   runPolicy.*                  spec.cleanPodPolicy, ttlSecondsAfterFinished,
 *                                activeDeadlineSeconds, backoffLimit, suspend
 *   successPolicy AllWorkers     spec.successPolicy AllWorkers
 *
 * A role's image, command, args and template are written only where they differ from
 * the workers'. What has no TrainingJob counterpart (schedulingPolicy, dynamic workers,
 * per-replica restart policies) is reported as a warning naming the TFJob field and what
 * to do instead. The result is checked with jobspec_parse, so what it writes is what the
 * operator runs. Pure functions except tfjob_main. */
#ifndef KT_TFJOB_H
#define KT_TFJOB_H

#include <cjson/cJSON.h>
#include <stddef.h>

#define TFJOB_API_VERSION "kubeflow.org/v1"
#define TFJOB_KIND "TFJob"
#define TFJOB_CONTAINER "tensorflow" /* the container the training operator runs */
#define TFJOB_PORT_NAME "tfjob-port"

/* Converts one TFJob object into a new TrainingJob in *out (the caller frees it with
 * cJSON_Delete). What cannot be carried over is appended to `warnings` (a cJSON array)
 * as one string each, "<TFJob field>: <what happens instead and what to do>". Returns 0;
 * -EINVAL with "<field>: problem" in err when tfjob is not a kubeflow.org/v1 TFJob or
 * cannot be run as a TrainingJob (*out NULL); -ENOMEM. */
int tfjob_convert(const cJSON *tfjob, cJSON **out, cJSON *warnings, char *err, size_t errlen);

/* convert-tfjob over a stream: `text` (len bytes), read from `source` (a file name, or
 * "-" for the standard input), one TFJob per YAML document. Returns 0 with *yaml (each
 * TrainingJob as a YAML document after a comment naming its TFJob, `---` between them;
 * the caller frees it) and each warning appended to `warnings` as "<source>: document
 * <n> (<name>): <warning>"; or -EINVAL with "<source>: document <n> (...): <field>:
 * problem" in err and *yaml NULL (any bad document: nothing is written); -ENOMEM. */
int tfjob_convert_stream(const char *text, size_t len, const char *source, char **yaml,
                         cJSON *warnings, char *err, size_t errlen);

/* `kubetrain-operator convert-tfjob [FILE|-]`, argv[0] being "convert-tfjob": reads FILE
 * (the standard input for "-" or none), writes the TrainingJobs to stdout and one line per
 * warning to stderr. Returns the exit status: 0 (warnings allowed), 2 for bad input or
 * usage (the message names the file, document and field), 1 out of memory or when
 * stdout cannot be written. */
int tfjob_main(int argc, char **argv);

#endif
