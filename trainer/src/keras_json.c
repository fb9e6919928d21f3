#include "keras_json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "initializer.h"
#include "model.h"

/* What the trainer implements, named in the messages. */
#define KJ_LAYERS                                                                                  \
    "InputLayer, Reshape, Rescaling, Conv2D, MaxPooling2D, AveragePooling2D, "                     \
    "GlobalAveragePooling2D, GlobalMaxPooling2D, Flatten, Dense, Dropout, Activation, ReLU, "      \
    "LeakyReLU, BatchNormalization"

typedef struct {
    const char *what;      /* the file */
    int index;             /* the Keras layer, -1: the model */
    const char *name, *cls;
    char *err;
    size_t errlen;
} KCtx;

static int kfail(const KCtx *k, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int kfail(const KCtx *k, const char *field, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (k->index < 0)
        snprintf(k->err, k->errlen, "%s: %s%s%s", k->what, field ? field : "", field ? ": " : "",
                 msg);
    else
        snprintf(k->err, k->errlen, "%s: layers[%d] \"%s\" (%s)%s%s: %s", k->what, k->index,
                 k->name, k->cls, field ? "." : "", field ? field : "", msg);
    return -1;
}

static const cJSON *get(const cJSON *o, const char *key)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

static int is_str(const cJSON *v, const char *s)
{
    return cJSON_IsString(v) && !strcmp(v->valuestring, s);
}

/* ----------------------------------------------------------------------------
 * The fields of each layer class, and what each kind of field may hold */

typedef enum {
    F_NAME,          /* the layer's name: kept for messages */
    F_COPY,          /* handed to the spec as it is; model.c checks its type and range */
    F_BOOL,          /* any boolean: trainable on a layer without weights */
    F_TRAINABLE,     /* true: the trainer trains every weight */
    F_DTYPE,         /* float32, as a string or a DTypePolicy */
    F_NULL,          /* null: constraints, other regularizers, LoRA, quantization */
    F_FALSE,         /* false: sparse, ragged, optional inputs; renorm */
    F_ONE,           /* 1 or [1, 1]: dilation_rate, groups */
    F_CHANNELS_LAST, /* data_format channels_last (or null: Keras's default) */
    F_PADDING,       /* valid or same */
    F_ACTIVATION,
    F_INIT,        /* an initializer (initializer.h): handed to the spec as it is */
    F_NUMBER,      /* any number: renorm_momentum, unused without renorm */
    F_REGULARIZER, /* L1, L2, L1L2 */
    F_SEED,        /* null or an integer: the trainer draws from its own --seed */
    F_SHAPE,       /* the batch shape of the model's input */
    F_SLOPE,       /* LeakyReLU's slope: Keras 3's negative_slope, tf-keras's alpha */
} FieldKind;

typedef struct {
    const char *key;
    FieldKind kind;
} Field;

/* Fields every class has. */
static const Field common_fields[] = {
    {"name", F_NAME}, {"dtype", F_DTYPE}, {"batch_input_shape", F_SHAPE}, {NULL, F_NAME}};

static const Field input_fields[] = {{"batch_shape", F_SHAPE},
                                     {"sparse", F_FALSE},
                                     {"ragged", F_FALSE},
                                     {"optional", F_FALSE},
                                     {NULL, F_NAME}};
static const Field reshape_fields[] = {
    {"target_shape", F_COPY}, {"trainable", F_BOOL}, {NULL, F_NAME}};
static const Field conv_fields[] = {{"filters", F_COPY},
                                    {"kernel_size", F_COPY},
                                    {"strides", F_COPY},
                                    {"padding", F_PADDING},
                                    {"data_format", F_CHANNELS_LAST},
                                    {"dilation_rate", F_ONE},
                                    {"groups", F_ONE},
                                    {"activation", F_ACTIVATION},
                                    {"use_bias", F_COPY},
                                    {"kernel_initializer", F_INIT},
                                    {"bias_initializer", F_INIT},
                                    {"kernel_regularizer", F_REGULARIZER},
                                    {"bias_regularizer", F_NULL},
                                    {"activity_regularizer", F_NULL},
                                    {"kernel_constraint", F_NULL},
                                    {"bias_constraint", F_NULL},
                                    {"trainable", F_TRAINABLE},
                                    {NULL, F_NAME}};
static const Field pool_fields[] = {{"pool_size", F_COPY},  {"strides", F_COPY},
                                    {"padding", F_PADDING}, {"data_format", F_CHANNELS_LAST},
                                    {"trainable", F_BOOL},  {NULL, F_NAME}};
static const Field global_pool_fields[] = {
    {"data_format", F_CHANNELS_LAST}, {"keepdims", F_COPY}, {"trainable", F_BOOL}, {NULL, F_NAME}};
/* model.c refuses a per-channel list, naming the field */
static const Field rescaling_fields[] = {
    {"scale", F_COPY}, {"offset", F_COPY}, {"trainable", F_BOOL}, {NULL, F_NAME}};
static const Field flatten_fields[] = {
    {"data_format", F_CHANNELS_LAST}, {"trainable", F_BOOL}, {NULL, F_NAME}};
static const Field dense_fields[] = {{"units", F_COPY},
                                     {"activation", F_ACTIVATION},
                                     {"use_bias", F_COPY},
                                     {"kernel_initializer", F_INIT},
                                     {"bias_initializer", F_INIT},
                                     {"kernel_regularizer", F_REGULARIZER},
                                     {"bias_regularizer", F_NULL},
                                     {"activity_regularizer", F_NULL},
                                     {"kernel_constraint", F_NULL},
                                     {"bias_constraint", F_NULL},
                                     {"lora_rank", F_NULL},
                                     {"quantization_config", F_NULL},
                                     {"trainable", F_TRAINABLE},
                                     {NULL, F_NAME}};
static const Field dropout_fields[] = {{"rate", F_COPY},
                                       {"seed", F_SEED},
                                       {"noise_shape", F_NULL},
                                       {"trainable", F_BOOL},
                                       {NULL, F_NAME}};

static const Field activation_fields[] = {
    {"activation", F_ACTIVATION}, {"trainable", F_BOOL}, {NULL, F_NAME}};
/* model.c refuses values other than the plain relu's, naming the field */
static const Field relu_fields[] = {{"negative_slope", F_COPY},
                                    {"max_value", F_COPY},
                                    {"threshold", F_COPY},
                                    {"trainable", F_BOOL},
                                    {NULL, F_NAME}};
static const Field leaky_fields[] = {
    {"negative_slope", F_SLOPE}, {"alpha", F_SLOPE}, {"trainable", F_BOOL}, {NULL, F_NAME}};

/* synchronized is handed on: model.c checks it (true: model_step_sync) */
static const Field batchnorm_fields[] = {{"axis", F_COPY},
                                         {"momentum", F_COPY},
                                         {"epsilon", F_COPY},
                                         {"center", F_COPY},
                                         {"scale", F_COPY},
                                         {"synchronized", F_COPY},
                                         {"beta_initializer", F_INIT},
                                         {"gamma_initializer", F_INIT},
                                         {"moving_mean_initializer", F_INIT},
                                         {"moving_variance_initializer", F_INIT},
                                         {"beta_regularizer", F_NULL},
                                         {"gamma_regularizer", F_NULL},
                                         {"beta_constraint", F_NULL},
                                         {"gamma_constraint", F_NULL},
                                         {"renorm", F_FALSE},
                                         {"renorm_clipping", F_NULL},
                                         {"renorm_momentum", F_NUMBER},
                                         {"trainable", F_TRAINABLE},
                                         {NULL, F_NAME}};

/* The Keras classes the trainer implements, each the spec type of the same name. */
static const struct {
    const char *cls;
    const Field *fields;
} classes[] = {
    {"InputLayer", input_fields},
    {"Reshape", reshape_fields},
    {"Conv2D", conv_fields},
    {"MaxPooling2D", pool_fields},
    {"Flatten", flatten_fields},
    {"Dense", dense_fields},
    {"Dropout", dropout_fields},
    {"Activation", activation_fields},
    {"ReLU", relu_fields},
    {"LeakyReLU", leaky_fields},
    {"AveragePooling2D", pool_fields},
    {"GlobalAveragePooling2D", global_pool_fields},
    {"GlobalMaxPooling2D", global_pool_fields},
    {"Rescaling", rescaling_fields},
    {"BatchNormalization", batchnorm_fields},
};

static const Field *field_of(const Field *fields, const char *key)
{
    for (; fields->key; fields++)
        if (!strcmp(fields->key, key)) return fields;
    return NULL;
}

/* float32 as tf-keras writes it ("float32") or Keras 3 (a DTypePolicy object); null is
 * Keras's default policy, float32. */
static int check_dtype(const KCtx *k, const char *key, const cJSON *v)
{
    if (!v || cJSON_IsNull(v) || is_str(v, "float32")) return 0;
    const cJSON *cls = get(v, "class_name"), *name = get(get(v, "config"), "name");
    if ((is_str(cls, "DTypePolicy") || is_str(cls, "FloatDTypePolicy")) && is_str(name, "float32"))
        return 0;
    return kfail(k, key, "the trainer computes in float32 only (a string or DTypePolicy %s)",
                 "\"float32\"; mixed precision and quantized policies are not supported");
}

/* An activation by name; the spec takes the same names. */
static int check_activation(const KCtx *k, const char *key, const cJSON *v)
{
    if (!v || cJSON_IsNull(v)) return 0;
    Activation act;
    if (cJSON_IsString(v) && !model_activation_parse(v->valuestring, &act)) return 0;
    return kfail(k, key, "%s%s%s is not supported: the trainer has " MODEL_ACTIVATIONS,
                 cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : "this value",
                 cJSON_IsString(v) ? "\"" : "");
}

/* The class an initializer or regularizer names: an object {class_name, config} as both
 * dialects write it, or a string ("glorot_uniform"). *config: its config or NULL. */
static const char *object_class(const cJSON *v, const cJSON **config)
{
    *config = NULL;
    if (cJSON_IsString(v)) return v->valuestring;
    const cJSON *cls = get(v, "class_name");
    if (!cJSON_IsString(cls)) return NULL;
    *config = get(v, "config");
    return cls->valuestring;
}

/* An initializer the trainer draws as Keras defines it (initializer.h), into the spec. */
static int convert_initializer(const KCtx *k, const char *key, const cJSON *v, cJSON *spec)
{
    char why[512];
    Init init;
    if (init_parse(v, &init, why, sizeof why)) return kfail(k, key, "%s", why);
    cJSON_AddItemToObject(spec, key, cJSON_Duplicate(v, 1));
    return 0;
}

/* A factor of a regularizer's config: a non-negative number. */
static int is_factor(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0.0 && isfinite(v->valuedouble);
}

/* L1(l1), L2(l2) or L1L2(l1, l2) into the spec's {"l1": F, "l2": F}. */
static int convert_regularizer(const KCtx *k, const char *key, const cJSON *v, cJSON *spec)
{
    if (!v || cJSON_IsNull(v)) return 0;
    const cJSON *config;
    const char *cls = object_class(v, &config);
    const cJSON *l1 = get(config, "l1"), *l2 = get(config, "l2");
    int n = 0;
    for (const cJSON *c = cJSON_IsObject(config) ? config->child : NULL; c; c = c->next) n++;
    const int ok = cls && ((!strcmp(cls, "L1") && n == 1 && is_factor(l1)) ||
                           (!strcmp(cls, "L2") && n == 1 && is_factor(l2)) ||
                           (!strcmp(cls, "L1L2") && n == 2 && is_factor(l1) && is_factor(l2)));
    if (!ok)
        return kfail(k, key,
                     "%s is not supported: the trainer has L1(l1), L2(l2) and L1L2(l1, l2), "
                     "each factor a number >= 0",
                     cls ? cls : "this regularizer");
    cJSON *r = cJSON_AddObjectToObject(spec, key);
    if (l1) cJSON_AddNumberToObject(r, "l1", l1->valuedouble);
    if (l2) cJSON_AddNumberToObject(r, "l2", l2->valuedouble);
    return 0;
}

/* The per-example shape of a batch shape [batch, d1, ...]: the dimensions after the
 * batch, each a fixed size (model.c checks their range and rank). */
static cJSON *example_shape(const KCtx *k, const char *key, const cJSON *v)
{
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 2 ||
        !(cJSON_IsNull(v->child) || cJSON_IsNumber(v->child))) {
        kfail(k, key, "expected [batch, dimensions...] with the batch null or a number");
        return NULL;
    }
    cJSON *shape = cJSON_CreateArray();
    for (const cJSON *d = v->child->next; d; d = d->next) {
        if (!cJSON_IsNumber(d)) {
            cJSON_Delete(shape);
            kfail(k, key,
                  "every dimension after the batch must be a fixed size (the trainer "
                  "takes no variable-size inputs)");
            return NULL;
        }
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(d->valuedouble));
    }
    return shape;
}

