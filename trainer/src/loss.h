/* loss — sparse categorical cross-entropy, the loss of every built-in model. */
#ifndef KT_LOSS_H
#define KT_LOSS_H

#include <stdint.h>

/* From logits (B,C), stable through log-sum-exp. Writes dlogits (B,C) = the gradient of
 * scale * sum_i loss_i (scale is 1/global_batch in training); dlogits may be NULL.
 * Returns sum_i loss_i (unscaled); *correct (may be NULL) gets the number of rows whose
 * argmax equals the label. Labels must lie in [0,C). */
double loss_sce_logits(float *dlogits, int *correct, const float *logits, const int32_t *labels,
                       int b, int c, float scale);

/* From probabilities (B,C) such as a softmax output, the way Keras's TensorFlow backend
 * does it: p clipped to [1e-7, 1-1e-7], renormalised, loss_i = -log p_label. dprobs
 * (may be NULL) is the gradient of scale * sum_i loss_i (zero where clipping bites).
 * Returns sum_i loss_i; *correct as above. */
double loss_sce_probs(float *dprobs, int *correct, const float *probs, const int32_t *labels, int b,
                      int c, float scale);

#endif
