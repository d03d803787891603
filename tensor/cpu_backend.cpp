// The CPU backend's function table (tensor/backend_abi.h): each entry wraps the host op in
// tensor/ that computes it, so the table is the CPU reference through the same interface
// the CUDA module implements; its collectives are host_collective (threads of one
// process). A context owns the convolution workspace.
#include "tensor/cpu_backend.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/attention.hpp"
#include "tensor/backend_guard.hpp"
#include "tensor/batch_norm.hpp"
#include "tensor/conv.hpp"
#include "tensor/embedding.hpp"
#include "tensor/gemm.hpp"
#include "tensor/host_collective.hpp"
#include "tensor/layer_norm.hpp"
#include "tensor/loss.hpp"
#include "tensor/ops.hpp"
#include "tensor/pool.hpp"
#include "tensor/update_ops.hpp"

namespace troupe {

namespace {

struct cpu_context {
  std::vector<float> workspace;
  troupe_memory_stats stats{};
};

cpu_context& ctx_of(void* ctx) { return *static_cast<cpu_context*>(ctx); }

tensor_view f32(float* p, shape s) { return tensor_view(reinterpret_cast<std::byte*>(p), dtype::f32, s); }
const_tensor_view cf32(const float* p, shape s) {
  return const_tensor_view(reinterpret_cast<const std::byte*>(p), dtype::f32, s);
}
tensor_view i32(std::int32_t* p, shape s) { return tensor_view(reinterpret_cast<std::byte*>(p), dtype::i32, s); }
const_tensor_view ci32(const std::int32_t* p, shape s) {
  return const_tensor_view(reinterpret_cast<const std::byte*>(p), dtype::i32, s);
}

conv_geometry conv_of(const troupe_conv_geom& g) {
  return {g.in_channels, g.in_h, g.in_w, g.out_channels, g.kernel_h, g.kernel_w, g.stride, g.pad};
}
pool_geometry pool_of(const troupe_pool_geom& g) { return {g.channels, g.in_h, g.in_w, g.kernel, g.stride}; }

float* workspace(void* ctx, std::int64_t floats) {
  auto& w = ctx_of(ctx).workspace;
  if (static_cast<std::int64_t>(w.size()) < floats) w.resize(static_cast<std::size_t>(floats));
  return w.data();
}

const troupe_backend_v1 table = {
    .abi_version = TROUPE_BACKEND_ABI_VERSION,
    .name = "cpu",
    .open = [](int, void** ctx) { return guarded([&] { *ctx = new cpu_context(); }); },
    .close = [](void* ctx) { delete static_cast<cpu_context*>(ctx); },
    .last_error = [] { return backend_last_error().c_str(); },
    .device_count =
        [](int* count) {
          *count = 1;
          return 0;
        },
    .device_info =
        [](void*, troupe_device_info* info) {
          *info = {};
          std::strncpy(info->name, "host CPU (OpenBLAS)", sizeof info->name - 1);
          info->device_count = 1;
          return 0;
        },
    .set_tf32 = [](void*, int) { return 0; },
    .alloc =
        [](void* ctx, size_t bytes, void** ptr) {
          return guarded([&] {
            *ptr = std::aligned_alloc(tensor_alignment,
                                      (bytes + tensor_alignment - 1) / tensor_alignment * tensor_alignment);
            if (!*ptr && bytes) throw std::bad_alloc();
            auto& s = ctx_of(ctx).stats;
            ++s.allocations;
            ++s.device_mallocs;  // bytes are not tracked: the host allocator does not say a block's size
          });
        },
    .release =
        [](void*, void* ptr) {
          std::free(ptr);
          return 0;
        },
    .memory_stats =
        [](void* ctx, troupe_memory_stats* s) {
          *s = ctx_of(ctx).stats;
          return 0;
        },
    .upload =
        [](void*, void* dst, const void* src, size_t bytes) {
          std::memcpy(dst, src, bytes);
          return 0;
        },
    .download =
        [](void*, void* dst, const void* src, size_t bytes) {
          std::memcpy(dst, src, bytes);
          return 0;
        },
    .fill_zero =
        [](void*, void* p, size_t bytes) {
          std::memset(p, 0, bytes);
          return 0;
        },
    .synchronize = [](void*) { return 0; },
    .gemm =
        [](void*, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
          return guarded([&] {
            sgemm(ta ? transpose::yes : transpose::no, tb ? transpose::yes : transpose::no, m, n, k, alpha, a, lda, b,
                  ldb, beta, c, ldc);
          });
        },
    .bias_add = [](void*, float* out, const float* bias, int64_t rows,
                   int64_t cols) { return guarded([&] {
                                     bias_add(f32(out, {rows, cols}), cf32(bias, {cols}));
                                   }); },
    .channel_bias_add =
        [](void*, float* out, const float* bias, int64_t batch, int64_t channels, int64_t positions) {
          return guarded([&] { channel_bias_add(f32(out, {batch, channels, positions}), cf32(bias, {channels})); });
        },
    .bias_grad =
        [](void*, float* grad_bias, const float* grad_out, int64_t batch, int64_t channels, int64_t positions) {
          return guarded([&] {
            bias_grad_accumulate(f32(grad_bias, {channels}), cf32(grad_out, {batch, channels, positions}));
          });
        },
    .relu_forward = [](void*, float* out, const float* in,
                       int64_t n) { return guarded([&] { relu_forward(f32(out, {n}), cf32(in, {n})); }); },
    .relu_backward =
        [](void*, float* grad_in, const float* grad_out, const float* out, int64_t n) {
          return guarded([&] { relu_backward(f32(grad_in, {n}), cf32(grad_out, {n}), cf32(out, {n})); });
        },
    .axpy = [](void*, float* out, float alpha, const float* in,
               int64_t n) { return guarded([&] { axpy(f32(out, {n}), alpha, cf32(in, {n})); }); },
    .scale = [](void*, float* out, float alpha, int64_t n) { return guarded([&] { scale(f32(out, {n}), alpha); }); },
    .conv2d_forward =
        [](void* ctx, float* out, const float* in, const float* weight, const float* bias, int64_t batch,
           const troupe_conv_geom* gp) {
          return guarded([&] {
            const conv_geometry g = conv_of(*gp);
            TROUPE_CHECK(g.valid(), "invalid conv geometry");
            const std::int64_t ws = conv2d_workspace_floats(g);
            conv2d_forward(f32(out, {batch, g.out_channels, g.out_h(), g.out_w()}),
                           cf32(in, {batch, g.in_channels, g.in_h, g.in_w}),
                           cf32(weight, {g.out_channels, g.col_rows()}),
                           bias ? cf32(bias, {g.out_channels}) : const_tensor_view{}, g, f32(workspace(ctx, ws), {ws}));
          });
        },
    .conv2d_backward =
        [](void* ctx, float* grad_in, float* grad_weight, float* grad_bias, const float* grad_out, const float* in,
           const float* weight, int64_t batch, const troupe_conv_geom* gp) {
          return guarded([&] {
            const conv_geometry g = conv_of(*gp);
            TROUPE_CHECK(g.valid(), "invalid conv geometry");
            const std::int64_t ws = conv2d_workspace_floats(g);
            conv2d_backward(grad_in ? f32(grad_in, {batch, g.in_channels, g.in_h, g.in_w}) : tensor_view{},
                            f32(grad_weight, {g.out_channels, g.col_rows()}),
                            grad_bias ? f32(grad_bias, {g.out_channels}) : tensor_view{},
                            cf32(grad_out, {batch, g.out_channels, g.out_h(), g.out_w()}),
                            cf32(in, {batch, g.in_channels, g.in_h, g.in_w}),
                            cf32(weight, {g.out_channels, g.col_rows()}), g, f32(workspace(ctx, ws), {ws}));
          });
        },
    .maxpool2d_forward =
        [](void*, float* out, int32_t* argmax, const float* in, int64_t batch, const troupe_pool_geom* gp) {
          return guarded([&] {
            const pool_geometry g = pool_of(*gp);
            TROUPE_CHECK(g.valid(), "invalid pool geometry");
            const shape os{batch, g.channels, g.out_h(), g.out_w()};
            maxpool2d_forward(f32(out, os), i32(argmax, os), cf32(in, {batch, g.channels, g.in_h, g.in_w}), g);
          });
        },
    .maxpool2d_backward =
        [](void*, float* grad_in, const float* grad_out, const int32_t* argmax, int64_t batch,
           const troupe_pool_geom* gp) {
          return guarded([&] {
            const pool_geometry g = pool_of(*gp);
            TROUPE_CHECK(g.valid(), "invalid pool geometry");
            const shape os{batch, g.channels, g.out_h(), g.out_w()};
            maxpool2d_backward(f32(grad_in, {batch, g.channels, g.in_h, g.in_w}), cf32(grad_out, os), ci32(argmax, os),
                               g);
          });
        },
    .softmax_xent_forward =
        [](void*, float* probs, const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
           double* loss) {
          return guarded([&] {
            *loss =
                softmax_xent_forward(f32(probs, {rows, classes}), cf32(logits, {rows, classes}), ci32(labels, {rows}));
          });
        },
    .softmax_xent_backward =
        [](void*, float* grad, const float* probs, const int32_t* labels, int64_t rows, int64_t classes, float s) {
          return guarded([&] {
            softmax_xent_backward(f32(grad, {rows, classes}), cf32(probs, {rows, classes}), ci32(labels, {rows}), s);
          });
        },
    .count_correct =
        [](void*, const float* logits, const int32_t* labels, int64_t rows, int64_t classes, int64_t* correct) {
          return guarded([&] { *correct = count_correct(cf32(logits, {rows, classes}), ci32(labels, {rows})); });
        },
    .all_finite = [](void*, const float* x, int64_t n,
                     int* finite) { return guarded([&] { *finite = all_finite(cf32(x, {n})) ? 1 : 0; }); },
    .sgd_step =
        [](void*, float* p, const float* g, float* v, int64_t n, const troupe_sgd_args* a) {
          return guarded([&] {
            sgd_step(f32(p, {n}), cf32(g, {n}), f32(v, {n}),
                     fn::sgd_momentum{a->lr, a->momentum, a->weight_decay, a->nesterov != 0});
          });
        },
    .adam_step =
        [](void*, float* p, const float* g, float* m, float* v, int64_t n, const troupe_adam_args* a) {
          return guarded([&] {
            adam_step(f32(p, {n}), cf32(g, {n}), f32(m, {n}), f32(v, {n}),
                      fn::adam{a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->bias1, a->bias2_sqrt});
          });
        },
    .collective_id =
        [](unsigned char* id, size_t capacity, size_t* size) {
          return guarded([&] {
            const auto fresh = host_collective::new_id();
            if (capacity < fresh.size()) throw std::length_error("collective id buffer too small");
            std::copy(fresh.begin(), fresh.end(), id);
            *size = fresh.size();
          });
        },
    .collective_open =
        [](void*, const unsigned char* id, size_t size, int ranks, int rank, int64_t timeout_ms, void** comm) {
          return guarded([&] {
            auto c = host_collective::open(std::vector<unsigned char>(id, id + size), ranks, rank,
                                           std::chrono::milliseconds(timeout_ms));
            if (!c) throw std::runtime_error(c.error().message);
            *comm = c->release();
          });
        },
    .collective_close = [](void* comm) { delete static_cast<host_collective*>(comm); },
    .all_reduce_sum =
        [](void*, void* comm, float* const* buffers, const int64_t* counts, int buffer_count) {
          return guarded([&] {
            const std::string why = static_cast<host_collective*>(comm)->all_reduce(buffers, counts, buffer_count);
            if (!why.empty()) throw std::runtime_error(why);
          });
        },
    .copy =
        [](void*, void* dst, const void* src, size_t bytes) {
          std::memcpy(dst, src, bytes);
          return 0;
        },
    .gelu_forward = [](void*, float* out, const float* in,
                       int64_t n) { return guarded([&] { gelu_forward(f32(out, {n}), cf32(in, {n})); }); },
    .gelu_backward =
        [](void*, float* grad_in, const float* grad_out, const float* in, int64_t n) {
          return guarded([&] { gelu_backward(f32(grad_in, {n}), cf32(grad_out, {n}), cf32(in, {n})); });
        },
    .layer_norm_forward =
        [](void*, float* out, const float* in, const float* gamma, const float* beta, int64_t rows, int64_t cols,
           float eps) {
          return guarded([&] {
            layer_norm_forward(f32(out, {rows, cols}), cf32(in, {rows, cols}), cf32(gamma, {cols}),
                               cf32(beta, {cols}), eps);
          });
        },
    .layer_norm_backward =
        [](void*, float* grad_in, float* grad_gamma, float* grad_beta, const float* grad_out, const float* in,
           const float* gamma, int64_t rows, int64_t cols, float eps) {
          return guarded([&] {
            layer_norm_backward(grad_in ? f32(grad_in, {rows, cols}) : tensor_view{}, f32(grad_gamma, {cols}),
                                f32(grad_beta, {cols}), cf32(grad_out, {rows, cols}), cf32(in, {rows, cols}),
                                cf32(gamma, {cols}), eps);
          });
        },
    .embedding_forward =
        [](void*, float* out, const float* ids, const float* tab, const float* pos, int64_t batch, int64_t context,
           int64_t vocab, int64_t dim) {
          return guarded([&] {
            embedding_forward(f32(out, {batch, context, dim}), cf32(ids, {batch, context}), cf32(tab, {vocab, dim}),
                              cf32(pos, {context, dim}));
          });
        },
    .embedding_backward =
        [](void*, float* grad_tab, float* grad_pos, const float* grad_out, const float* ids, int64_t batch,
           int64_t context, int64_t vocab, int64_t dim) {
          return guarded([&] {
            embedding_backward(f32(grad_tab, {vocab, dim}), f32(grad_pos, {context, dim}),
                               cf32(grad_out, {batch, context, dim}), cf32(ids, {batch, context}));
          });
        },
    .attention_forward =
        [](void*, float* out, float* probs, const float* qkv, int64_t batch, int64_t context, int64_t heads,
           int64_t head_dim) {
          return guarded([&] {
            const attention_geometry g{context, heads, head_dim};
            causal_attention_forward(f32(out, {batch, context, g.dim()}), f32(probs, {batch, heads, context, context}),
                                     cf32(qkv, {batch, context, 3 * g.dim()}), g);
          });
        },
    .attention_backward =
        [](void*, float* grad_qkv, float* grad_probs, const float* grad_out, const float* qkv, const float* probs,
           int64_t batch, int64_t context, int64_t heads, int64_t head_dim) {
          return guarded([&] {
            const attention_geometry g{context, heads, head_dim};
            const shape p{batch, heads, context, context}, x{batch, context, 3 * g.dim()};
            causal_attention_backward(f32(grad_qkv, x), f32(grad_probs, p), cf32(grad_out, {batch, context, g.dim()}),
                                      cf32(qkv, x), cf32(probs, p), g);
          });
        },
    .dropout_forward =
        [](void*, float* out, float* kept, const float* in, int64_t n, float p, uint64_t key) {
          return guarded([&] { dropout_forward(f32(out, {n}), f32(kept, {n}), cf32(in, {n}), p, key); });
        },
    .dropout_backward =
        [](void*, float* grad_in, const float* grad_out, const float* kept, int64_t n) {
          return guarded([&] { dropout_backward(f32(grad_in, {n}), cf32(grad_out, {n}), cf32(kept, {n})); });
        },
    .batch_norm_forward =
        [](void*, float* out, float* stats, const float* in, const float* gamma, const float* beta, int64_t batch,
           int64_t channels, int64_t positions, float eps) {
          return guarded([&] {
            const shape x{batch, channels, positions};
            batch_norm_forward(f32(out, x), f32(stats, {2 * channels}), cf32(in, x), cf32(gamma, {channels}),
                               cf32(beta, {channels}), eps);
          });
        },
    .batch_norm_inference =
        [](void*, float* out, const float* in, const float* gamma, const float* beta, const float* population,
           int64_t batch, int64_t channels, int64_t positions, float eps) {
          return guarded([&] {
            const shape x{batch, channels, positions};
            batch_norm_inference(f32(out, x), cf32(in, x), cf32(gamma, {channels}), cf32(beta, {channels}),
                                 cf32(population, {2 * channels}), eps);
          });
        },
    .batch_norm_backward =
        [](void*, float* grad_in, float* grad_gamma, float* grad_beta, const float* grad_out, const float* in,
           const float* gamma, const float* stats, int64_t batch, int64_t channels, int64_t positions) {
          return guarded([&] {
            const shape x{batch, channels, positions};
            batch_norm_backward(grad_in ? f32(grad_in, x) : tensor_view{}, f32(grad_gamma, {channels}),
                                f32(grad_beta, {channels}), cf32(grad_out, x), cf32(in, x), cf32(gamma, {channels}),
                                cf32(stats, {2 * channels}));
          });
        },
};

}  // namespace

const troupe_backend_v1* cpu_backend_table() { return &table; }

}  // namespace troupe
