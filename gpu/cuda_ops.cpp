// The CUDA backend's op entries: linear layers are cuBLAS sgemm, attention cuBLAS's
// strided batched sgemm around a masked softmax kernel, convolutions cuDNN's legacy API,
// everything else Troupe's kernels (kernels.cu, norm_kernels.cu). Each runs on the context's
// compute stream; results returned through host pointers are synchronous.
#include <cuda_runtime_api.h>

#include <cmath>
#include <vector>

#include "gpu/cuda_context.hpp"
#include "gpu/cuda_entries.hpp"
#include "gpu/kernels.hpp"

namespace troupe::gpu::entry {

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
int gemm(void* ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
         const float* b, int64_t ldb, float beta, float* c_out, int64_t ldc) {
  return on_device(ctx, [&](context& c) {
    if (m == 0 || n == 0) return;
    TROUPE_GPU(cublasSgemm(c.blas.get(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                           static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                           static_cast<int>(ldb), a, static_cast<int>(lda), &beta, c_out, static_cast<int>(ldc)));
  });
}

int bias_add(void* ctx, float* out, const float* bias, int64_t rows, int64_t cols) {
  return on_device(ctx, [&](context& c) { launch_channel_bias_add(c.compute.get(), out, bias, rows, cols, 1); });
}

int channel_bias_add(void* ctx, float* out, const float* bias, int64_t batch, int64_t channels, int64_t positions) {
  return on_device(
      ctx, [&](context& c) { launch_channel_bias_add(c.compute.get(), out, bias, batch, channels, positions); });
}

int bias_grad(void* ctx, float* grad_bias, const float* grad_out, int64_t batch, int64_t channels, int64_t positions) {
  return on_device(
      ctx, [&](context& c) { launch_bias_grad(c.compute.get(), grad_bias, grad_out, batch, channels, positions); });
}

int relu_forward(void* ctx, float* out, const float* in, int64_t n) {
  return on_device(ctx, [&](context& c) { launch_relu_forward(c.compute.get(), out, in, n); });
}

int relu_backward(void* ctx, float* grad_in, const float* grad_out, const float* out, int64_t n) {
  return on_device(ctx, [&](context& c) { launch_relu_backward(c.compute.get(), grad_in, grad_out, out, n); });
}

int gelu_forward(void* ctx, float* out, const float* in, int64_t n) {
  return on_device(ctx, [&](context& c) { launch_gelu_forward(c.compute.get(), out, in, n); });
}

int gelu_backward(void* ctx, float* grad_in, const float* grad_out, const float* in, int64_t n) {
  return on_device(ctx, [&](context& c) { launch_gelu_backward(c.compute.get(), grad_in, grad_out, in, n); });
}

int dropout_forward(void* ctx, float* out, float* kept, const float* in, int64_t n, float p, uint64_t key) {
  return on_device(ctx, [&](context& c) { launch_dropout_forward(c.compute.get(), out, kept, in, n, p, key); });
}

int dropout_backward(void* ctx, float* grad_in, const float* grad_out, const float* kept, int64_t n) {
  return on_device(ctx, [&](context& c) { launch_dropout_backward(c.compute.get(), grad_in, grad_out, kept, n); });
}

int batch_norm_forward(void* ctx, float* out, float* stats, const float* in, const float* gamma, const float* beta,
                       int64_t batch, int64_t channels, int64_t positions, float eps) {
  return on_device(ctx, [&](context& c) {
    launch_batch_norm_forward(c.compute.get(), out, stats, in, gamma, beta, batch, channels, positions, eps);
  });
}

int batch_norm_inference(void* ctx, float* out, const float* in, const float* gamma, const float* beta,
                         const float* population, int64_t batch, int64_t channels, int64_t positions, float eps) {
  return on_device(ctx, [&](context& c) {
    launch_batch_norm_inference(c.compute.get(), out, in, gamma, beta, population, batch, channels, positions, eps);
  });
}

int batch_norm_backward(void* ctx, float* grad_in, float* grad_gamma, float* grad_beta, const float* grad_out,
                        const float* in, const float* gamma, const float* stats, int64_t batch, int64_t channels,
                        int64_t positions) {
  return on_device(ctx, [&](context& c) {
    launch_batch_norm_backward(c.compute.get(), grad_in, grad_gamma, grad_beta, grad_out, in, gamma, stats, batch,
                               channels, positions);
  });
}

int layer_norm_forward(void* ctx, float* out, const float* in, const float* gamma, const float* beta, int64_t rows,
                       int64_t cols, float eps) {
  return on_device(ctx,
                   [&](context& c) { launch_layer_norm_forward(c.compute.get(), out, in, gamma, beta, rows, cols, eps); });
}

int layer_norm_backward(void* ctx, float* grad_in, float* grad_gamma, float* grad_beta, const float* grad_out,
                        const float* in, const float* gamma, int64_t rows, int64_t cols, float eps) {
  return on_device(ctx, [&](context& c) {
    scratch stats(c, 2 * sizeof(float) * static_cast<std::size_t>(rows));
    launch_layer_norm_backward(c.compute.get(), grad_in, grad_gamma, grad_beta, stats.as<void>(), grad_out, in, gamma,
                               rows, cols, eps);
  });
}

namespace {

// Row-major C_i = alpha op(A_i) op(B_i) + beta C_i for i < count, the operands strided by
// sa, sb and sc elements: cuBLAS's column-major batched call with the operands swapped.
void gemm_batched(context& c, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, int64_t sa, const float* b, int64_t ldb, int64_t sb, float beta, float* out,
                  int64_t ldc, int64_t sc, int64_t count) {
  TROUPE_GPU(cublasSgemmStridedBatched(c.blas.get(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                       static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                                       static_cast<int>(ldb), sb, a, static_cast<int>(lda), sa, &beta, out,
                                       static_cast<int>(ldc), sc, static_cast<int>(count)));
}

}  // namespace

int embedding_forward(void* ctx, float* out, const float* ids, const float* table, const float* positions,
                      int64_t batch, int64_t seq_len, int64_t, int64_t dim) {
  return on_device(ctx, [&](context& c) {
    launch_embedding_forward(c.compute.get(), out, ids, table, positions, batch, seq_len, dim);
  });
}

int embedding_backward(void* ctx, float* grad_table, float* grad_positions, const float* grad_out, const float* ids,
                       int64_t batch, int64_t seq_len, int64_t vocab, int64_t dim) {
  return on_device(ctx, [&](context& c) {
    launch_embedding_backward(c.compute.get(), grad_table, grad_positions, grad_out, ids, batch, seq_len, vocab, dim);
  });
}

// Per sequence, the heads as one batched GEMM (head h's columns are h * head_dim apart).
int attention_forward(void* ctx, float* out, float* probs, const float* qkv, int64_t batch, int64_t seq_len,
                      int64_t heads, int64_t head_dim) {
  return on_device(ctx, [&](context& c) {
    const int64_t t = seq_len, d = head_dim, dim = heads * head_dim, tt = t * t;
    const float scale = 1.f / std::sqrt(static_cast<float>(d));
    for (int64_t b = 0; b < batch; ++b) {
      const float* q = qkv + b * t * 3 * dim;
      gemm_batched(c, false, true, t, t, d, scale, q, 3 * dim, d, q + dim, 3 * dim, d, 0.f, probs + b * heads * tt, t,
                   tt, heads);
    }
    launch_causal_softmax(c.compute.get(), probs, batch * heads * t, t);
    for (int64_t b = 0; b < batch; ++b) {
      const float* v = qkv + b * t * 3 * dim + 2 * dim;
      gemm_batched(c, false, false, t, d, t, 1.f, probs + b * heads * tt, t, tt, v, 3 * dim, d, 0.f, out + b * t * dim,
                   dim, d, heads);
    }
  });
}

int attention_backward(void* ctx, float* grad_qkv, float* grad_probs, const float* grad_out, const float* qkv,
                       const float* probs, int64_t batch, int64_t seq_len, int64_t heads, int64_t head_dim) {
  return on_device(ctx, [&](context& c) {
    const int64_t t = seq_len, d = head_dim, dim = heads * head_dim, tt = t * t;
    const float scale = 1.f / std::sqrt(static_cast<float>(d));
    for (int64_t b = 0; b < batch; ++b) {
      const float* v = qkv + b * t * 3 * dim + 2 * dim;
      const float* dy = grad_out + b * t * dim;
      // dP = dY V^T; dV = P^T dY.
      gemm_batched(c, false, true, t, t, d, 1.f, dy, dim, d, v, 3 * dim, d, 0.f, grad_probs + b * heads * tt, t, tt,
                   heads);
      gemm_batched(c, true, false, t, d, t, 1.f, probs + b * heads * tt, t, tt, dy, dim, d, 0.f,
                   grad_qkv + b * t * 3 * dim + 2 * dim, 3 * dim, d, heads);
    }
    launch_causal_softmax_backward(c.compute.get(), grad_probs, probs, batch * heads * t, t, scale);
    for (int64_t b = 0; b < batch; ++b) {
      const float* q = qkv + b * t * 3 * dim;
      const float* ds = grad_probs + b * heads * tt;
      float* dq = grad_qkv + b * t * 3 * dim;
      // dQ = dS K; dK = dS^T Q.
      gemm_batched(c, false, false, t, d, t, 1.f, ds, t, tt, q + dim, 3 * dim, d, 0.f, dq, 3 * dim, d, heads);
      gemm_batched(c, true, false, t, d, t, 1.f, ds, t, tt, q, 3 * dim, d, 0.f, dq + dim, 3 * dim, d, heads);
    }
  });
}

int axpy(void* ctx, float* out, float alpha, const float* in, int64_t n) {
  return on_device(ctx, [&](context& c) { launch_axpy(c.compute.get(), out, alpha, in, n); });
}

int scale(void* ctx, float* out, float alpha, int64_t n) {
  return on_device(ctx, [&](context& c) { launch_scale(c.compute.get(), out, alpha, n); });
}

int conv2d_forward(void* ctx, float* out, const float* in, const float* weight, const float* bias, int64_t batch,
                   const troupe_conv_geom* g) {
  return on_device(ctx, [&](context& c) {
    const conv_plan& p = c.convs.get(c.dnn.get(), batch, *g, c.tf32);
    scratch ws(c, p.forward_workspace);
    const float one = 1.f, zero = 0.f;
    TROUPE_GPU(cudnnConvolutionForward(c.dnn.get(), &one, p.x.get(), in, p.w.get(), weight, p.conv.get(),
                                       p.forward_algo, ws.as<void>(), p.forward_workspace, &zero, p.y.get(), out));
    if (bias) {
      const int64_t positions = p.out_h * p.out_w;
      launch_channel_bias_add(c.compute.get(), out, bias, batch, g->out_channels, positions);
    }
  });
}

int conv2d_backward(void* ctx, float* grad_in, float* grad_weight, float* grad_bias, const float* grad_out,
                    const float* in, const float* weight, int64_t batch, const troupe_conv_geom* g) {
  return on_device(ctx, [&](context& c) {
    const conv_plan& p = c.convs.get(c.dnn.get(), batch, *g, c.tf32);
    const float one = 1.f, zero = 0.f;
    {
      scratch ws(c, p.filter_workspace);
      TROUPE_GPU(cudnnConvolutionBackwardFilter(c.dnn.get(), &one, p.x.get(), in, p.y.get(), grad_out, p.conv.get(),
                                                p.filter_algo, ws.as<void>(), p.filter_workspace, &one, p.w.get(),
                                                grad_weight));
    }
    if (grad_bias) launch_bias_grad(c.compute.get(), grad_bias, grad_out, batch, g->out_channels, p.out_h * p.out_w);
    if (grad_in) {
      scratch ws(c, p.data_workspace);
      TROUPE_GPU(cudnnConvolutionBackwardData(c.dnn.get(), &one, p.w.get(), weight, p.y.get(), grad_out, p.conv.get(),
                                              p.data_algo, ws.as<void>(), p.data_workspace, &zero, p.x.get(), grad_in));
    }
  });
}

int maxpool2d_forward(void* ctx, float* out, int32_t* argmax, const float* in, int64_t batch,
                      const troupe_pool_geom* g) {
  return on_device(ctx, [&](context& c) { launch_maxpool2d_forward(c.compute.get(), out, argmax, in, batch, *g); });
}

int maxpool2d_backward(void* ctx, float* grad_in, const float* grad_out, const int32_t* argmax, int64_t batch,
                       const troupe_pool_geom* g) {
  return on_device(ctx, [&](context& c) {
    TROUPE_GPU(cudaMemsetAsync(grad_in, 0, sizeof(float) * batch * g->channels * g->in_h * g->in_w, c.compute.get()));
    launch_maxpool2d_backward(c.compute.get(), grad_in, grad_out, argmax, batch, *g);
  });
}

// The per-row losses are summed on the host in row order (deterministic).
int softmax_xent_forward(void* ctx, float* probs, const float* logits, const int32_t* labels, int64_t rows,
                         int64_t classes, double* loss) {
  return on_device(ctx, [&](context& c) {
    if (rows == 0) {
      *loss = 0.0;
      return;
    }
    scratch row_loss(c, sizeof(double) * rows);
    launch_softmax_xent_forward(c.compute.get(), probs, row_loss.as<double>(), logits, labels, rows, classes);
    std::vector<double> host(static_cast<std::size_t>(rows));
    download_sync(c, host.data(), row_loss.as<double>(), sizeof(double) * rows);
    double sum = 0.0;
    for (double l : host) sum += l;
    *loss = sum / static_cast<double>(rows);
  });
}

int softmax_xent_backward(void* ctx, float* grad, const float* probs, const int32_t* labels, int64_t rows,
                          int64_t classes, float s) {
  return on_device(
      ctx, [&](context& c) { launch_softmax_xent_backward(c.compute.get(), grad, probs, labels, rows, classes, s); });
}

int count_correct(void* ctx, const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                  int64_t* correct) {
  return on_device(ctx, [&](context& c) {
    scratch counter(c, sizeof(unsigned long long));
    TROUPE_GPU(cudaMemsetAsync(counter.as<void>(), 0, sizeof(unsigned long long), c.compute.get()));
    launch_count_correct(c.compute.get(), counter.as<unsigned long long>(), logits, labels, rows, classes);
    unsigned long long n = 0;
    download_sync(c, &n, counter.as<void>(), sizeof n);
    *correct = static_cast<int64_t>(n);
  });
}

int all_finite(void* ctx, const float* x, int64_t n, int* finite) {
  return on_device(ctx, [&](context& c) {
    scratch flag(c, sizeof(unsigned int));
    TROUPE_GPU(cudaMemsetAsync(flag.as<void>(), 0, sizeof(unsigned int), c.compute.get()));
    launch_any_non_finite(c.compute.get(), flag.as<unsigned int>(), x, n);
    unsigned int bad = 0;
    download_sync(c, &bad, flag.as<void>(), sizeof bad);
    *finite = bad == 0 ? 1 : 0;
  });
}

int sgd_step(void* ctx, float* p, const float* g, float* v, int64_t n, const troupe_sgd_args* a) {
  return on_device(ctx, [&](context& c) { launch_sgd_step(c.compute.get(), p, g, v, n, *a); });
}

int adam_step(void* ctx, float* p, const float* g, float* m, float* v, int64_t n, const troupe_adam_args* a) {
  return on_device(ctx, [&](context& c) { launch_adam_step(c.compute.get(), p, g, m, v, n, *a); });
}

}  // namespace troupe::gpu::entry