static int is_one(const cJSON *v)
{
    if (cJSON_IsNumber(v)) return v->valuedouble == 1.0;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1) return 0;
    for (const cJSON *d = v->child; d; d = d->next)
        if (!cJSON_IsNumber(d) || d->valuedouble != 1.0) return 0;
    return 1;
}

/* Converts one config field into the spec layer; *input_shape takes a batch shape. */
static int convert_field(const KCtx *k, const Field *f, const cJSON *v, cJSON *spec,
                         cJSON **input_shape)
{
    const char *key = f->key;
    switch (f->kind) {
    case F_NAME: return 0;
    case F_COPY: cJSON_AddItemToObject(spec, key, cJSON_Duplicate(v, 1)); return 0;
    case F_BOOL:
        if (cJSON_IsBool(v)) return 0;
        return kfail(k, key, "expected true or false");
    case F_TRAINABLE:
        if (cJSON_IsTrue(v)) return 0;
        return kfail(k, key, "expected true: the trainer trains every weight (no frozen layers)");
    case F_DTYPE: return check_dtype(k, key, v);
    case F_NULL:
        if (cJSON_IsNull(v)) return 0;
        return kfail(k, key, "expected null: the trainer does not implement it");
    case F_FALSE:
        if (cJSON_IsFalse(v)) return 0;
        return kfail(k, key, "expected false: %s",
                     strcmp(key, "renorm") ? "the trainer takes dense tensors only"
                                           : "the trainer has no batch renormalization");
    case F_ONE:
        if (is_one(v)) return 0;
        return kfail(k, key, "expected 1: the trainer's Conv2D has no dilation and no groups");
    case F_CHANNELS_LAST:
        if (cJSON_IsNull(v) || is_str(v, "channels_last")) return 0;
        return kfail(k, key, "expected \"channels_last\": the trainer's tensors are H x W x C");
    case F_PADDING:
        if (is_str(v, "valid") || is_str(v, "same")) {
            cJSON_AddItemToObject(spec, key, cJSON_Duplicate(v, 1));
            return 0;
        }
        return kfail(k, key, "%s%s%s is not supported: expected \"valid\" or \"same\"",
                     cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : "this",
                     cJSON_IsString(v) ? "\"" : "");
    case F_ACTIVATION:
        if (check_activation(k, key, v)) return -1;
        if (cJSON_IsString(v)) cJSON_AddStringToObject(spec, key, v->valuestring);
        return 0;
    case F_INIT: return convert_initializer(k, key, v, spec);
    case F_NUMBER:
        if (cJSON_IsNumber(v)) return 0;
        return kfail(k, key, "expected a number");
    case F_REGULARIZER: return convert_regularizer(k, key, v, spec);
    case F_SEED:
        if (cJSON_IsNull(v) || cJSON_IsNumber(v)) return 0;
        return kfail(k, key, "expected null or an integer");
    case F_SLOPE: cJSON_AddItemToObject(spec, "negative_slope", cJSON_Duplicate(v, 1)); return 0;
    case F_SHAPE:
        if (*input_shape) return kfail(k, key, "a second input shape");
        return (*input_shape = example_shape(k, key, v)) ? 0 : -1;
    }
    return 0;
}

