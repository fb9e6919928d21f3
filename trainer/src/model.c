#include "model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "gemm.h"
#include "keras_import.h"
#include "keras_json.h"
#include "loss.h"
#include "pool.h"
#include "util.h"

/* ----------------------------------------------------------------------------
 * The built-in models of the MWMS tutorials (docs/design.md, "Models and data") */

const char *const model_builtin_names[] = {"tutorial-cnn", "tutorial-cnn-l2", "cnn2", "mlp", NULL};

/* Bounds on what a spec may ask for, so that every size below fits in an int and the
 * arenas in memory: values per example of any layer, weights of one layer, parameters
 * in all (2^28 floats = 1 GiB). */
#define MODEL_MAX_FLOATS ((size_t)1 << 28)

static const char *const builtin_specs[] = {
    "{\"input_shape\":[28,28],\"layers\":["
    "{\"type\":\"Reshape\",\"target_shape\":[28,28,1]},"
    "{\"type\":\"Conv2D\",\"filters\":32,\"kernel_size\":3,\"activation\":\"relu\"},"
    "{\"type\":\"Flatten\"},"
    "{\"type\":\"Dense\",\"units\":128,\"activation\":\"relu\"},"
    "{\"type\":\"Dense\",\"units\":10}]}",

    "{\"input_shape\":[28,28],\"layers\":["
    "{\"type\":\"Reshape\",\"target_shape\":[28,28,1]},"
    "{\"type\":\"Conv2D\",\"filters\":32,\"kernel_size\":3,\"activation\":\"relu\","
    "\"kernel_regularizer\":{\"l2\":1e-5}},"
    "{\"type\":\"Flatten\"},"
    "{\"type\":\"Dense\",\"units\":128,\"activation\":\"relu\","
    "\"kernel_regularizer\":{\"l2\":1e-5}},"
    "{\"type\":\"Dense\",\"units\":10,\"kernel_regularizer\":{\"l2\":1e-5}}]}",

    "{\"input_shape\":[28,28,1],\"layers\":["
    "{\"type\":\"Conv2D\",\"filters\":32,\"kernel_size\":3,\"activation\":\"relu\"},"
    "{\"type\":\"Conv2D\",\"filters\":64,\"kernel_size\":3,\"activation\":\"relu\"},"
    "{\"type\":\"MaxPooling2D\",\"pool_size\":2},"
    "{\"type\":\"Flatten\"},"
    "{\"type\":\"Dense\",\"units\":64,\"activation\":\"relu\"},"
    "{\"type\":\"Dense\",\"units\":10,\"activation\":\"softmax\"}]}",

    "{\"input_shape\":[28,28],\"layers\":["
    "{\"type\":\"Flatten\"},"
    "{\"type\":\"Dense\",\"units\":128,\"activation\":\"relu\"},"
    "{\"type\":\"Dropout\",\"rate\":0.2},"
    "{\"type\":\"Dense\",\"units\":10}]}",
};

/* ----------------------------------------------------------------------------
 * YAML -> cJSON, so that one parser reads both spellings of a spec */

/* libyaml's loader makes an alias a second reference to the anchored node, so the tree
 * copies that node once per alias, and a few lines of aliases of aliases ("billion
 * laughs") stand for billions of nodes. Aliases stay allowed (a spec written by PyYAML's
 * yaml.dump has &id001 anchors wherever one object appeared twice), but what their
 * copies add is bounded by the document's own size (every node once) or
 * YAML_ALIAS_SLACK, whichever is larger. Sizes are in bytes, roughly what the tree
 * holds: a cJSON item per node and each scalar's text. */
#define YAML_NODE_COST 64
#define YAML_ALIAS_SLACK ((size_t)1 << 20)
#define YAML_MAX_DEPTH 64

typedef struct {
    yaml_document_t *doc;
    const char *what;
    unsigned char *seen;       /* [node index]: converted once already */
    size_t used, limit;        /* size so far and its bound */
    const yaml_node_t *repeat; /* the outermost node being copied for an alias, or NULL */
    char *err;
    size_t errlen;
} YamlConv;

static size_t yaml_node_cost(const yaml_node_t *n)
{
    return YAML_NODE_COST + (n->type == YAML_SCALAR_NODE ? n->data.scalar.length + 1 : 0);
}

/* Counts node n (a value or a key) against the bounds; -1 with the reason in err. */
static int yaml_charge(YamlConv *yc, const yaml_node_t *n, int depth)
{
    if (depth > YAML_MAX_DEPTH) {
        snprintf(yc->err, yc->errlen,
                 "%s: line %zu: nested deeper than %d levels (or an alias inside the node it "
                 "names)",
                 yc->what, n->start_mark.line + 1, YAML_MAX_DEPTH);
        return -1;
    }
    yc->used += yaml_node_cost(n);
    if (yc->used <= yc->limit) return 0;
    const yaml_node_t *a = yc->repeat ? yc->repeat : n;
    snprintf(yc->err, yc->errlen,
             "%s: line %zu: aliases of the node anchored there add more than the document's own "
             "size and more than %zu MiB (a \"billion laughs\"?); write the repeated parts out "
             "instead",
             yc->what, a->start_mark.line + 1, YAML_ALIAS_SLACK >> 20);
    return -1;
}

static cJSON *yaml_scalar_to_json(const yaml_node_t *node)
{
    const char *s = (const char *)node->data.scalar.value;
    size_t len = node->data.scalar.length;
    if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        char *end;
        double v = strtod(s, &end);
        if (len > 0 && end == s + len) return cJSON_CreateNumber(v);
        if (!strcmp(s, "true")) return cJSON_CreateTrue();
        if (!strcmp(s, "false")) return cJSON_CreateFalse();
        if (!strcmp(s, "null") || !strcmp(s, "~") || len == 0) return cJSON_CreateNull();
    }
    return cJSON_CreateString(s);
}

/* Converts node; NULL with the reason in yc->err. */
static cJSON *yaml_node_to_json(YamlConv *yc, yaml_node_t *node, int depth)
{
    if (!node) {
        snprintf(yc->err, yc->errlen, "%s: a YAML node libyaml lost", yc->what);
        return NULL;
    }
    if (yaml_charge(yc, node, depth)) return NULL;
    const size_t i = (size_t)(node - yc->doc->nodes.start);
    const yaml_node_t *outer = yc->repeat;
    if (yc->seen[i] && !outer) yc->repeat = node;
    yc->seen[i] = 1;
    cJSON *out = NULL;
    if (node->type == YAML_SCALAR_NODE) {
        out = yaml_scalar_to_json(node);
    } else if (node->type == YAML_SEQUENCE_NODE) {
        out = cJSON_CreateArray();
        for (yaml_node_item_t *it = node->data.sequence.items.start;
             out && it < node->data.sequence.items.top; it++) {
            cJSON *child = yaml_node_to_json(yc, yaml_document_get_node(yc->doc, *it), depth + 1);
            if (!child) goto err;
            cJSON_AddItemToArray(out, child);
        }
    } else if (node->type == YAML_MAPPING_NODE) {
        out = cJSON_CreateObject();
        for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
             out && p < node->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(yc->doc, p->key);
            if (!k || k->type != YAML_SCALAR_NODE) {
                snprintf(yc->err, yc->errlen, "%s: line %zu: expected a scalar key", yc->what,
                         k ? k->start_mark.line + 1 : node->start_mark.line + 1);
                goto err;
            }
            if (yaml_charge(yc, k, depth + 1)) goto err;
            cJSON *child =
                yaml_node_to_json(yc, yaml_document_get_node(yc->doc, p->value), depth + 1);
            if (!child) goto err;
            cJSON_AddItemToObject(out, (const char *)k->data.scalar.value, child);
        }
    }
    if (!out) snprintf(yc->err, yc->errlen, "%s: out of memory reading the YAML", yc->what);
    yc->repeat = outer;
    return out;
err:
    yc->repeat = outer;
    cJSON_Delete(out);
    return NULL;
}

static cJSON *parse_yaml(const char *text, const char *what, char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    cJSON *root = NULL;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: cannot initialise the YAML parser", what);
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, strlen(text));
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "%s: invalid YAML at line %zu: %s", what,
                 parser.problem_mark.line + 1, parser.problem ? parser.problem : "syntax error");
        yaml_parser_delete(&parser);
        return NULL;
    }
    yaml_node_t *top = yaml_document_get_root_node(&doc);
    if (top) {
        size_t own = 0;
        for (yaml_node_t *n = doc.nodes.start; n < doc.nodes.top; n++) own += yaml_node_cost(n);
        YamlConv yc = {.doc = &doc,
                       .what = what,
                       .err = err,
                       .errlen = errlen,
                       .seen = xcalloc((size_t)(doc.nodes.top - doc.nodes.start), 1),
                       .limit = own + (own > YAML_ALIAS_SLACK ? own : YAML_ALIAS_SLACK)};
        root = yaml_node_to_json(&yc, top, 0);
        free(yc.seen);
    }
    if (!top) snprintf(err, errlen, "%s: expected a YAML mapping with `layers:`", what);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return root;
}

/* ----------------------------------------------------------------------------
 * Spec fields */

typedef struct {
    const char *what; /* file name or "built-in model X" */
    char *err;
    size_t errlen;
    int index;        /* layer index, -1 for top level */
    const char *name, *type; /* the layer's, when it has a name (a Keras model's layers do) */
} SpecCtx;

static int spec_fail(const SpecCtx *sc, const char *field, const char *expected)
{
    if (sc->index >= 0 && sc->name)
        snprintf(sc->err, sc->errlen, "%s: layers[%d] \"%s\" (%s).%s: expected %s", sc->what,
                 sc->index, sc->name, sc->type, field, expected);
    else if (sc->index >= 0)
        snprintf(sc->err, sc->errlen, "%s: layers[%d].%s: expected %s", sc->what, sc->index, field,
                 expected);
    else snprintf(sc->err, sc->errlen, "%s: %s: expected %s", sc->what, field, expected);
    return -EINVAL;
}

static int is_int(const cJSON *v, int min, int max)
{
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= min &&
           v->valuedouble <= max;
}

/* An integer field, `def` when absent (def < 0: required). */
static int spec_int(const SpecCtx *sc, const cJSON *o, const char *key, int def, int min, int max,
                    int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v && def >= 0) {
        *out = def;
        return 0;
    }
    if (!is_int(v, min, max)) {
        char exp[64];
        snprintf(exp, sizeof exp, "an integer in [%d, %d]", min, max);
        return spec_fail(sc, key, exp);
    }
    *out = v->valueint;
    return 0;
}

