/* The compute backend interface, as a C function table. The CPU backend (tensor/cpu_backend.cpp)
 * and the CUDA module (gpu/, libtroupe_cuda.so, loaded with dlopen) both fill one in; callers
 * go through tensor/backend.hpp, never through this table directly.
 *
 * Contract for every entry:
 * - Pointers are in the backend's memory (host memory for the CPU backend, device memory
 *   from `alloc` for CUDA); `upload`/`download` move bytes between host and backend memory.
 * - Every call returns 0 on success, or non-zero with a message for `last_error` of the form
 *   "file:line: what failed: library status"; nothing aborts or exits.
 * - Calls are ordered on one compute stream per context; `synchronize` waits for them.
 *   Results returned through host pointers (loss, counts, finiteness) are synchronous.
 * - Shapes: row-major, f32; labels and argmax are int32. Gradients that say "accumulate"
 *   add into their output, so microbatches can sum; everything else overwrites.
 * The table only grows at the end; abi_version says how long it is.
 *
 * Note [Adding an op]
 * A new op touches these files, in this order:
 * 1. tensor/<family>.hpp/.cpp (ops, conv, pool, layer_norm, loss, update_ops): the host op, the
 *    reference every backend is checked against; elementwise arithmetic goes in
 *    tensor/elementwise.hpp as a functor, which the CUDA kernels share.
 * 2. tensor/backend_abi.h: its entry at the end of this table, with its contract, and
 *    TROUPE_BACKEND_ABI_VERSION + 1 (tensor/backend.cpp refuses an older module).
 * 3. tensor/cpu_backend.cpp: the CPU table's entry, wrapping the host op in guarded().
 * 4. gpu/kernels.cu and gpu/kernels.hpp (a kernel and its launcher), or a library call;
 *    the entry in gpu/cuda_ops.cpp, declared in gpu/cuda_entries.hpp, and its line in
 *    gpu/cuda_backend.cpp's table.
 * 5. tensor/compute.hpp/.cpp: the method layers call, which runs the host op or the entry.
 * 6. tests/tensor/test_<family>.cpp for the host op, and tests/gpu/test_backend_ops.cpp for
 *    the entry on every backend against the host (a backward also against finite
 *    differences); test_cuda_module already checks that the module fills every entry. */
#ifndef TROUPE_TENSOR_BACKEND_ABI_H
#define TROUPE_TENSOR_BACKEND_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TROUPE_BACKEND_ABI_VERSION 4
#define TROUPE_BACKEND_ENTRY "troupe_backend_entry"

typedef struct troupe_conv_geom {
  int64_t in_channels, in_h, in_w, out_channels, kernel_h, kernel_w, stride, pad;
} troupe_conv_geom;

typedef struct troupe_pool_geom {
  int64_t channels, in_h, in_w, kernel, stride;
} troupe_pool_geom;

typedef struct troupe_sgd_args {
  float lr, momentum, weight_decay;
  int nesterov;
} troupe_sgd_args;

typedef struct troupe_adam_args {
  float lr, beta1, beta2, eps, weight_decay, bias1, bias2_sqrt;
} troupe_adam_args;

typedef struct troupe_device_info {
  char name[128];
  int index, device_count;
  int compute_major, compute_minor, multiprocessors;
  uint64_t total_memory_bytes;
  double peak_fp32_tflops; /* from clock and SM count; 0 when unknown */
  double peak_bandwidth_gbs;
} troupe_device_info;

typedef struct troupe_memory_stats {
  uint64_t bytes_in_use;    /* handed out by alloc and not yet released */
  uint64_t bytes_cached;    /* held in the free lists for reuse */
  uint64_t allocations;     /* alloc calls */
  uint64_t cache_hits;      /* alloc calls served from the free lists */
  uint64_t device_mallocs;  /* calls that reached the device allocator */
} troupe_memory_stats;