/* ----------------------------------------------------------------------------
 * A Functional model must be a plain chain */

/* The name in a reference [name, node_index, tensor_index]: the first output of the
 * layer's first call (a layer called twice is shared, not a chain). */
static const char *history_name(const cJSON *h, int n)
{
    if (!cJSON_IsArray(h) || cJSON_GetArraySize(h) != n || !cJSON_IsString(h->child)) return NULL;
    const cJSON *node = h->child->next, *tensor = node->next;
    if (!cJSON_IsNumber(node) || node->valuedouble != 0.0 || !cJSON_IsNumber(tensor) ||
        tensor->valuedouble != 0.0)
        return NULL;
    return h->child->valuestring;
}

/* The layer whose output is this layer's one input, from its inbound_nodes as Keras 3
 * writes them ([{"args": [{"class_name": "__keras_tensor__", "config": {"keras_history":
 * [name, 0, 0]}}], "kwargs": {}}]) or tf-keras ([[[name, 0, 0, {}]]]); NULL when the
 * layer is called more than once, on more than one tensor or with call arguments. */
static const char *inbound_name(const cJSON *nodes)
{
    if (!cJSON_IsArray(nodes) || cJSON_GetArraySize(nodes) != 1) return NULL;
    const cJSON *node = nodes->child;
    if (cJSON_IsObject(node)) {
        const cJSON *args = get(node, "args"), *kwargs = get(node, "kwargs");
        if (!cJSON_IsArray(args) || cJSON_GetArraySize(args) != 1) return NULL;
        if (kwargs && !(cJSON_IsObject(kwargs) && !kwargs->child)) return NULL;
        if (!is_str(get(args->child, "class_name"), "__keras_tensor__")) return NULL;
        return history_name(get(get(args->child, "config"), "keras_history"), 3);
    }
    if (!cJSON_IsArray(node) || cJSON_GetArraySize(node) != 1) return NULL;
    const cJSON *kwargs = cJSON_GetArrayItem(node->child, 3);
    if (!cJSON_IsObject(kwargs) || kwargs->child) return NULL;
    return history_name(node->child, 4);
}