/* An int or a pair [a, b] (Keras's kernel_size, strides, pool_size). */
static int spec_pair(const SpecCtx *sc, const cJSON *o, const char *key, int def, int out[2])
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v && def > 0) {
        out[0] = out[1] = def;
        return 0;
    }
    if (is_int(v, 1, 4096)) {
        out[0] = out[1] = v->valueint;
        return 0;
    }
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 && is_int(v->child, 1, 4096) &&
        is_int(v->child->next, 1, 4096)) {
        out[0] = v->child->valueint;
        out[1] = v->child->next->valueint;
        return 0;
    }
    return spec_fail(sc, key, "a positive integer or a pair [a, b]");
}

/* A shape: 1 to 3 positive integers. */
static int spec_shape(const SpecCtx *sc, const cJSON *v, const char *key, int shape[3], int *rank)
{
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (n < 1 || n > 3) return spec_fail(sc, key, "a list of 1 to 3 positive integers");
    int i = 0;
    for (const cJSON *d = v->child; d; d = d->next, i++) {
        if (!is_int(d, 1, 1 << 20)) return spec_fail(sc, key, "a list of 1 to 3 positive integers");
        shape[i] = d->valueint;
    }
    *rank = n;
    return 0;
}

static int spec_activation(const SpecCtx *sc, const cJSON *o, Activation *act)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "activation");
    *act = ACT_LINEAR;
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v) && !model_activation_parse(v->valuestring, act)) return 0;
    return spec_fail(sc, "activation", "one of " MODEL_ACTIVATIONS);
}

/* kernel_regularizer: {"l1": F, "l2": F}, either or both (Keras's L1, L2, L1L2), or a
 * bare number F (the L2 factor). */
static int spec_regularizer(const SpecCtx *sc, const cJSON *o, float *l1, float *l2)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "kernel_regularizer");
    const char *expected = "{\"l1\": F, \"l2\": F} (either or both) of non-negative numbers";
    *l1 = *l2 = 0.0f;
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsNumber(v) && v->valuedouble >= 0.0 && isfinite(v->valuedouble)) {
        *l2 = (float)v->valuedouble;
        return 0;
    }
    if (!cJSON_IsObject(v) || !v->child) return spec_fail(sc, "kernel_regularizer", expected);
    for (const cJSON *k = v->child; k; k = k->next) {
        const int is_l1 = !strcmp(k->string, "l1");
        if ((!is_l1 && strcmp(k->string, "l2")) || !cJSON_IsNumber(k) || !(k->valuedouble >= 0.0) ||
            !isfinite(k->valuedouble))
            return spec_fail(sc, "kernel_regularizer", expected);
        *(is_l1 ? l1 : l2) = (float)k->valuedouble;
    }
    return 0;
}

/* An initializer field (initializer.h) as Keras writes it; dflt when absent or null. */
static int spec_initializer(const SpecCtx *sc, const cJSON *o, const char *key, Init dflt,
                            Init *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    char why[512], expected[600];
    *out = dflt;
    if (!v || cJSON_IsNull(v) || !init_parse(v, out, why, sizeof why)) return 0;
    snprintf(expected, sizeof expected, "an initializer as Keras writes it: %s", why);
    return spec_fail(sc, key, expected);
}

/* kernel_initializer and bias_initializer of a Dense or Conv2D layer. */
static int spec_kernel_bias_init(const SpecCtx *sc, const cJSON *o, Layer *l)
{
    int rc = spec_initializer(sc, o, "kernel_initializer", init_glorot_uniform, &l->init[0]);
    return rc ? rc : spec_initializer(sc, o, "bias_initializer", init_zeros, &l->init[1]);
}

/* use_bias: absent or true (Keras's default), or false: the layer has no bias. */
static int spec_use_bias(const SpecCtx *sc, const cJSON *o, int *use_bias)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "use_bias");
    if (v && !cJSON_IsBool(v)) return spec_fail(sc, "use_bias", "true or false");
    *use_bias = !cJSON_IsFalse(v);
    return 0;
}

static size_t shape_size(const int *shape, int rank)
{
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)shape[i];
    return n;
}

/* ----------------------------------------------------------------------------
 * Building the model */

/* A key this layer type does not take (a Keras option such as dilation_rate that is not
 * implemented, or a typo) is an error: ignoring it would train another model than the
 * one asked for. `name` is always allowed. */
static int spec_known_keys(const SpecCtx *sc, const cJSON *o, const char *type,
                           const char *const *keys)
{
    for (const cJSON *k = o->child; k; k = k->next) {
        if (!k->string || !strcmp(k->string, "type") || !strcmp(k->string, "name")) continue;
        int ok = 0;
        for (size_t i = 0; keys[i] && !ok; i++) ok = !strcmp(k->string, keys[i]);
        if (ok) continue;
        char takes[256];
        size_t n = 0;
        takes[0] = 0;
        for (size_t i = 0; keys[i] && n < sizeof takes; i++)
            n += (size_t)snprintf(takes + n, sizeof takes - n, "%s, ", keys[i]);
        snprintf(sc->err, sc->errlen, "%s: layers[%d].%s: not a %s option here (it takes: %sname)",
                 sc->what, sc->index, k->string, type, takes);
        return -EINVAL;
    }
    return 0;
}

/* A key that must be absent, null or the number want (ReLU's options at Keras's defaults:
 * the trainer's ReLU layer is the plain relu). */
static int spec_default(const SpecCtx *sc, const cJSON *o, const char *key, int nullable,
                        double want, const char *expected)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || (nullable && cJSON_IsNull(v)) || (cJSON_IsNumber(v) && v->valuedouble == want))
        return 0;
    return spec_fail(sc, key, expected);
}

/* Activation (any activation), ReLU (its defaults) and LeakyReLU (negative_slope >= 0,
 * Keras's default 0.3). */
static int activation_layer(Layer *l, const cJSON *o, const char *t, const SpecCtx *sc)
{
    int rc;
    if (!strcmp(t, "Activation")) {
        l->type = LAYER_ACTIVATION;
        if (!cJSON_GetObjectItemCaseSensitive(o, "activation"))
            return spec_fail(sc, "activation", "one of " MODEL_ACTIVATIONS);
        return spec_activation(sc, o, &l->act);
    }
    if (!strcmp(t, "ReLU")) {
        l->type = LAYER_RELU;
        l->act = ACT_RELU;
        if ((rc = spec_default(sc, o, "negative_slope", 0, 0.0, "0 (the plain relu)")) ||
            (rc = spec_default(sc, o, "threshold", 0, 0.0, "0 (the plain relu)")))
            return rc;
        return spec_default(sc, o, "max_value", 1, (double)NAN, "null (the plain relu)");
    }
    l->type = LAYER_LEAKY_RELU;
    l->act = ACT_LEAKY_RELU;
    l->slope = 0.3f;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "negative_slope");
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0.0 && v->valuedouble <= 1e6))
        return spec_fail(sc, "negative_slope", "a number >= 0");
    l->slope = (float)v->valuedouble;
    return 0;
}

/* MaxPooling2D and AveragePooling2D (l->type set, l->in_shape filled): pool_size
 * (default 2), strides (Keras's None: the pool size), padding valid or same. */
static int pool_layer(Layer *l, const cJSON *o, const char *t, const SpecCtx *sc)
{
    int p[2], s[2], rc, same = 0;
    if (l->in_rank != 3) {
        char exp[96];
        snprintf(exp, sizeof exp, "%s after a (height, width, channels) shape", t);
        return spec_fail(sc, "type", exp);
    }
    if ((rc = spec_pair(sc, o, "pool_size", 2, p))) return rc;
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(o, "strides");
    if (!sv || cJSON_IsNull(sv)) {
        s[0] = p[0], s[1] = p[1];
    } else if ((rc = spec_pair(sc, o, "strides", 1, s))) {
        return rc;
    }
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(o, "padding");
    if (pad && !(cJSON_IsString(pad) && (!strcmp(pad->valuestring, "valid") ||
                                         (same = !strcmp(pad->valuestring, "same")))))
        return spec_fail(sc, "padding", "\"valid\" or \"same\"");
    if (pool_geom_init(&l->pool, l->in_shape[0], l->in_shape[1], l->in_shape[2], p[0], p[1], s[0],
                       s[1], same))
        return spec_fail(sc, "pool_size", "a pool no larger than the input (or padding \"same\")");
    l->same = same;
    l->out_shape[0] = l->pool.oh;
    l->out_shape[1] = l->pool.ow;
    l->out_shape[2] = l->in_shape[2];
    l->out_rank = 3;
    return 0;
}

/* GlobalAveragePooling2D and GlobalMaxPooling2D: a pool whose window is the whole
 * input; (C) out, or (1, 1, C) with keepdims true. */
static int global_pool_layer(Layer *l, const cJSON *o, const char *t, const SpecCtx *sc)
{
    if (l->in_rank != 3) {
        char exp[96];
        snprintf(exp, sizeof exp, "%s after a (height, width, channels) shape", t);
        return spec_fail(sc, "type", exp);
    }
    const cJSON *kd = cJSON_GetObjectItemCaseSensitive(o, "keepdims");
    if (kd && !cJSON_IsBool(kd)) return spec_fail(sc, "keepdims", "true or false");
    const int h = l->in_shape[0], w = l->in_shape[1], c = l->in_shape[2];
    pool_geom_init(&l->pool, h, w, c, h, w, 1, 1, 0);
    if (cJSON_IsTrue(kd)) {
        l->out_shape[0] = l->out_shape[1] = 1;
        l->out_shape[2] = c;
        l->out_rank = 3;
    } else {
        l->out_shape[0] = c;
        l->out_rank = 1;
    }
    return 0;
}

/* Rescaling: scale (required) and offset (default 0), each one number: a list (Keras's
 * per-channel form) is refused. */
static int rescaling_layer(Layer *l, const cJSON *o, const SpecCtx *sc)
{
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(o, "scale");
    const cJSON *ov = cJSON_GetObjectItemCaseSensitive(o, "offset");
    const char *one = "a finite number (one for every channel; a per-channel list is not "
                      "supported)";
    if (!cJSON_IsNumber(sv) || !isfinite(sv->valuedouble)) return spec_fail(sc, "scale", one);
    if (ov && !(cJSON_IsNumber(ov) && isfinite(ov->valuedouble)))
        return spec_fail(sc, "offset", one);
    l->type = LAYER_RESCALING;
    l->scale = (float)sv->valuedouble;
    l->offset = ov ? (float)ov->valuedouble : 0.0f;
    memcpy(l->out_shape, l->in_shape, sizeof l->out_shape);
    l->out_rank = l->in_rank;
    return 0;
}

/* The axis of a BatchNormalization: the last one, as -1 (Keras 3) or counted with the
 * batch (tf-keras writes [3] for an (H, W, C) input), a number or a list of one. */
