/* model_invariants — what every model the trainer builds must hold, checked by the fuzz
 * targets that build one (fuzz-model from its own spec, fuzz-keras from Keras's JSON):
 * each layer takes what the one before it gives and gives something, and its weights and
 * state lie inside the parameter arena. abort() on a violation, for libFuzzer to report. */
#ifndef KT_FUZZ_MODEL_INVARIANTS_H
#define KT_FUZZ_MODEL_INVARIANTS_H

#include "model.h"

#include <stdlib.h>

static inline void fuzz_check_model_layers(const Model *m)
{
    size_t in = m->input_size;
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        if (l->in_size != in || l->out_size == 0) abort();
        if (l->w_off + l->w_count > m->num_params || l->b_off + l->b_count > m->num_params) abort();
        /* a BatchNormalization's moving statistics: after its gamma and beta, one per
         * channel each */
        if (l->s_off + l->s_count > m->num_params) abort();
        if (l->s_count && (l->s_off != l->b_off + l->b_count ||
                           l->s_count != 2 * (size_t)l->out_shape[l->out_rank - 1]))
            abort();
        in = l->out_size;
    }
}

#endif