/* The one layer input_layers or output_layers names: ["name", 0, 0] (Keras 3) or
 * [["name", 0, 0]] (tf-keras); NULL for several. */
static const char *endpoint_name(const cJSON *v)
{
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1) v = v->child;
    return history_name(v, 3);
}

static const char *layer_name(const cJSON *layer)
{
    const cJSON *n = get(layer, "name");
    if (!cJSON_IsString(n)) n = get(get(layer, "config"), "name");
    return cJSON_IsString(n) ? n->valuestring : "?";
}

static int check_chain(const KCtx *mk, const cJSON *config, const cJSON *layers)
{
    KCtx k = *mk;
    k.index = 0;
    const cJSON *prev = NULL;
    for (const cJSON *l = layers->child; l; l = l->next, k.index++) {
        k.name = layer_name(l);
        const cJSON *cls = get(l, "class_name");
        k.cls = cJSON_IsString(cls) ? cls->valuestring : "?";
        const cJSON *nodes = get(l, "inbound_nodes");
        if (!prev) {
            if (!is_str(cls, "InputLayer") || !cJSON_IsArray(nodes) || cJSON_GetArraySize(nodes))
                return kfail(&k, NULL, "expected the model's InputLayer first");
        } else {
            const char *from = inbound_name(nodes), *want = layer_name(prev);
            if (!from)
                return kfail(&k, "inbound_nodes",
                             "not one input from one call: only a plain chain of layers is "
                             "supported (no branches, merges, shared layers or call arguments)");
            if (strcmp(from, want))
                return kfail(&k, "inbound_nodes",
                             "its input is \"%s\", not the layer before it (\"%s\"): only a "
                             "plain chain of layers is supported (no branches or merges)",
                             from, want);
        }
        prev = l;
    }
    k.index = -1;
    const char *in = endpoint_name(get(config, "input_layers"));
    const char *out = endpoint_name(get(config, "output_layers"));
    if (!in || strcmp(in, layer_name(layers->child)))
        return kfail(&k, "config.input_layers", "expected the first layer, and only it");
    if (!out || !prev || strcmp(out, layer_name(prev)))
        return kfail(&k, "config.output_layers", "expected the last layer, and only it");
    return 0;
}