static int batchnorm_axis(const Layer *l, const cJSON *o, const SpecCtx *sc)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "axis");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1) v = v->child;
    if (!v || (cJSON_IsNumber(v) && (v->valuedouble == -1.0 || v->valuedouble == l->in_rank)))
        return 0;
    return spec_fail(sc, "axis",
                     "-1, the last axis (channels last): the trainer normalises over the "
                     "channels only");
}

/* BatchNormalization: axis (the last), momentum (default 0.99), epsilon (1e-3), center
 * and scale (true), synchronized (false: each rank normalising with its own examples'
 * statistics, Keras's default; true: with the global batch's, model_step_sync). Gamma is
 * the kernel, beta the bias, the moving mean and variance the state. */
static int batchnorm_layer(Layer *l, const cJSON *o, const SpecCtx *sc)
{
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(o, "momentum");
    const cJSON *ep = cJSON_GetObjectItemCaseSensitive(o, "epsilon");
    const cJSON *ce = cJSON_GetObjectItemCaseSensitive(o, "center");
    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(o, "scale");
    const cJSON *sy = cJSON_GetObjectItemCaseSensitive(o, "synchronized");
    int rc;
    if ((rc = batchnorm_axis(l, o, sc))) return rc;
    if (mo && !(cJSON_IsNumber(mo) && mo->valuedouble >= 0.0 && mo->valuedouble <= 1.0))
        return spec_fail(sc, "momentum", "a number in [0, 1]");
    if (ep && !(cJSON_IsNumber(ep) && ep->valuedouble > 0.0 && isfinite(ep->valuedouble)))
        return spec_fail(sc, "epsilon", "a number > 0");
    if (ce && !cJSON_IsBool(ce)) return spec_fail(sc, "center", "true or false");
    if (sa && !cJSON_IsBool(sa)) return spec_fail(sc, "scale", "true or false");
    if ((rc = spec_initializer(sc, o, "gamma_initializer", init_ones, &l->init[0])) ||
        (rc = spec_initializer(sc, o, "beta_initializer", init_zeros, &l->init[1])) ||
        (rc = spec_initializer(sc, o, "moving_mean_initializer", init_zeros, &l->init[2])) ||
        (rc = spec_initializer(sc, o, "moving_variance_initializer", init_ones, &l->init[3])))
        return rc;
    if (sy && !cJSON_IsBool(sy)) return spec_fail(sc, "synchronized", "true or false");
    const size_t c = (size_t)l->in_shape[l->in_rank - 1];
    l->type = LAYER_BATCHNORM;
    l->momentum = mo ? (float)mo->valuedouble : 0.99f;
    l->epsilon = ep ? (float)ep->valuedouble : 1e-3f;
    l->synchronized = cJSON_IsTrue(sy);
    l->w_count = sa && cJSON_IsFalse(sa) ? 0 : c;
    l->b_count = ce && cJSON_IsFalse(ce) ? 0 : c;
    l->s_count = 2 * c;
    memcpy(l->out_shape, l->in_shape, sizeof l->out_shape);
    l->out_rank = l->in_rank;
    return 0;
}

static int layer_from_json(Layer *l, const cJSON *o, const int *in_shape, int in_rank,
                           const SpecCtx *sc)
{
    static const char *const reshape_keys[] = {"target_shape", NULL};
    static const char *const flatten_keys[] = {NULL};
    static const char *const conv_keys[] = {"filters",
                                            "kernel_size",
                                            "strides",
                                            "padding",
                                            "activation",
                                            "use_bias",
                                            "kernel_regularizer",
                                            "kernel_initializer",
                                            "bias_initializer",
                                            NULL};
    static const char *const pool_keys[] = {"pool_size", "strides", "padding", NULL};
    static const char *const global_pool_keys[] = {"keepdims", NULL};
    static const char *const rescaling_keys[] = {"scale", "offset", NULL};
    static const char *const dense_keys[] = {"units",
                                             "activation",
                                             "use_bias",
                                             "kernel_regularizer",
                                             "kernel_initializer",
                                             "bias_initializer",
                                             NULL};
    static const char *const dropout_keys[] = {"rate", NULL};
    static const char *const activation_keys[] = {"activation", NULL};
    static const char *const relu_keys[] = {"negative_slope", "max_value", "threshold", NULL};
    static const char *const leaky_keys[] = {"negative_slope", NULL};
    static const char *const batchnorm_keys[] = {"axis",
                                                 "momentum",
                                                 "epsilon",
                                                 "center",
                                                 "scale",
                                                 "synchronized",
                                                 "gamma_initializer",
                                                 "beta_initializer",
                                                 "moving_mean_initializer",
                                                 "moving_variance_initializer",
                                                 NULL};
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    if (!cJSON_IsObject(o) || !cJSON_IsString(type))
        return spec_fail(sc, "type", "a string: " MODEL_LAYER_TYPES);
    const char *t = type->valuestring;
    memset(l, 0, sizeof *l);
    memcpy(l->in_shape, in_shape, sizeof l->in_shape);
    l->in_rank = in_rank;
    l->in_size = shape_size(in_shape, in_rank);
    int rc;
    const char *const *keys = !strcmp(t, "Reshape")                  ? reshape_keys
                              : !strcmp(t, "Flatten")                ? flatten_keys
                              : !strcmp(t, "Conv2D")                 ? conv_keys
                              : !strcmp(t, "MaxPooling2D")           ? pool_keys
                              : !strcmp(t, "AveragePooling2D")       ? pool_keys
                              : !strcmp(t, "GlobalAveragePooling2D") ? global_pool_keys
                              : !strcmp(t, "GlobalMaxPooling2D")     ? global_pool_keys
                              : !strcmp(t, "Rescaling")              ? rescaling_keys
                              : !strcmp(t, "Dense")                  ? dense_keys
                              : !strcmp(t, "Dropout")                ? dropout_keys
                              : !strcmp(t, "Activation")             ? activation_keys
                              : !strcmp(t, "ReLU")                   ? relu_keys
                              : !strcmp(t, "LeakyReLU")              ? leaky_keys
                              : !strcmp(t, "BatchNormalization")     ? batchnorm_keys
                                                                     : NULL;
    if (keys && (rc = spec_known_keys(sc, o, t, keys))) return rc;
    if (!strcmp(t, "Reshape")) {
        l->type = LAYER_RESHAPE;
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(o, "target_shape");
        if ((rc = spec_shape(sc, ts, "target_shape", l->out_shape, &l->out_rank))) return rc;
        if (shape_size(l->out_shape, l->out_rank) != l->in_size)
            return spec_fail(sc, "target_shape", "a shape with as many elements as the input");
    } else if (!strcmp(t, "Flatten")) {
        l->type = LAYER_FLATTEN;
        l->out_shape[0] = (int)l->in_size;
        l->out_rank = 1;
    } else if (!strcmp(t, "Conv2D")) {
        l->type = LAYER_CONV2D;
        int filters = 0, k[2], s[2], same = 0, use_bias;
        if (in_rank != 3)
            return spec_fail(sc, "type",
                             "Conv2D after a (height, width, channels) "
                             "shape; add a Reshape");
        if ((rc = spec_int(sc, o, "filters", -1, 1, 65536, &filters)) ||
            (rc = spec_pair(sc, o, "kernel_size", 0, k)) ||
            (rc = spec_pair(sc, o, "strides", 1, s)) || (rc = spec_activation(sc, o, &l->act)) ||
            (rc = spec_regularizer(sc, o, &l->l1, &l->l2)) ||
            (rc = spec_use_bias(sc, o, &use_bias)) || (rc = spec_kernel_bias_init(sc, o, l)))
            return rc;
        const cJSON *pad = cJSON_GetObjectItemCaseSensitive(o, "padding");
        if (pad && !(cJSON_IsString(pad) && (!strcmp(pad->valuestring, "valid") ||
                                             (same = !strcmp(pad->valuestring, "same")))))
            return spec_fail(sc, "padding", "\"valid\" or \"same\"");
        l->same = same;
        if (conv_geom_init(&l->conv, in_shape[0], in_shape[1], in_shape[2], k[0], k[1], filters,
                           s[0], s[1], same))
            return spec_fail(sc, "kernel_size", "a kernel no larger than the input");
        l->out_shape[0] = l->conv.oh;
        l->out_shape[1] = l->conv.ow;
        l->out_shape[2] = filters;
        l->out_rank = 3;
        l->w_count = (size_t)k[0] * k[1] * in_shape[2] * filters;
        l->b_count = use_bias ? (size_t)filters : 0;
    } else if (!strcmp(t, "MaxPooling2D") || !strcmp(t, "AveragePooling2D")) {
        l->type = t[0] == 'M' ? LAYER_MAXPOOL : LAYER_AVGPOOL;
        if ((rc = pool_layer(l, o, t, sc))) return rc;
    } else if (!strcmp(t, "Rescaling")) {
        if ((rc = rescaling_layer(l, o, sc))) return rc;
    } else if (!strcmp(t, "GlobalAveragePooling2D") || !strcmp(t, "GlobalMaxPooling2D")) {
        l->type = t[6] == 'A' ? LAYER_GLOBAL_AVGPOOL : LAYER_GLOBAL_MAXPOOL;
        if ((rc = global_pool_layer(l, o, t, sc))) return rc;
    } else if (!strcmp(t, "Dense")) {
        l->type = LAYER_DENSE;
        int use_bias;
        if ((rc = spec_int(sc, o, "units", -1, 1, 1 << 20, &l->units)) ||
            (rc = spec_activation(sc, o, &l->act)) ||
            (rc = spec_regularizer(sc, o, &l->l1, &l->l2)) ||
            (rc = spec_use_bias(sc, o, &use_bias)) || (rc = spec_kernel_bias_init(sc, o, l)))
            return rc;
        /* Keras's Dense acts on the last axis: (..., d) -> (..., units). */
        l->dense_in = in_shape[in_rank - 1];
        l->dense_rows = (int)(l->in_size / (size_t)l->dense_in);
        memcpy(l->out_shape, in_shape, sizeof l->out_shape);
        l->out_shape[in_rank - 1] = l->units;
        l->out_rank = in_rank;
        l->w_count = (size_t)l->dense_in * (size_t)l->units;
        l->b_count = use_bias ? (size_t)l->units : 0;
    } else if (!strcmp(t, "Dropout")) {
        l->type = LAYER_DROPOUT;
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "rate");
        if (!cJSON_IsNumber(r) || !(r->valuedouble >= 0.0 && r->valuedouble < 1.0))
            return spec_fail(sc, "rate", "a number in [0, 1)");
        l->rate = (float)r->valuedouble;
        memcpy(l->out_shape, in_shape, sizeof l->out_shape);
        l->out_rank = in_rank;
    } else if (!strcmp(t, "BatchNormalization")) {
        if ((rc = batchnorm_layer(l, o, sc))) return rc;
    } else if (!strcmp(t, "Activation") || !strcmp(t, "ReLU") || !strcmp(t, "LeakyReLU")) {
        if ((rc = activation_layer(l, o, t, sc))) return rc;
        memcpy(l->out_shape, in_shape, sizeof l->out_shape);
        l->out_rank = in_rank;
    } else {
        return spec_fail(sc, "type", MODEL_LAYER_TYPES);
    }
    l->out_size = shape_size(l->out_shape, l->out_rank);
    if (l->out_size > MODEL_MAX_FLOATS || l->w_count > MODEL_MAX_FLOATS)
        return spec_fail(sc, "type",
                         "a layer of at most 2^28 outputs per example and 2^28 "
                         "weights");
    return 0;
}

