// Per-ISA copies of a hot CPU loop, chosen when the program loads.
//
// TCN_SIMD_CLONES on a function: GCC and Clang compile it for AVX-512, AVX2 and
// baseline x86-64 and an ifunc picks the widest the CPU has, so the generic
// build stays portable and this machine runs 512-bit vectors. The copies may
// differ in the last bit where the wider ones contract a * b + c into FMAs.
// Elsewhere (not x86-64), a no-op. Used by dropout's Philox and mask loops,
// the CPU LSTM cell and the float32 -> bfloat16 conversion.
//
// TCN_ALWAYS_INLINE: a loop body that a cloned function calls must be inlined
// into each copy to be compiled for its ISA; GCC does not always do it unasked.
#pragma once

// Not under ThreadSanitizer: it instruments the ifunc resolver, which the loader
// runs before TSan has started (the program dies while loading).
#if defined(__SANITIZE_THREAD__)
#define TCN_NO_SIMD_CLONES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TCN_NO_SIMD_CLONES 1
#endif
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(TCN_NO_SIMD_CLONES)
#define TCN_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TCN_SIMD_CLONES
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TCN_ALWAYS_INLINE [[gnu::always_inline]]
// The same for a lambda, after its parameter list: [](float x) TCN_LAMBDA_INLINE { ... }
#define TCN_LAMBDA_INLINE __attribute__((always_inline))
#else
#define TCN_ALWAYS_INLINE
#define TCN_LAMBDA_INLINE
#endif