typedef struct troupe_backend_v1 {
  uint32_t abi_version;
  const char* name; /* "cpu", "cuda" */

  /* Opens device `index` (ignored by the CPU backend). */
  int (*open)(int index, void** ctx);
  void (*close)(void* ctx);
  /* The message of the calling thread's last failure ("" when none). */
  const char* (*last_error)(void);
  /* How many devices there are; 0 with an explanation in last_error when none can be used. */
  int (*device_count)(int* count);
  int (*device_info)(void* ctx, troupe_device_info* info);
  /* TF32 tensor-core math for gemm (CUDA only; the CPU backend ignores it). */
  int (*set_tf32)(void* ctx, int enabled);

  int (*alloc)(void* ctx, size_t bytes, void** ptr);
  int (*release)(void* ctx, void* ptr);
  int (*memory_stats)(void* ctx, troupe_memory_stats* stats);
  int (*upload)(void* ctx, void* dst, const void* host_src, size_t bytes);
  int (*download)(void* ctx, void* host_dst, const void* src, size_t bytes);
  int (*fill_zero)(void* ctx, void* ptr, size_t bytes);
  int (*synchronize)(void* ctx);

  /* c (m, n) = alpha * op(a) * op(b) + beta * c; op(a) is (m, k), op(b) (k, n). */
  int (*gemm)(void* ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
  /* out (rows, cols) += bias (cols). */
  int (*bias_add)(void* ctx, float* out, const float* bias, int64_t rows, int64_t cols);
  /* out (batch, channels, positions) += bias (channels). */
  int (*channel_bias_add)(void* ctx, float* out, const float* bias, int64_t batch, int64_t channels,
                          int64_t positions);
  /* grad_bias (channels) += sum over batch and positions of grad_out (batch, channels, positions). */
  int (*bias_grad)(void* ctx, float* grad_bias, const float* grad_out, int64_t batch, int64_t channels,
                   int64_t positions);
  int (*relu_forward)(void* ctx, float* out, const float* in, int64_t n);
  int (*relu_backward)(void* ctx, float* grad_in, const float* grad_out, const float* out, int64_t n);
  /* out += alpha * in */
  int (*axpy)(void* ctx, float* out, float alpha, const float* in, int64_t n);
  int (*scale)(void* ctx, float* out, float alpha, int64_t n);
  /* out (batch, C_out, OH, OW) = conv(in (batch, C_in, H, W), weight (C_out, C_in, KH, KW)) + bias (may be NULL). */
  int (*conv2d_forward)(void* ctx, float* out, const float* in, const float* weight, const float* bias,
                        int64_t batch, const troupe_conv_geom* g);
  /* grad_weight, grad_bias accumulate; grad_in overwritten, skipped when NULL. */
  int (*conv2d_backward)(void* ctx, float* grad_in, float* grad_weight, float* grad_bias, const float* grad_out,
                         const float* in, const float* weight, int64_t batch, const troupe_conv_geom* g);
  /* argmax holds h * W + w of each window's first maximum. */
  int (*maxpool2d_forward)(void* ctx, float* out, int32_t* argmax, const float* in, int64_t batch,
                           const troupe_pool_geom* g);
  int (*maxpool2d_backward)(void* ctx, float* grad_in, const float* grad_out, const int32_t* argmax, int64_t batch,
                            const troupe_pool_geom* g);
  /* probs = softmax(logits); *loss = mean over rows of -log probs[label]. */
  int (*softmax_xent_forward)(void* ctx, float* probs, const float* logits, const int32_t* labels, int64_t rows,
                              int64_t classes, double* loss);
  /* grad = scale * (probs - onehot(labels)) */
  int (*softmax_xent_backward)(void* ctx, float* grad, const float* probs, const int32_t* labels, int64_t rows,
                               int64_t classes, float scale);
  int (*count_correct)(void* ctx, const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                       int64_t* correct);
  int (*all_finite)(void* ctx, const float* x, int64_t n, int* finite);
  int (*sgd_step)(void* ctx, float* param, const float* grad, float* velocity, int64_t n, const troupe_sgd_args* a);
  int (*adam_step)(void* ctx, float* param, const float* grad, float* m, float* v, int64_t n,
                   const troupe_adam_args* a);

  /* Collectives among the members of one local group: NCCL across the GPUs of a node in
   * the CUDA module, threads of one process in the CPU backend. The id is opaque bytes
   * that one member makes and the others receive (through the coordinator); comm is an
   * opaque communicator. Opening waits for every member, the all-reduce sums in place
   * (CUDA: on the communication stream, after the compute stream's work) and returns once
   * the sum is in every buffer; both fail, instead of waiting on, after timeout_ms (a
   * member that died), and the communicator is then unusable. */
  int (*collective_id)(unsigned char* id, size_t capacity, size_t* size);
  int (*collective_open)(void* ctx, const unsigned char* id, size_t size, int ranks, int rank, int64_t timeout_ms,
                         void** comm);
  void (*collective_close)(void* comm);
  int (*all_reduce_sum)(void* ctx, void* comm, float* const* buffers, const int64_t* counts, int buffer_count);

  /* dst = src, both in the backend's memory (they may not overlap). */
  int (*copy)(void* ctx, void* dst, const void* src, size_t bytes);

  /* From version 2. out = GELU(in), the exact form x * Phi(x); out may alias in. */
  int (*gelu_forward)(void* ctx, float* out, const float* in, int64_t n);
  /* grad_in = grad_out * GELU'(in); grad_in may alias grad_out. */
  int (*gelu_backward)(void* ctx, float* grad_in, const float* grad_out, const float* in, int64_t n);
  /* out (rows, cols) = (in - row mean) / sqrt(row biased variance + eps) * gamma (cols) + beta (cols). */
  int (*layer_norm_forward)(void* ctx, float* out, const float* in, const float* gamma, const float* beta,
                            int64_t rows, int64_t cols, float eps);
  /* grad_gamma and grad_beta accumulate; grad_in overwritten, skipped when NULL; the row
   * statistics are recomputed from in. */
  int (*layer_norm_backward)(void* ctx, float* grad_in, float* grad_gamma, float* grad_beta, const float* grad_out,
                             const float* in, const float* gamma, int64_t rows, int64_t cols, float eps);

  /* From version 3. out (batch, context, dim) = table[ids] (vocab, dim) + positions
   * (context, dim); ids (batch, context) are f32 whole numbers in [0, vocab) (the CPU
   * backend refuses others; the CUDA module reads them as given). */
  int (*embedding_forward)(void* ctx, float* out, const float* ids, const float* table, const float* positions,
                           int64_t batch, int64_t context, int64_t vocab, int64_t dim);
  /* grad_table and grad_positions accumulate, summed in position order (deterministic). */
  int (*embedding_backward)(void* ctx, float* grad_table, float* grad_positions, const float* grad_out,
                            const float* ids, int64_t batch, int64_t context, int64_t vocab, int64_t dim);
  /* Causal multi-head self-attention (tensor/attention.hpp): qkv (batch, context, 3 * heads
   * * head_dim), probs (batch, heads, context, context) kept for backward, out (batch,
   * context, heads * head_dim). */
  int (*attention_forward)(void* ctx, float* out, float* probs, const float* qkv, int64_t batch, int64_t context,
                           int64_t heads, int64_t head_dim);
  /* grad_qkv overwritten; grad_probs is scratch of probs' size. */
  int (*attention_backward)(void* ctx, float* grad_qkv, float* grad_probs, const float* grad_out, const float* qkv,
                            const float* probs, int64_t batch, int64_t context, int64_t heads, int64_t head_dim);

  /* From version 4: dropout and batch normalisation. Inverted dropout (Note [Dropout masks] in tensor/elementwise.hpp):
   * kept[i] = 0 or 1 / (1 - p), drawn from key and i; out = in * kept; out may alias in. */
  int (*dropout_forward)(void* ctx, float* out, float* kept, const float* in, int64_t n, float p, uint64_t key);
  /* grad_in = grad_out * kept; grad_in may alias grad_out. */
  int (*dropout_backward)(void* ctx, float* grad_in, const float* grad_out, const float* kept, int64_t n);
  /* Batch normalisation (tensor/batch_norm.hpp) of in (batch, channels, positions): in
   * training, stats (2 * channels) = each channel's mean, then 1 / sqrt(var + eps);
   * out = (in - mean) * rstd * gamma + beta; out may alias in. */
  int (*batch_norm_forward)(void* ctx, float* out, float* stats, const float* in, const float* gamma,
                            const float* beta, int64_t batch, int64_t channels, int64_t positions, float eps);
  /* In evaluation, with population (2 * channels) = each channel's mean, then its variance. */
  int (*batch_norm_inference)(void* ctx, float* out, const float* in, const float* gamma, const float* beta,
                              const float* population, int64_t batch, int64_t channels, int64_t positions, float eps);
  /* grad_gamma and grad_beta accumulate, each channel summed in a fixed order; grad_in
   * overwritten, skipped when NULL. */
  int (*batch_norm_backward)(void* ctx, float* grad_in, float* grad_gamma, float* grad_beta, const float* grad_out,
                             const float* in, const float* gamma, const float* stats, int64_t batch, int64_t channels,
                             int64_t positions);
} troupe_backend_v1;

/* What a module exports under TROUPE_BACKEND_ENTRY. */
typedef const troupe_backend_v1* (*troupe_backend_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