static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < *cap - *len) {
            *len += (size_t)n;
            return;
        }
        *cap *= 2;
        char *nb = xmalloc(*cap);
        memcpy(nb, *buf, *len + 1);
        free(*buf);
        *buf = nb;
    }
}

/* Indexed by Activation: the names Keras 3 writes */
static const char *const activation_names[] = {"linear", "relu", "softmax", "sigmoid",   "tanh",
                                               "gelu",   "silu", "elu",     "leaky_relu"};

const char *model_activation_name(Activation a)
{
    return activation_names[a];
}

int model_activation_layer(const Layer *l)
{
    return l->type == LAYER_ACTIVATION || l->type == LAYER_RELU || l->type == LAYER_LEAKY_RELU;
}

int model_gpu_has_layer(const Layer *l)
{
    return !model_activation_layer(l) && l->type != LAYER_AVGPOOL && l->type != LAYER_BATCHNORM &&
           l->type != LAYER_GLOBAL_AVGPOOL && l->type != LAYER_GLOBAL_MAXPOOL &&
           l->type != LAYER_RESCALING && !(l->w_count && !l->b_count) && l->l1 == 0.0f;
}

const Layer *model_gpu_unsupported(const Model *m)
{
    for (int i = 0; i < m->num_layers; i++) {
        const Activation a = m->layers[i].act;
        if (a != ACT_LINEAR && a != ACT_RELU && a != ACT_SOFTMAX) return &m->layers[i];
        if (!model_gpu_has_layer(&m->layers[i])) return &m->layers[i];
    }
    return NULL;
}

int model_activation_parse(const char *name, Activation *act)
{
    if (!strcmp(name, "swish")) return *act = ACT_SWISH, 0; /* tf-keras's name of silu */
    for (size_t i = 0; i < sizeof activation_names / sizeof *activation_names; i++)
        if (!strcmp(name, activation_names[i])) return *act = (Activation)i, 0;
    return -EINVAL;
}

int model_layer_vars(const Layer *l, LayerVar vars[4])
{
    int n = 0;
    const int c = (int)(l->s_count / 2);
    if (l->type == LAYER_BATCHNORM) {
        if (l->w_count) vars[n++] = (LayerVar){"gamma", l->w_off, l->w_count, 1, {c}};
        if (l->b_count) vars[n++] = (LayerVar){"beta", l->b_off, l->b_count, 1, {c}};
        vars[n++] = (LayerVar){"moving_mean", l->s_off, (size_t)c, 1, {c}};
        vars[n++] = (LayerVar){"moving_variance", l->s_off + (size_t)c, (size_t)c, 1, {c}};
        return n;
    }
    if (!l->w_count) return 0;
    if (l->type == LAYER_CONV2D)
        vars[n++] = (LayerVar){
            "kernel", l->w_off, l->w_count, 4, {l->conv.kh, l->conv.kw, l->conv.c, l->conv.f}};
    else vars[n++] = (LayerVar){"kernel", l->w_off, l->w_count, 2, {l->dense_in, l->units}};
    if (l->b_count) vars[n++] = (LayerVar){"bias", l->b_off, l->b_count, 1, {(int)l->b_count}};
    return n;
}

/* ",l1=F" for a layer with an L1 term, else "" (the signatures without one unchanged). */
static const char *l1_text(const Layer *l, char *buf, size_t len)
{
    if (l->l1 == 0.0f) return "";
    snprintf(buf, len, ",l1=%g", (double)l->l1);
    return buf;
}

static void make_signature(Model *m)
{
    char l1[32];
    size_t len = 0, cap = 256;
    char *s = xmalloc(cap);
    s[0] = '\0';
    append(&s, &len, &cap, "sequential in=%d", m->input_shape[0]);
    for (int i = 1; i < m->input_rank; i++) append(&s, &len, &cap, "x%d", m->input_shape[i]);
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        switch (l->type) {
        case LAYER_RESHAPE:
            append(&s, &len, &cap, "|reshape(%d", l->out_shape[0]);
            for (int d = 1; d < l->out_rank; d++) append(&s, &len, &cap, "x%d", l->out_shape[d]);
            append(&s, &len, &cap, ")");
            break;
        case LAYER_FLATTEN: append(&s, &len, &cap, "|flatten"); break;
        case LAYER_CONV2D:
            append(&s, &len, &cap, "|conv2d(%d,%dx%d,s%dx%d,%s,%s,l2=%g%s%s)", l->conv.f,
                   l->conv.kh, l->conv.kw, l->conv.sh, l->conv.sw, l->same ? "same" : "valid",
                   model_activation_name(l->act), (double)l->l2, l1_text(l, l1, sizeof l1),
                   l->b_count ? "" : ",nobias");
            break;
        case LAYER_MAXPOOL:
            /* a square "valid" pool keeps the signature it always had */
            if (l->pool.ph == l->pool.pw && l->pool.sh == l->pool.sw && !l->same)
                append(&s, &len, &cap, "|maxpool(%d,s%d)", l->pool.ph, l->pool.sh);
            else
                append(&s, &len, &cap, "|maxpool(%dx%d,s%dx%d,%s)", l->pool.ph, l->pool.pw,
                       l->pool.sh, l->pool.sw, l->same ? "same" : "valid");
            break;
        case LAYER_DENSE:
            if (l->dense_rows > 1) /* on a rank > 1 input: which axis it maps matters */
                append(&s, &len, &cap, "|dense(%dx%d->%d,%s,l2=%g%s%s)", l->dense_rows, l->dense_in,
                       l->units, model_activation_name(l->act), (double)l->l2,
                       l1_text(l, l1, sizeof l1), l->b_count ? "" : ",nobias");
            else
                append(&s, &len, &cap, "|dense(%d,%s,l2=%g%s%s)", l->units,
                       model_activation_name(l->act), (double)l->l2, l1_text(l, l1, sizeof l1),
                       l->b_count ? "" : ",nobias");
            break;
        case LAYER_DROPOUT: append(&s, &len, &cap, "|dropout(%g)", (double)l->rate); break;
        case LAYER_ACTIVATION:
        case LAYER_RELU:
            append(&s, &len, &cap, "|%s(%s)", model_layer_keras_stem(l->type),
                   model_activation_name(l->act));
            break;
        case LAYER_LEAKY_RELU: append(&s, &len, &cap, "|leaky_re_lu(%g)", (double)l->slope); break;
        case LAYER_AVGPOOL:
            append(&s, &len, &cap, "|avgpool(%dx%d,s%dx%d,%s)", l->pool.ph, l->pool.pw, l->pool.sh,
                   l->pool.sw, l->same ? "same" : "valid");
            break;
        case LAYER_GLOBAL_AVGPOOL:
        case LAYER_GLOBAL_MAXPOOL:
            append(&s, &len, &cap, "|%s%s", model_layer_keras_stem(l->type),
                   l->out_rank == 3 ? "(keepdims)" : "");
            break;
        case LAYER_RESCALING:
            append(&s, &len, &cap, "|rescaling(%.9g,%.9g)", (double)l->scale, (double)l->offset);
            break;
        case LAYER_BATCHNORM:
            append(&s, &len, &cap, "|batchnorm(%.9g,%.9g%s%s%s)", (double)l->momentum,
                   (double)l->epsilon, l->b_count ? "" : ",nocenter", l->w_count ? "" : ",noscale",
                   l->synchronized ? ",synchronized" : "");
            break;
        }
    }
    append(&s, &len, &cap, "|params=%zu", m->num_params);
    m->signature = s;
    util_sha256_hex(s, len, m->signature_sha256);
}

/* Saturating arithmetic for model_memory: a spec may describe more bytes than a size_t. */
static size_t sat_add(size_t a, size_t b)
{
    size_t r;
    return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}
static size_t sat_mul(size_t a, size_t b)
{
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

static size_t sharded_params_max(const Model *m);
static int dense_feeds_relu_conv(const Model *m, int i);
static int batchnorm_feeds_relu(const Model *m, int i);
static int conv_feeds_batchnorm(const Model *m, int i);

ModelMemory model_memory(const Model *m, int batch, size_t state_per_param)
{
    const size_t b = (size_t)batch, f = sizeof(float);
    ModelMemory mm = {0};
    /* step(): a shard of at least GEMM_SHARD_MIN_EXAMPLES examples per thread, at most
     * GEMM_MAX_SHARDS; the threads are not known yet, so the most the batch allows */
    size_t shards = b / GEMM_SHARD_MIN_EXAMPLES;
    shards = shards < 1 ? 1 : shards > GEMM_MAX_SHARDS ? GEMM_MAX_SHARDS : shards;
    mm.weights = sat_add(sat_mul(m->num_params, f), model_grads_bytes(m->num_params));
    mm.weights = sat_add(mm.weights, sat_mul(sat_mul(shards - 1, sharded_params_max(m)), f));
    mm.weights = sat_add(mm.weights, sat_mul(sat_mul(m->num_params, state_per_param), f));
    /* model_reserve's buffers, in its order */
    size_t dmax = m->input_size, colmax = 0, dzero = 0;
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        const size_t out = sat_mul(sat_mul(b, l->out_size), f);
        if (l->type != LAYER_RESHAPE && l->type != LAYER_FLATTEN && !batchnorm_feeds_relu(m, i))
            mm.activations = sat_add(mm.activations, out);
        if (l->type == LAYER_DROPOUT || activation_needs_input(l->act))
            mm.activations = sat_add(mm.activations, out);
        if (l->type == LAYER_MAXPOOL || l->type == LAYER_GLOBAL_MAXPOOL)
            mm.activations =
                sat_add(mm.activations, sat_mul(sat_mul(b, l->out_size), sizeof(int32_t)));
        if (l->type == LAYER_BATCHNORM)
            mm.activations = sat_add(mm.activations, sat_mul(sat_mul(3, l->s_count / 2), f));
        if (conv_feeds_batchnorm(m, i))
            mm.activations =
                sat_add(mm.activations, sat_mul(sat_mul(b, 2 * (size_t)l->conv.f), sizeof(double)));
        if (l->type == LAYER_CONV2D) {
            /* the shards' scratch: only a block of each is touched (conv_scratch_size) */
            const size_t c = conv_scratch_size(&l->conv, batch);
            colmax = c > colmax ? c : colmax;
        }
        dmax = l->out_size > dmax ? l->out_size : dmax;
        dzero |= (size_t)dense_feeds_relu_conv(m, i);
    }
    mm.activations = sat_add(mm.activations, sat_mul(sat_mul(colmax, f), shards));
    mm.activations = sat_add(mm.activations, sat_mul(sat_mul(b, dmax), f * (2 + dzero)));
    mm.total = sat_add(mm.weights, mm.activations);
    return mm;
}

