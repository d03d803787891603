// TROUPE_VECTOR_CLONES marks a host function whose loops the compiler vectorises: on
// x86-64 it is compiled three times, for AVX-512 (x86-64-v4), AVX2 with FMA (x86-64-v3)
// and the baseline (SSE2), and the loader picks the widest the CPU runs (GCC's
// target_clones, an ifunc). Elsewhere it is the one baseline function.
//
// Note [Vector clones]
// The build targets baseline x86-64 so that one binary runs on every x86-64 host, and
// at SSE2 the loops of GELU, LayerNorm and attention's softmax ran 4 to 7 times slower
// than at AVX-512 (GELU: 3.1 against 0.43 ns an element on this machine's EPYC). A
// clone's floating-point results can differ in the last bits from another clone's: the
// AVX2 and AVX-512 clones contract a * b + c into one fused multiply-add. Within one
// process every call goes to the same clone, so runs on one kind of CPU stay bitwise
// reproducible; hosts with different vector units differ in the last bits, as they do
// already through OpenBLAS's and oneDNN's own dispatch.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define TROUPE_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif

#ifndef TROUPE_VECTOR_CLONES
#define TROUPE_VECTOR_CLONES
#endif