/* ----------------------------------------------------------------------------
 * The model */

/* A layer built into Keras, not a custom object: its module (when written) is Keras's
 * and registered_name (when written) is null or the class itself. */
static int is_builtin(const cJSON *layer, const char *cls)
{
    const cJSON *module = get(layer, "module"), *reg = get(layer, "registered_name");
    if (module && !(cJSON_IsString(module) && !strncmp(module->valuestring, "keras", 5) &&
                    (!module->valuestring[5] || module->valuestring[5] == '.')))
        return 0;
    return !reg || cJSON_IsNull(reg) || is_str(reg, cls);
}

static cJSON *convert_layer(const KCtx *k, const cJSON *layer, cJSON **input_shape)
{
    const cJSON *config = get(layer, "config");
    size_t c = 0;
    while (c < sizeof classes / sizeof classes[0] && strcmp(classes[c].cls, k->cls)) c++;
    if (!is_builtin(layer, k->cls)) {
        kfail(
            k, NULL,
            "a custom object (module or registered_name not Keras's): the trainer has " KJ_LAYERS);
        return NULL;
    }
    if (!strcmp(k->cls, "Lambda")) {
        kfail(k, NULL,
              "a Lambda layer runs Python code, which the trainer cannot: it has " KJ_LAYERS);
        return NULL;
    }
    if (c == sizeof classes / sizeof classes[0]) {
        kfail(k, NULL, "not supported: the trainer has " KJ_LAYERS);
        return NULL;
    }
    if (!cJSON_IsObject(config)) {
        kfail(k, "config", "expected an object");
        return NULL;
    }
    cJSON *spec = cJSON_CreateObject();
    cJSON_AddStringToObject(spec, "type", k->cls);
    cJSON_AddStringToObject(spec, "name", k->name);
    const int input = !strcmp(k->cls, "InputLayer");
    for (const cJSON *v = config->child; v; v = v->next) {
        const Field *f = field_of(common_fields, v->string);
        if (!f) f = field_of(classes[c].fields, v->string);
        if (!f) {
            kfail(k, v->string, "not a %s field the trainer knows; refused rather than ignored",
                  k->cls);
            goto err;
        }
        /* a second value would reach the spec unread */
        if (cJSON_GetObjectItemCaseSensitive(config, v->string) != v) {
            kfail(k, v->string, "given twice");
            goto err;
        }
        /* tf-keras puts the input's batch shape on a first layer that is not an InputLayer */
        if (f->kind == F_SHAPE && !input && k->index > 0) {
            kfail(k, v->string, "an input shape only on the first layer");
            goto err;
        }
        if (convert_field(k, f, v, spec, input_shape)) goto err;
    }
    if (input) {
        if (!*input_shape) {
            kfail(k, "batch_shape", "expected the input's batch shape");
            goto err;
        }
        cJSON_AddItemToObject(spec, "shape", *input_shape);
        *input_shape = NULL;
    }
    return spec;
err:
    cJSON_Delete(spec);
    return NULL;
}