/* n bytes for a message: MiB below a GiB, else GiB. */
static void format_bytes(char *out, size_t outlen, size_t n)
{
    if (n < ((size_t)1 << 30)) snprintf(out, outlen, "%.1f MiB", (double)n / (1 << 20));
    else snprintf(out, outlen, "%.1f GiB", (double)n / (1 << 30));
}

const char *model_layer_keras_stem(LayerType type)
{
    static const char *const stem[] = {[LAYER_RESHAPE] = "reshape",
                                       [LAYER_CONV2D] = "conv2d",
                                       [LAYER_MAXPOOL] = "max_pooling2d",
                                       [LAYER_FLATTEN] = "flatten",
                                       [LAYER_DENSE] = "dense",
                                       [LAYER_DROPOUT] = "dropout",
                                       [LAYER_ACTIVATION] = "activation",
                                       [LAYER_RELU] = "re_lu",
                                       [LAYER_LEAKY_RELU] = "leaky_re_lu",
                                       [LAYER_AVGPOOL] = "average_pooling2d",
                                       [LAYER_GLOBAL_AVGPOOL] = "global_average_pooling2d",
                                       [LAYER_GLOBAL_MAXPOOL] = "global_max_pooling2d",
                                       [LAYER_RESCALING] = "rescaling",
                                       [LAYER_BATCHNORM] = "batch_normalization"};
    return stem[type];
}

void model_layer_keras_group(const Model *m, int i, char *out, size_t outlen)
{
    int k = 0;
    for (int j = 0; j < i; j++) k += m->layers[j].type == m->layers[i].type;
    const char *stem = model_layer_keras_stem(m->layers[i].type);
    if (k) snprintf(out, outlen, "%s_%d", stem, k);
    else snprintf(out, outlen, "%s", stem);
}

/* 1 when a layer of m other than `self` is called `name`. */
static int name_taken(const Model *m, const Layer *self, const char *name)
{
    for (int i = 0; i < m->num_layers; i++)
        if (&m->layers[i] != self && !strcmp(m->layers[i].name, name)) return 1;
    return 0;
}

/* Gives l (not yet counted in m->num_layers) the spec's name, which Keras would take:
 * unique, no '/', and short enough to keep. */
static int layer_set_name(const Model *m, Layer *l, const char *name, const SpecCtx *sc)
{
    if (!name[0] || strchr(name, '/') || strlen(name) >= sizeof l->name)
        return spec_fail(sc, "name", "a name of 1 to 127 bytes without '/'");
    for (int i = 0; i < m->num_layers; i++)
        if (!strcmp(m->layers[i].name, name))
            return spec_fail(sc, "name", "a name that no earlier layer has");
    memcpy(l->name, name, strlen(name) + 1);
    return 0;
}

/* Names l as Keras names a layer it is not given a name for: the class in snake case,
 * then _1, _2, ... for the later ones, past any name a layer of m already has. */
static void name_default(const Model *m, Layer *l)
{
    const char *base = model_layer_keras_stem(l->type);
    snprintf(l->name, sizeof l->name, "%s", base);
    for (int k = 1; name_taken(m, l, l->name); k++)
        snprintf(l->name, sizeof l->name, "%s_%d", base, k);
}

static int build(Model **out, const cJSON *root, const char *what, uint64_t seed,
                 const ModelBudget *budget, char *err, size_t errlen)
{
    SpecCtx sc = {.what = what, .err = err, .errlen = errlen, .index = -1};
    const cJSON *layers =
        cJSON_IsArray(root) ? root : cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) < 1)
        return spec_fail(&sc, "layers",
                         "a non-empty list of layers (kubetrain's spec), or a Keras "
                         "model.to_json() with class_name and config");
    Model *m = xcalloc(1, sizeof *m);
    int rc;
    m->input_shape[0] = m->input_shape[1] = 28;
    m->input_rank = 2;
    const cJSON *is =
        cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "input_shape") : NULL;
    if (is && (rc = spec_shape(&sc, is, "input_shape", m->input_shape, &m->input_rank))) goto err;
    if (shape_size(m->input_shape, m->input_rank) > MODEL_MAX_FLOATS) {
        rc = spec_fail(&sc, "input_shape", "at most 2^28 values per example");
        goto err;
    }
    m->layers = xcalloc((size_t)cJSON_GetArraySize(layers), sizeof *m->layers);
    int shape[3], rank;
    memcpy(shape, m->input_shape, sizeof shape);
    rank = m->input_rank;
    sc.index = 0;
    for (const cJSON *o = layers->child; o; o = o->next, sc.index++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
        sc.name = cJSON_IsString(name) && cJSON_IsString(type) ? name->valuestring : NULL;
        sc.type = sc.name ? type->valuestring : NULL;
        if (cJSON_IsString(type) &&
            (!strcmp(type->valuestring, "Input") || !strcmp(type->valuestring, "InputLayer"))) {
            if (m->num_layers > 0) {
                rc = spec_fail(&sc, "type", "Input only as the first layer");
                goto err;
            }
            if ((rc = spec_shape(&sc, cJSON_GetObjectItemCaseSensitive(o, "shape"), "shape",
                                 m->input_shape, &m->input_rank)))
                goto err;
            if (shape_size(m->input_shape, m->input_rank) > MODEL_MAX_FLOATS) {
                rc = spec_fail(&sc, "shape", "at most 2^28 values per example");
                goto err;
            }
            memcpy(shape, m->input_shape, sizeof shape);
            rank = m->input_rank;
            continue;
        }
        Layer *l = &m->layers[m->num_layers];
        if ((rc = layer_from_json(l, o, shape, rank, &sc))) goto err;
        if (sc.name && (rc = layer_set_name(m, l, sc.name, &sc))) goto err;
        memcpy(shape, l->out_shape, sizeof shape);
        rank = l->out_rank;
        m->num_layers++;
    }
    sc.index = -1;
    for (int i = 0; i < m->num_layers; i++)
        if (!m->layers[i].name[0]) name_default(m, &m->layers[i]);
    if (m->num_layers == 0 || m->layers[m->num_layers - 1].type != LAYER_DENSE ||
        m->layers[m->num_layers - 1].units < 2 || m->layers[m->num_layers - 1].out_rank != 1) {
        rc = spec_fail(&sc, "layers",
                       "a last layer Dense on a flat input with one unit per class "
                       "(>= 2)");
        goto err;
    }
    m->input_size = shape_size(m->input_shape, m->input_rank);
    m->num_classes = (size_t)m->layers[m->num_layers - 1].units;
    m->from_logits = m->layers[m->num_layers - 1].act == ACT_LINEAR;
    for (int i = 0; i < m->num_layers; i++) {
        Layer *l = &m->layers[i];
        l->w_off = m->num_params;
        l->b_off = l->w_off + l->w_count;
        l->s_off = l->b_off + l->b_count;
        m->num_params += model_layer_floats(l);
    }
    /* backward stops at the first layer with parameters: no input gradient there */
    const int first = model_first_param_layer(m);
    if (first < m->num_layers && m->layers[first].type == LAYER_CONV2D)
        m->layers[first].conv.no_dinput = 1;
    if (m->num_params > MODEL_MAX_FLOATS) {
        rc = spec_fail(&sc, "layers", "at most 2^28 parameters in all");
        goto err;
    }
    ModelMemory mm;
    if (budget &&
        (mm = model_memory(m, budget->batch, budget->state_per_param)).total > budget->limit) {
        char total[32], weights[32], acts[32], limit[32];
        format_bytes(total, sizeof total, mm.total);
        format_bytes(weights, sizeof weights, mm.weights);
        format_bytes(acts, sizeof acts, mm.activations);
        format_bytes(limit, sizeof limit, budget->limit);
        snprintf(err, errlen,
                 "%s: the model needs %s of memory (%zu parameters with their "
                 "gradients and optimizer state: %s; activations of %d examples per step: %s), "
                 "over the limit of %s",
                 what, total, m->num_params, weights, budget->batch, acts, limit);
        rc = -E2BIG;
        goto err;
    }
    m->params = xcalloc(m->num_params, sizeof(float));
    /* whole pages of its own, so that a collective can put the arena in memory shared
     * with ranks on the same host (shm.h); freed with munmap in model_free */
    m->grads_bytes = model_grads_bytes(m->num_params);
    m->grads =
        mmap(NULL, m->grads_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m->grads == MAP_FAILED)
        util_fail(KT_EXIT_DATA, "out of memory mapping the %zu-byte gradient arena",
                  m->grads_bytes);
    m->dropout_enabled = 1;
    make_signature(m);
    model_init_params(m, seed);
    *out = m;
    return 0;
err:
    model_free(m);
    return rc;
}

static int create_from_text(Model **out, const char *text, const char *what, uint64_t seed,
                            const ModelBudget *budget, char *err, size_t errlen)
{
    const char *p = text;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    cJSON *root;
    if (*p == '{' || *p == '[') {
        root = cJSON_Parse(p);
        if (!root) {
            const char *at = cJSON_GetErrorPtr();
            snprintf(err, errlen, "%s: invalid JSON near byte %td", what,
                     at && at >= p ? at - p : (ptrdiff_t)0);
            return -EINVAL;
        }
    } else if (!(root = parse_yaml(p, what, err, errlen))) {
        return -EINVAL;
    }
    if (keras_json_is_model(root)) {
        cJSON *spec = keras_json_to_spec(root, what, err, errlen);
        cJSON_Delete(root);
        if (!spec) return -EINVAL;
        root = spec;
    }
    int rc = build(out, root, what, seed, budget, err, errlen);
    cJSON_Delete(root);
    return rc;
}

/* A .keras archive: its config.json is the model, its model.weights.h5 the weights. */
static int create_from_archive(Model **out, const char *path, uint64_t seed,
                               const ModelBudget *budget, char *err, size_t errlen)
{
    char *config, what[4200];
    void *h5;
    size_t len;
    int rc = keras_import_archive(path, &config, &h5, &len, err, errlen);
    if (rc) return rc;
    snprintf(what, sizeof what, "%s: config.json", path);
    rc = create_from_text(out, config, what, seed, budget, err, errlen);
    if (!rc) {
        snprintf(what, sizeof what, "%s: model.weights.h5", path);
        rc = keras_import_weights_image(*out, (*out)->params, h5, len, what, err, errlen);
        if (rc) {
            model_free(*out);
            *out = NULL;
        }
    }
    free(config);
    free(h5);
    return rc;
}

