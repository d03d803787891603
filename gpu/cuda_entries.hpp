// The entries of the CUDA backend's table (tensor/backend_abi.h gives each one's
// contract), by the file that defines them; gpu/cuda_backend.cpp puts them in the table.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/backend_abi.h"

namespace troupe::gpu::entry {

// cuda_device.cpp: contexts, devices, memory and transfers.
int open(int index, void** out);
void close(void* ctx);
const char* last_error();
int device_count(int* count);
int device_info(void* ctx, troupe_device_info* info);
int set_tf32(void* ctx, int enabled);
int alloc(void* ctx, size_t bytes, void** ptr);
int release(void* ctx, void* ptr);
int memory_stats(void* ctx, troupe_memory_stats* s);
int upload(void* ctx, void* dst, const void* src, size_t bytes);
int download(void* ctx, void* dst, const void* src, size_t bytes);
int fill_zero(void* ctx, void* p, size_t bytes);
int synchronize(void* ctx);
int copy(void* ctx, void* dst, const void* src, size_t bytes);

// cuda_ops.cpp: the ops (cuBLAS, cuDNN, Troupe's kernels).
int gemm(void* ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
         const float* b, int64_t ldb, float beta, float* c_out, int64_t ldc);
int bias_add(void* ctx, float* out, const float* bias, int64_t rows, int64_t cols);
int channel_bias_add(void* ctx, float* out, const float* bias, int64_t batch, int64_t channels, int64_t positions);
int bias_grad(void* ctx, float* grad_bias, const float* grad_out, int64_t batch, int64_t channels, int64_t positions);
int relu_forward(void* ctx, float* out, const float* in, int64_t n);
int relu_backward(void* ctx, float* grad_in, const float* grad_out, const float* out, int64_t n);
int gelu_forward(void* ctx, float* out, const float* in, int64_t n);
int gelu_backward(void* ctx, float* grad_in, const float* grad_out, const float* in, int64_t n);
int layer_norm_forward(void* ctx, float* out, const float* in, const float* gamma, const float* beta, int64_t rows,
                       int64_t cols, float eps);
int layer_norm_backward(void* ctx, float* grad_in, float* grad_gamma, float* grad_beta, const float* grad_out,
                        const float* in, const float* gamma, int64_t rows, int64_t cols, float eps);
int embedding_forward(void* ctx, float* out, const float* ids, const float* table, const float* positions,
                      int64_t batch, int64_t seq_len, int64_t vocab, int64_t dim);
int embedding_backward(void* ctx, float* grad_table, float* grad_positions, const float* grad_out, const float* ids,
                       int64_t batch, int64_t seq_len, int64_t vocab, int64_t dim);
int attention_forward(void* ctx, float* out, float* probs, const float* qkv, int64_t batch, int64_t seq_len,
                      int64_t heads, int64_t head_dim);
int attention_backward(void* ctx, float* grad_qkv, float* grad_probs, const float* grad_out, const float* qkv,
                       const float* probs, int64_t batch, int64_t seq_len, int64_t heads, int64_t head_dim);
int dropout_forward(void* ctx, float* out, float* kept, const float* in, int64_t n, float p, uint64_t key);
int dropout_backward(void* ctx, float* grad_in, const float* grad_out, const float* kept, int64_t n);
int batch_norm_forward(void* ctx, float* out, float* stats, const float* in, const float* gamma, const float* beta,
                       int64_t batch, int64_t channels, int64_t positions, float eps);
int batch_norm_inference(void* ctx, float* out, const float* in, const float* gamma, const float* beta,
                         const float* population, int64_t batch, int64_t channels, int64_t positions, float eps);
int batch_norm_backward(void* ctx, float* grad_in, float* grad_gamma, float* grad_beta, const float* grad_out,
                        const float* in, const float* gamma, const float* stats, int64_t batch, int64_t channels,
                        int64_t positions);
int axpy(void* ctx, float* out, float alpha, const float* in, int64_t n);
int scale(void* ctx, float* out, float alpha, int64_t n);
int conv2d_forward(void* ctx, float* out, const float* in, const float* weight, const float* bias, int64_t batch,
                   const troupe_conv_geom* g);
int conv2d_backward(void* ctx, float* grad_in, float* grad_weight, float* grad_bias, const float* grad_out,
                    const float* in, const float* weight, int64_t batch, const troupe_conv_geom* g);
int maxpool2d_forward(void* ctx, float* out, int32_t* argmax, const float* in, int64_t batch,
                      const troupe_pool_geom* g);
int maxpool2d_backward(void* ctx, float* grad_in, const float* grad_out, const int32_t* argmax, int64_t batch,
                       const troupe_pool_geom* g);
int softmax_xent_forward(void* ctx, float* probs, const float* logits, const int32_t* labels, int64_t rows,
                         int64_t classes, double* loss);
int softmax_xent_backward(void* ctx, float* grad, const float* probs, const int32_t* labels, int64_t rows,
                          int64_t classes, float s);
int count_correct(void* ctx, const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                  int64_t* correct);
int all_finite(void* ctx, const float* x, int64_t n, int* finite);
int sgd_step(void* ctx, float* p, const float* g, float* v, int64_t n, const troupe_sgd_args* a);
int adam_step(void* ctx, float* p, const float* g, float* m, float* v, int64_t n, const troupe_adam_args* a);

// cuda_collectives.cpp: NCCL among the GPUs of one node.
int collective_id(unsigned char* id, size_t capacity, size_t* size);
int collective_open(void* ctx, const unsigned char* id, size_t size, int ranks, int rank, int64_t timeout_ms,
                    void** comm);
void collective_close(void* comm);
int all_reduce_sum(void* ctx, void* comm, float* const* buffers, const int64_t* counts, int buffer_count);

}  // namespace troupe::gpu::entry