/* The model's own config fields (not its layers). */
static int check_model_config(const KCtx *k, const cJSON *config, int functional,
                              cJSON **input_shape)
{
    for (const cJSON *v = config->child; v; v = v->next) {
        const char *key = v->string;
        if (!strcmp(key, "layers") || !strcmp(key, "name")) continue;
        if (functional && (!strcmp(key, "input_layers") || !strcmp(key, "output_layers"))) continue;
        if (!strcmp(key, "trainable")) {
            if (!cJSON_IsTrue(v))
                return kfail(k, "config.trainable",
                             "expected true: the trainer trains every weight");
        } else if (!strcmp(key, "dtype")) {
            if (check_dtype(k, "config.dtype", v)) return -1;
        } else if (!functional && !strcmp(key, "build_input_shape")) {
            if (!cJSON_IsNull(v) &&
                !(*input_shape = example_shape(k, "config.build_input_shape", v)))
                return -1;
        } else {
            return kfail(k, "config",
                         "%s: not a model field the trainer knows; refused rather than ignored",
                         key);
        }
    }
    return 0;
}

int keras_json_is_model(const cJSON *root)
{
    return cJSON_IsString(get(root, "class_name"));
}

cJSON *keras_json_to_spec(const cJSON *root, const char *what, char *err, size_t errlen)
{
    KCtx k = {.what = what, .index = -1, .err = err, .errlen = errlen};
    const cJSON *cls = get(root, "class_name"), *config = get(root, "config");
    const int functional = is_str(cls, "Functional");
    if (!is_str(cls, "Sequential") && !functional) {
        kfail(&k, "class_name",
              "\"%s\" is not supported: expected a Sequential model or a "
              "Functional model that is a plain chain",
              cJSON_IsString(cls) ? cls->valuestring : "?");
        return NULL;
    }
    const cJSON *layers = get(config, "layers");
    if (!cJSON_IsObject(config)) {
        kfail(&k, "config", "expected the %s model's config object", cls->valuestring);
        return NULL;
    }
    if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) < 1) {
        kfail(&k, "config.layers", "expected a non-empty list of layers");
        return NULL;
    }
    cJSON *model_shape = NULL, *first_shape = NULL, *spec = cJSON_CreateObject();
    cJSON *out = cJSON_AddArrayToObject(spec, "layers");
    if (check_model_config(&k, config, functional, &model_shape)) goto err;
    if (functional && check_chain(&k, config, layers)) goto err;
    k.index = 0;
    for (const cJSON *l = layers->child; l; l = l->next, k.index++) {
        const cJSON *c = get(l, "class_name");
        k.name = layer_name(l);
        k.cls = cJSON_IsString(c) ? c->valuestring : "?";
        if (!cJSON_IsString(c)) {
            kfail(&k, "class_name", "expected a string: one of " KJ_LAYERS);
            goto err;
        }
        cJSON *sl = convert_layer(&k, l, &first_shape);
        if (!sl) goto err;
        cJSON_AddItemToArray(out, sl);
    }
    k.index = -1;
    /* the input's shape: an InputLayer's (in the layers now), a first layer's
     * batch_input_shape, the model's build_input_shape, or its build_config */
    if (first_shape) {
        cJSON_AddItemToObject(spec, "input_shape", first_shape);
        first_shape = NULL;
    } else if (!is_str(get(out->child, "type"), "InputLayer")) {
        if (!model_shape) {
            const cJSON *b = get(get(root, "build_config"), "input_shape");
            if (b && !cJSON_IsNull(b) && !(model_shape = example_shape(&k, "build_config", b)))
                goto err;
        }
        if (!model_shape) {
            kfail(&k, "config.layers", "no input shape: start the model with keras.Input(shape)");
            goto err;
        }
        cJSON_AddItemToObject(spec, "input_shape", model_shape);
        model_shape = NULL;
    }
    cJSON_Delete(model_shape);
    return spec;
err:
    cJSON_Delete(model_shape);
    cJSON_Delete(first_shape);
    cJSON_Delete(spec);
    return NULL;
}