int model_create_from_text(Model **out, const char *text, const char *what, uint64_t seed,
                           char *err, size_t errlen)
{
    return create_from_text(out, text, what, seed, NULL, err, errlen);
}

int model_create(Model **out, const char *spec, uint64_t seed, char *err, size_t errlen)
{
    return model_create_within(out, spec, seed, NULL, err, errlen);
}

int model_create_within(Model **out, const char *spec, uint64_t seed, const ModelBudget *budget,
                        char *err, size_t errlen)
{
    for (int i = 0; model_builtin_names[i]; i++)
        if (!strcmp(spec, model_builtin_names[i])) {
            char what[64];
            snprintf(what, sizeof what, "built-in model %s", spec);
            return create_from_text(out, builtin_specs[i], what, seed, budget, err, errlen);
        }
    struct stat st;
    if (stat(spec, &st) == 0 && S_ISREG(st.st_mode) && keras_import_is_archive(spec))
        return create_from_archive(out, spec, seed, budget, err, errlen);
    if (stat(spec, &st) == 0 && S_ISREG(st.st_mode)) {
        FILE *f = fopen(spec, "rb");
        if (!f || st.st_size > (1 << 20)) {
            if (f) fclose(f);
            snprintf(err, errlen, "--model %s: expected a readable model file under 1 MiB", spec);
            return -EINVAL;
        }
        char *text = xmalloc((size_t)st.st_size + 1);
        size_t n = fread(text, 1, (size_t)st.st_size, f);
        fclose(f);
        text[n] = '\0';
        int rc = create_from_text(out, text, spec, seed, budget, err, errlen);
        free(text);
        return rc;
    }
    if (strstr(spec, "layers"))
        return create_from_text(out, spec, "--model (inline spec)", seed, budget, err, errlen);
    snprintf(err, errlen,
             "--model %s: expected tutorial-cnn, tutorial-cnn-l2, cnn2, mlp, a model "
             "JSON/YAML file or an inline spec with layers",
             spec);
    return -ENOENT;
}

static void free_buffers(Model *m)
{
    for (int i = 0; m->acts && i < m->num_layers; i++) {
        free(m->acts[i]);
        free(m->masks[i]);
        free(m->argmax[i]);
        free(m->pre[i]);
        free(m->bnstats[i]);
        free(m->moments[i]);
    }
    free(m->acts);
    free(m->masks);
    free(m->argmax);
    free(m->pre);
    free(m->bnstats);
    free(m->moments);
    free(m->dcol);
    free(m->dbuf[0]);
    free(m->dbuf[1]);
    free(m->dzero);
    m->dzero = NULL;
    m->acts = NULL;
    m->masks = NULL;
    m->argmax = NULL;
    m->pre = NULL;
    m->bnstats = NULL;
    m->moments = NULL;
    m->dcol = m->dbuf[0] = m->dbuf[1] = NULL;
    m->max_batch = 0;
}

size_t model_grads_bytes(size_t num_params)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t bytes = (num_params + MODEL_STATS_FLOATS) * sizeof(float);
    return (bytes + page - 1) / page * page;
}

void model_free(Model *m)
{
    if (!m) return;
    free_buffers(m);
    free(m->layers);
    free(m->params);
    if (m->grads) munmap(m->grads, m->grads_bytes);
    for (int s = 0; s < m->num_sgrads; s++) free(m->sgrads[s]);
    free(m->sgrads);
    free(m->signature);
    free(m);
}

void model_init_params(Model *m, uint64_t seed)
{
    uint64_t rng = seed;
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        /* Keras's fans: a kernel's (in, out) times its receptive field; a vector's its
         * length (a bias, a BatchNormalization's gamma, beta and moving statistics) */
        size_t fan_in = l->b_count ? l->b_count : l->w_count, fan_out = fan_in;
        if (l->type == LAYER_CONV2D) {
            const size_t rf = (size_t)l->conv.kh * l->conv.kw;
            fan_in = rf * l->conv.c;
            fan_out = rf * l->conv.f;
        } else if (l->type == LAYER_DENSE) {
            fan_in = (size_t)l->dense_in;
            fan_out = (size_t)l->units;
        }
        const size_t c = l->s_count / 2;
        float *p = m->params;
        init_draw(&l->init[0], p + l->w_off, l->w_count, fan_in, fan_out, &rng);
        init_draw(&l->init[1], p + l->b_off, l->b_count, l->b_count, l->b_count, &rng);
        init_draw(&l->init[2], p + l->s_off, c, c, c, &rng);
        init_draw(&l->init[3], p + l->s_off + c, c, c, c, &rng);
    }
}

/* 1 when layer i is a Dense layer whose input gradient goes straight (through Flatten or
 * Reshape alone) to a Conv2D with relu: that gradient can live in m->dzero. */
static int dense_feeds_relu_conv(const Model *m, int i)
{
    if (m->layers[i].type != LAYER_DENSE) return 0;
    int j = i - 1;
    while (j >= 0 && (m->layers[j].type == LAYER_FLATTEN || m->layers[j].type == LAYER_RESHAPE))
        j--;
    return j >= 0 && m->layers[j].type == LAYER_CONV2D && m->layers[j].act == ACT_RELU;
}

/* 1 when layer i is a BatchNormalization followed by a relu layer (ReLU, or Activation
 * relu): the two run as one pass (batchnorm_*_relu, layers.h), the batchnorm writing the
 * relu's output and its gradient reading the relu's, so the batchnorm's own output is
 * never written (m->acts[i] NULL) and the relu layer does nothing. */
static int batchnorm_feeds_relu(const Model *m, int i)
{
    if (m->layers[i].type != LAYER_BATCHNORM || i + 1 >= m->num_layers) return 0;
    const Layer *next = &m->layers[i + 1];
    return (next->type == LAYER_RELU || next->type == LAYER_ACTIVATION) && next->act == ACT_RELU;
}

void model_reserve(Model *m, int max_batch)
{
    if (max_batch <= m->max_batch) return;
    free_buffers(m);
    const size_t b = (size_t)max_batch;
    size_t dmax = m->input_size, colmax = 0;
    m->acts = xcalloc((size_t)m->num_layers, sizeof *m->acts);
    m->masks = xcalloc((size_t)m->num_layers, sizeof *m->masks);
    m->argmax = xcalloc((size_t)m->num_layers, sizeof *m->argmax);
    m->pre = xcalloc((size_t)m->num_layers, sizeof *m->pre);
    m->bnstats = xcalloc((size_t)m->num_layers, sizeof *m->bnstats);
    m->moments = xcalloc((size_t)m->num_layers, sizeof *m->moments);
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        if (l->type != LAYER_RESHAPE && l->type != LAYER_FLATTEN && !batchnorm_feeds_relu(m, i))
            m->acts[i] = xmalloc(b * l->out_size * sizeof(float));
        if (l->type == LAYER_DROPOUT) m->masks[i] = xmalloc(b * l->out_size * sizeof(float));
        if (activation_needs_input(l->act)) m->pre[i] = xmalloc(b * l->out_size * sizeof(float));
        if (l->type == LAYER_BATCHNORM) m->bnstats[i] = xmalloc(3 * l->s_count / 2 * sizeof(float));
        if (conv_feeds_batchnorm(m, i))
            m->moments[i] = xmalloc(b * 2 * (size_t)l->conv.f * sizeof(double));
        if (l->type == LAYER_MAXPOOL || l->type == LAYER_GLOBAL_MAXPOOL)
            m->argmax[i] = xmalloc(b * l->out_size * sizeof(int32_t));
        if (l->type == LAYER_CONV2D) {
            /* a shard's scratch: conv_scratch_size(g, 1) per example it runs, of which
             * only a block is touched */
            const size_t c = conv_scratch_size(&l->conv, 1);
            colmax = c > colmax ? c : colmax;
        }
        dmax = l->out_size > dmax ? l->out_size : dmax;
    }
    m->dcol = xmalloc((colmax ? b * colmax : 1) * sizeof(float));
    m->dmax = dmax;
    m->colmax = colmax;
    m->dbuf[0] = xmalloc(b * dmax * sizeof(float));
    m->dbuf[1] = xmalloc(b * dmax * sizeof(float));
    for (int i = 0; i < m->num_layers && !m->dzero; i++)
        if (dense_feeds_relu_conv(m, i)) m->dzero = xcalloc(b * dmax, sizeof(float));
    m->max_batch = max_batch;
}

/* ----------------------------------------------------------------------------
 * Forward, loss, backward */

/* Threads. A step runs layer by layer; a layer whose work grows with the examples and
 * not with its weights (Conv2D with its im2col, the pooling layers, Dropout, Rescaling
 * and the activation layers) is cut into shards of consecutive examples that the pool's
 * threads run in parallel (parallel_for), each shard with single-threaded products; a
 * Dense layer runs on the whole batch, its products cut by gemm() into blocks of the
 * weight matrix, so that its weights are read and its gradient written once, not once
 * per shard; a BatchNormalization, whose statistics span the batch, runs on the whole
 * batch too and cuts its passes itself (layers.h). Shards share every per-example
 * buffer, each using its own rows. A sharded Conv2D's kernel gradient is summed over
 * the shards in shard order (shard 0 in grads, the others in sgrads), so a run is
 * reproducible for a given thread count. Dropout draws the same masks whatever the
 * shards: draw j of the step's sequence is made on its own. */

/* The first example of shard s of `shards` over b examples. */
static int shard_lo(int b, int shards, int s)
{
    return (int)((long)b * s / shards);
}

/* The output of layer i for the examples from lo on: its own buffer, or what it
 * reshapes. */
static const float *layer_out(const Model *m, const float *x, int i, int lo)
{
    for (; i >= 0; i--)
        if (m->acts[i]) return m->acts[i] + (size_t)lo * m->layers[i].out_size;
    return x + (size_t)lo * m->input_size;
}

static int layer_sharded(const Layer *l)
{
    return l->type == LAYER_CONV2D || l->type == LAYER_MAXPOOL || l->type == LAYER_DROPOUT ||
           l->type == LAYER_AVGPOOL || l->type == LAYER_GLOBAL_AVGPOOL ||
           l->type == LAYER_GLOBAL_MAXPOOL || l->type == LAYER_RESCALING ||
           model_activation_layer(l);
}

/* One pass's state, shared by the tasks of a layer. */
typedef struct {
    Model *m;
    const float *x;
    int b, shards, training;
    uint64_t dropout_seed;
    int layer;
    uint64_t draws; /* forward: dropout draws of the whole batch in the layers before */
    float *d, *din; /* backward: the layer's output gradient and its input gradient */
    float sgd_lr; /* > 0: plain SGD folded into the Dense layers' backward */
    int replicas;
    const BnSync *sync; /* NULL: the synchronized BatchNormalizations as the others */
} Pass;

