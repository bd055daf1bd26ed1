/* A stand-in for a LibTorch binding's own C layer, in the style of tch-rs's
 * torch-sys/libtch/torch_api.h: plain C cannot make tensors, so train.c gets them here, as a
 * binding gets them from its layer. Not part of mixprec; only examples/c_api/train.c uses it.
 *
 * As in tch-rs: a tensor is a heap `torch::Tensor*` and an optimizer a
 * `torch::optim::Optimizer*`, both passed as void*; every call catches C++ exceptions, returns
 * NULL (or 0) on failure and leaves the message for mb_get_and_reset_last_err. */
#ifndef MIXPREC_EXAMPLES_MINI_BINDING_H_
#define MIXPREC_EXAMPLES_MINI_BINDING_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void* mb_tensor;    /* torch::Tensor* (tch-rs `tensor`) */
typedef void* mb_optimizer; /* torch::optim::Optimizer* (tch-rs `optimizer`) */

/** The message of this thread's last failed call, or NULL; clears it. Free it with free()
 *  (tch-rs get_and_reset_last_err). */
char* mb_get_and_reset_last_err(void);

void mb_manual_seed(int64_t seed);
/** A rows x cols float32 tensor of N(0, 1) values. */
mb_tensor mb_randn(int64_t rows, int64_t cols);
/** A rows x cols float32 tensor of zeros; a parameter (requires_grad) when requires_grad != 0. */
mb_tensor mb_zeros(int64_t rows, int64_t cols, int requires_grad);
/** A rows x cols float32 tensor holding a copy of `values` (row-major). */
mb_tensor mb_from_floats(const float* values, int64_t rows, int64_t cols);
mb_tensor mb_matmul(mb_tensor a, mb_tensor b);
mb_tensor mb_add(mb_tensor a, mb_tensor b);
mb_tensor mb_mse_loss(mb_tensor input, mb_tensor target);
/** A detached copy (to compare a parameter before and after a step). */
mb_tensor mb_clone(mb_tensor t);
void mb_backward(mb_tensor t);
/** A new handle to t's gradient, sharing its storage; NULL while it has none. */
mb_tensor mb_grad(mb_tensor t);
/** The value of a one-element tensor (NaN on failure). */
double mb_item(mb_tensor t);
/** 1 if a and b have the same shape and elements, else 0. */
int mb_equal(mb_tensor a, mb_tensor b);
/** t *= v in place, outside autograd (train.c injects an overflow with v = inf). */
void mb_mul_scalar_(mb_tensor t, double v);
/** param -= alpha * grad in place, outside autograd: the binding's own optimizer code. */
void mb_sub_scaled_(mb_tensor param, mb_tensor grad, double alpha);
/** Zeroes t's gradient if it has one. */
void mb_zero_grad_of(mb_tensor t);
/** Deletes a torch::Tensor* (tch-rs at_free); NULL is a no-op. */
void mb_free(mb_tensor t);

/** torch::optim::SGD over n parameters (tch-rs ato_sgd + ato_add_parameters). */
mb_optimizer mb_sgd_create(const mb_tensor* params, int n, double lr);
void mb_zero_grad(mb_optimizer o);      /* tch-rs ato_zero_grad */
void mb_step(mb_optimizer o);           /* tch-rs ato_step */
void mb_optimizer_free(mb_optimizer o); /* tch-rs ato_free; NULL is a no-op */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MIXPREC_EXAMPLES_MINI_BINDING_H_ */