/* The sums of layer l's pass: NULL unless it is synchronized and the step has others. */
static const BnSync *layer_sync(const Pass *p, const Layer *l)
{
    return l->synchronized ? p->sync : NULL;
}

/* BatchNormalization of layer p->layer over the whole batch: in training with the
 * batch's statistics (the global batch's when synchronized: layer_sync), which go to the
 * layer's state slots of grads for model_update_moving, else with the moving ones. Into
 * its output, or with the relu after it into the relu's (batchnorm_feeds_relu). Returns
 * 0 or the sum's negative errno. */
static int batchnorm_forward(const Pass *p)
{
    Model *m = p->m;
    const int i = p->layer, relu = batchnorm_feeds_relu(m, i);
    const Layer *l = &m->layers[i];
    const float *in = layer_out(m, p->x, i - 1, 0);
    const size_t c = l->s_count / 2, rows = (size_t)p->b * l->out_size / c;
    float *out = m->acts[relu ? i + 1 : i];
    const float *gamma = l->w_count ? m->params + l->w_off : NULL;
    const float *beta = l->b_count ? m->params + l->b_off : NULL;
    if (!p->training) {
        const float *mmean = m->params + l->s_off, *mvar = mmean + c;
        if (relu)
            batchnorm_forward_infer_relu(out, in, gamma, beta, mmean, mvar, rows, (int)c,
                                         l->epsilon);
        else batchnorm_forward_infer(out, in, gamma, beta, mmean, mvar, rows, (int)c, l->epsilon);
        return 0;
    }
    const BnSync *sync = layer_sync(p, l);
    float *st = m->bnstats[i], *g = m->grads + l->s_off;
    /* after a Conv2D, the statistics from the moments it wrote (conv_feeds_batchnorm) */
    const BnMoments mom = {.v = i > 0 ? m->moments[i - 1] : NULL, .examples = (size_t)p->b};
    int rc = batchnorm_forward_train_sync(out, st, st + c, st + 2 * c, in, gamma, beta, rows,
                                          (int)c, l->epsilon, relu, sync, mom.v ? &mom : NULL);
    if (rc) return rc;
    /* each rank's statistics over the ranks, which the all-reduce sums into their mean;
     * synchronized, the global batch's (the same bits on every rank) from the first alone,
     * which it sums into exactly them */
    for (size_t j = 0; j < 2 * c; j++)
        g[j] = !sync ? st[j] / (float)p->replicas : sync->first ? st[j] : 0.0f;
    return 0;
}

/* Runs layer p->layer on examples lo..lo+cnt-1. The last layer's softmax is left out:
 * the loss takes the logits (as Keras's TensorFlow backend does for a softmax output),
 * and argmax is the same on both. */
static void forward_layer(const Pass *p, int lo, int cnt)
{
    Model *m = p->m;
    const int i = p->layer;
    const Layer *l = &m->layers[i];
    const float *in = layer_out(m, p->x, i - 1, lo);
    float *out = m->acts[i] ? m->acts[i] + (size_t)lo * l->out_size : NULL; /* NULL: reshapes */
    const size_t at = (size_t)lo * l->out_size, n = (size_t)cnt * l->out_size;
    const float *w = m->params + l->w_off, *bias = l->b_count ? m->params + l->b_off : NULL;
    switch (l->type) {
    case LAYER_RESHAPE:
    case LAYER_FLATTEN: return;
    case LAYER_CONV2D: {
        /* the activation folded in where it is a relu; the moments for a batchnorm after
         * it, in training */
        double *mom =
            p->training && m->moments[i] ? m->moments[i] + (size_t)lo * 2 * l->conv.f : NULL;
        conv2d_forward_moments(out, mom, m->dcol + (size_t)lo * m->colmax, in, w, bias, &l->conv,
                               cnt, l->act == ACT_RELU);
        if (l->act == ACT_RELU) return;
        break;
    }
    case LAYER_DENSE:
        dense_forward(out, in, w, bias, cnt * l->dense_rows, l->dense_in, l->units);
        break;
    case LAYER_MAXPOOL:
    case LAYER_GLOBAL_MAXPOOL: maxpool_forward(out, m->argmax[i] + at, in, &l->pool, cnt); break;
    case LAYER_AVGPOOL:
    case LAYER_GLOBAL_AVGPOOL: avgpool_forward(out, in, &l->pool, cnt); break;
    case LAYER_RESCALING: rescaling_forward(out, in, n, l->scale, l->offset); break;
    case LAYER_BATCHNORM: return; /* forward() runs it: batchnorm_forward */
    case LAYER_ACTIVATION:
    case LAYER_RELU: memcpy(out, in, n * sizeof *out); break;
    case LAYER_LEAKY_RELU:
        memcpy(out, in, n * sizeof *out);
        leaky_relu_forward(out, n, l->slope);
        return;
    case LAYER_DROPOUT:
        memcpy(out, in, n * sizeof *out);
        if (p->training && m->dropout_enabled && l->rate > 0.0f) {
            uint64_t rng = util_rand_skip(p->dropout_seed, p->draws + at);
            dropout_forward(out, m->masks[i] + at, n, l->rate, &rng);
        }
        break;
    }
    int last = i == m->num_layers - 1;
    /* per row of the last axis: a softmax on a rank > 1 output normalises each */
    size_t cols = l->type == LAYER_CONV2D ? l->out_size : (size_t)l->out_shape[l->out_rank - 1];
    size_t rows = n / cols;
    if (m->pre[i]) memcpy(m->pre[i] + at, out, n * sizeof *out);
    if (!(last && l->act == ACT_SOFTMAX)) activation_forward(out, rows, cols, l->act);
}

static void forward_task(void *arg, int s)
{
    const Pass *p = arg;
    const int lo = shard_lo(p->b, p->shards, s);
    forward_layer(p, lo, shard_lo(p->b, p->shards, s + 1) - lo);
}

/* Forward over the whole batch, layer by layer. Returns 0, or a synchronized
 * BatchNormalization's negative errno, there. */
static int forward(Pass *p)
{
    Model *m = p->m;
    p->draws = 0;
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        int rc;
        p->layer = i;
        if (i > 0 && batchnorm_feeds_relu(m, i - 1)) continue; /* the batchnorm did it */
        if (l->type == LAYER_BATCHNORM) {
            if ((rc = batchnorm_forward(p))) return rc;
        } else if (p->shards > 1 && layer_sharded(l)) parallel_for(p->shards, forward_task, p);
        else forward_layer(p, 0, p->b);
        if (l->type == LAYER_DROPOUT && p->training && m->dropout_enabled && l->rate > 0.0f)
            p->draws += (uint64_t)p->b * l->out_size;
    }
    return 0;
}

static double loss_of(Model *m, float *dout, int *correct, const float *out, const int32_t *y,
                      int b, float scale)
{
    const Layer *last = &m->layers[m->num_layers - 1];
    if (last->act == ACT_LINEAR || last->act == ACT_SOFTMAX)
        return loss_sce_logits(dout, correct, out, y, b, (int)m->num_classes, scale);
    return loss_sce_probs(dout, correct, out, y, b, (int)m->num_classes, scale);
}

double model_regularization(const Model *m)
{
    double r = 0.0;
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        if (l->l1 == 0.0f && l->l2 == 0.0f) continue;
        double s1 = 0.0, s2 = 0.0;
        const float *w = m->params + l->w_off;
        for (size_t j = 0; j < l->w_count; j++) s1 += fabs((double)w[j]), s2 += (double)w[j] * w[j];
        r += (double)l->l1 * s1 + (double)l->l2 * s2;
    }
    return r;
}

/* Whether layer l's kernel is updated inside its backward (Pass.sgd_lr). */
static int kernel_folded(const Pass *p, const Layer *l)
{
    /* an L1 term's gradient is no multiple of the kernel: not foldable into the product */
    return p->sgd_lr > 0.0f && l->type == LAYER_DENSE && l->l1 == 0.0f;
}

/* The L2 term's gradient is this times the kernel: 2 * l2 / replicas (the loss is scaled by
 * tf.nn.scale_regularization_loss). */
static float l2_factor(const Pass *p, const Layer *l)
{
    return 2.0f * l->l2 / (float)p->replicas;
}

/* The regularization gradient of kernel weight w: k2 * w + k1 * sign(w), k1 = l1 /
 * replicas (sign(0) = 0, TensorFlow's gradient of abs at 0). */
static float reg_grad(float w, float k1, float k2)
{
    return k2 * w + (w > 0.0f ? k1 : w < 0.0f ? -k1 : 0.0f);
}

/* 1 when layer i is a Conv2D (linear or relu) followed by a BatchNormalization: the
 * convolution writes its output's moments per example for the batchnorm's statistics
 * (conv2d_forward_moments, layers.h) into m->moments[i]. */
static int conv_feeds_batchnorm(const Model *m, int i)
{
    const Layer *l = &m->layers[i];
    return l->type == LAYER_CONV2D && (l->act == ACT_LINEAR || l->act == ACT_RELU) &&
           i + 1 < m->num_layers && m->layers[i + 1].type == LAYER_BATCHNORM;
}

/* Backward of layer p->layer over examples lo..lo+cnt-1 (p->d and p->din hold the whole
 * batch), its parameter gradient into g (laid out as the arena). */
static void backward_layer(const Pass *p, int lo, int cnt, float *g)
{
    Model *m = p->m;
    const int i = p->layer;
    const Layer *l = &m->layers[i];
    const float *in = layer_out(m, p->x, i - 1, lo), *out = layer_out(m, p->x, i, lo);
    float *d = p->d + (size_t)lo * l->out_size;
    float *din = p->din ? p->din + (size_t)lo * l->in_size : NULL;
    const size_t at = (size_t)lo * l->out_size;
    const float *w = m->params + l->w_off;
    float *dw = g + l->w_off, *db = l->b_count ? g + l->b_off : NULL;
    int last = i == m->num_layers - 1;
    const float *pre = m->pre[i] ? m->pre[i] + at : NULL;
    if (l->type == LAYER_CONV2D && l->act != ACT_RELU && !(last && l->act == ACT_SOFTMAX))
        activation_backward(d, out, pre, (size_t)cnt, l->out_size, l->act);
    if (l->type == LAYER_DENSE && !(last && l->act == ACT_SOFTMAX))
        activation_backward(d, out, pre, (size_t)cnt * (size_t)l->dense_rows, (size_t)l->units,
                            l->act);
    if (l->type == LAYER_ACTIVATION || l->type == LAYER_RELU) {
        const size_t cols = (size_t)l->out_shape[l->out_rank - 1];
        activation_backward(d, out, pre, (size_t)cnt * l->out_size / cols, cols, l->act);
    }
    if (l->type == LAYER_LEAKY_RELU)
        leaky_relu_backward(d, out, (size_t)cnt * l->out_size, l->slope);
    switch (l->type) {
    case LAYER_RESHAPE:
    case LAYER_FLATTEN:
    case LAYER_ACTIVATION:
    case LAYER_RELU:
    case LAYER_LEAKY_RELU: break; /* d scaled in place above */
    case LAYER_DROPOUT:
        if (m->dropout_enabled && l->rate > 0.0f)
            dropout_backward(d, m->masks[i] + at, (size_t)cnt * l->out_size);
        break;
    case LAYER_MAXPOOL:
    case LAYER_GLOBAL_MAXPOOL: maxpool_backward(din, d, m->argmax[i] + at, &l->pool, cnt); break;
    case LAYER_AVGPOOL:
    case LAYER_GLOBAL_AVGPOOL: avgpool_backward(din, d, &l->pool, cnt); break;
    case LAYER_RESCALING: rescaling_backward(d, (size_t)cnt * l->out_size, l->scale); break;
    case LAYER_BATCHNORM: break; /* step() runs it: batchnorm_backward_layer */
    case LAYER_DENSE:
        if (kernel_folded(p, l)) {
            const float decay = 1.0f - p->sgd_lr * l2_factor(p, l);
            dense_backward_sgd(din, db, d, in, m->params + l->w_off, cnt * l->dense_rows,
                               l->dense_in, l->units, p->sgd_lr, decay, din && din == m->dzero);
        } else {
            dense_backward(din, dw, db, d, in, w, cnt * l->dense_rows, l->dense_in, l->units,
                           din && din == m->dzero);
        }
        break;
    case LAYER_CONV2D:
        if (l->act == ACT_RELU) /* the activation's gradient folded in */
            conv2d_backward_relu(din, dw, db, m->dcol + (size_t)lo * m->colmax, d, out, in, w,
                                 &l->conv, cnt, p->d == m->dzero);
        else
            conv2d_backward(din, dw, db, m->dcol + (size_t)lo * m->colmax, d, in, w, &l->conv, cnt);
        break;
    }
}

/* Backward of BatchNormalization p->layer over the whole batch, its gamma and beta
 * gradients into grads; with the relu after it, from that relu output's gradient
 * (batchnorm_feeds_relu). Returns 0 or the sum's negative errno. */
static int batchnorm_backward_layer(const Pass *p)
{
    Model *m = p->m;
    const int i = p->layer;
    const Layer *l = &m->layers[i];
    const size_t c = l->s_count / 2, rows = (size_t)p->b * l->out_size / c;
    const float *st = m->bnstats[i], *gamma = l->w_count ? m->params + l->w_off : NULL;
    float *dgamma = l->w_count ? m->grads + l->w_off : NULL;
    float *dbeta = l->b_count ? m->grads + l->b_off : NULL;
    const float *in = layer_out(m, p->x, i - 1, 0);
    if (batchnorm_feeds_relu(m, i)) {
        const float *beta = l->b_count ? m->params + l->b_off : NULL;
        return batchnorm_backward_relu_sync(p->din, dgamma, dbeta, p->d, in, st, st + 2 * c, gamma,
                                            beta, rows, (int)c, layer_sync(p, l));
    }
    return batchnorm_backward_sync(p->din, dgamma, dbeta, p->d, NULL, in, st, st + 2 * c, gamma,
                                   rows, (int)c, layer_sync(p, l));
}

static void backward_task(void *arg, int s)
{
    const Pass *p = arg;
    Model *m = p->m;
    const Layer *l = &m->layers[p->layer];
    const int lo = shard_lo(p->b, p->shards, s);
    /* shard s > 0 writes the layer's parameter gradient at the start of its scratch */
    float *g = s ? m->sgrads[s - 1] - l->w_off : m->grads;
    backward_layer(p, lo, shard_lo(p->b, p->shards, s + 1) - lo, g);
}

/* Adds the other shards' gradients of layer i onto grads (shards > 1: it ran sharded),
 * then the regularization term, and hands the slice to on_ready. With the update
 * folded in (p->sgd_lr), applies it to what the backward left: the bias of a Dense
 * layer, the whole slice of any other. */
static void finish_layer(const Pass *p, int i, int shards, GradReadyFn on_ready, void *ctx)
{
    Model *m = p->m;
    const Layer *l = &m->layers[i];
    float *g = m->grads + l->w_off;
    const size_t n = l->w_count + l->b_count;
    for (int s = 1; s < shards; s++) {
        const float *o = m->sgrads[s - 1];
        for (size_t k = 0; k < n; k++) g[k] += o[k];
    }
    if (p->sgd_lr > 0.0f) {
        const size_t from = kernel_folded(p, l) ? l->w_count : 0;
        float *w = m->params + l->w_off;
        const float lr = p->sgd_lr, k1 = l->l1 / (float)p->replicas, k2 = l2_factor(p, l);
        for (size_t q = from; q < n; q++) {
            if (q < l->w_count) g[q] += reg_grad(w[q], k1, k2);
            w[q] -= lr * g[q];
        }
        return;
    }
    if (l->l1 != 0.0f || l->l2 != 0.0f) {
        const float k1 = l->l1 / (float)p->replicas, k2 = l2_factor(p, l);
        const float *w = m->params + l->w_off;
        for (size_t q = 0; q < l->w_count; q++) g[q] += reg_grad(w[q], k1, k2);
    }
    if (on_ready) on_ready(ctx, l->w_off, n + l->s_count);
}

/* The largest parameter slice of a layer that runs sharded: the size of each sgrads. */
static size_t sharded_params_max(const Model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        if (layer_sharded(l) && l->w_count + l->b_count > n) n = l->w_count + l->b_count;
    }
    return n;
}

/* Forward, loss and backward of one step (model_step_sync, model_step_sgd). Returns 0
 * or a synchronized BatchNormalization's negative errno, the step abandoned there. */
static int step(Pass *p, const int32_t *y, int global_batch, GradReadyFn on_ready, void *ctx,
                StepStats *st)
{
    Model *m = p->m;
    const float *x = p->x;
    const int local_batch = p->b;
    if (p->shards - 1 > m->num_sgrads) {
        if (!m->sgrads) m->sgrads = xcalloc(GEMM_MAX_SHARDS - 1, sizeof *m->sgrads);
        const size_t n = sharded_params_max(m);
        for (int s = m->num_sgrads; s < p->shards - 1; s++)
            m->sgrads[s] = xmalloc((n ? n : 1) * sizeof(float));
        m->num_sgrads = p->shards - 1;
    }
    int rc = forward(p);
    if (rc) return rc;
    int correct = 0;
    const float *logits = layer_out(m, x, m->num_layers - 1, 0);
    double loss =
        loss_of(m, m->dbuf[0], &correct, logits, y, local_batch, 1.0f / (float)global_batch);
    st->loss = loss / global_batch + model_regularization(m) / p->replicas;
    st->correct = correct;
    st->count = local_batch;

    /* the layers before the first with parameters need no input gradient */
    const int first_param = model_first_param_layer(m);
    int cur = 0;
    p->d = m->dbuf[0];
    for (int i = m->num_layers - 1; i >= first_param; i--) {
        const Layer *l = &m->layers[i];
        if (l->type == LAYER_RESHAPE || l->type == LAYER_FLATTEN) continue;
        if (i > 0 && batchnorm_feeds_relu(m, i - 1))
            continue; /* the batchnorm takes its gradient */
        p->layer = i;
        /* dropout, rescaling and activation layers scale d in place; the others write
         * their input's gradient */
        p->din = i > first_param && l->type != LAYER_DROPOUT && l->type != LAYER_RESCALING &&
                         !model_activation_layer(l)
                     ? m->dbuf[1 - cur]
                     : NULL;
        /* a Dense layer's for a relu Conv2D goes to the buffer kept zero (model.h) */
        const int to_zero = p->din && m->dzero && dense_feeds_relu_conv(m, i);
        if (to_zero) p->din = m->dzero;
        int sharded = p->shards > 1 && layer_sharded(l);
        if (l->type == LAYER_BATCHNORM) {
            if ((rc = batchnorm_backward_layer(p))) return rc;
        } else if (sharded) parallel_for(p->shards, backward_task, p);
        else backward_layer(p, 0, local_batch, m->grads);
        if (model_layer_floats(l)) finish_layer(p, i, sharded ? p->shards : 1, on_ready, ctx);
        if (p->din) {
            p->d = p->din;
            if (!to_zero) cur = 1 - cur; /* with the zero buffer both dbufs are free */
        }
    }
    return 0;
}

int model_step_sync(Model *m, const float *x, const int32_t *y, int local_batch, int global_batch,
                    int num_replicas, uint64_t dropout_seed, const BnSync *sync,
                    GradReadyFn on_ready, void *ctx, StepStats *st)
{
    Pass p = {.m = m,
              .x = x,
              .b = local_batch,
              .shards = gemm_batch_shards(local_batch),
              .training = 1,
              .dropout_seed = dropout_seed,
              .replicas = num_replicas,
              .sync = sync};
    return step(&p, y, global_batch, on_ready, ctx, st);
}

void model_step(Model *m, const float *x, const int32_t *y, int local_batch, int global_batch,
                int num_replicas, uint64_t dropout_seed, GradReadyFn on_ready, void *ctx,
                StepStats *st)
{
    /* no sync: nothing can fail */
    (void)model_step_sync(m, x, y, local_batch, global_batch, num_replicas, dropout_seed, NULL,
                          on_ready, ctx, st);
}

void model_update_moving(Model *m)
{
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        float *mv = m->params + l->s_off, *g = m->grads + l->s_off;
        for (size_t j = 0; j < l->s_count; j++) {
            mv[j] = mv[j] * l->momentum + g[j] * (1.0f - l->momentum);
            g[j] = 0.0f;
        }
    }
}

void model_step_sgd(Model *m, const float *x, const int32_t *y, int batch, uint64_t dropout_seed,
                    float lr, StepStats *st)
{
    Pass p = {.m = m,
              .x = x,
              .b = batch,
              .shards = gemm_batch_shards(batch),
              .training = 1,
              .dropout_seed = dropout_seed,
              .sgd_lr = lr,
              .replicas = 1};
    (void)step(&p, y, batch, NULL, NULL, st); /* no sync: nothing can fail */
}

void model_evaluate(Model *m, const float *x, const int32_t *y, int b, StepStats *st)
{
    Pass p = {.m = m, .x = x, .b = b, .shards = gemm_batch_shards(b)};
    (void)forward(&p); /* inference: no sums, nothing can fail */
    int correct = 0;
    st->loss = loss_of(m, NULL, &correct, layer_out(m, x, m->num_layers - 1, 0), y, b, 1.0f);
    st->correct = correct;
    st->count = b;
}
