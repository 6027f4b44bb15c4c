/* CRC-32 (zlib's polynomial, reflected 0xEDB88320) for the compiled core.
 *
 * On x86-64 CPUs with PCLMULQDQ and SSE4.1 the bulk of a buffer is folded with carry-less
 * multiplication (Gopal, Ozturk et al., "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ Instruction", Intel, 2009: fold four 128-bit lanes by 512 bits, then to one lane,
 * then to 64 bits, then a Barrett reduction); the tail (< 16 bytes) and every other machine
 * use zlib's crc32. The result is zlib's crc32, bit for bit: tests/test_speedups.py checks
 * both paths against zlib.crc32 over every length and alignment up to a few hundred bytes.
 */
#ifndef TIERED_CRC32_CLMUL_H
#define TIERED_CRC32_CLMUL_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

/* zlib takes an unsigned int length: feed it pieces of at most 1 GiB. */
static uint32_t tiered_crc32_zlib(uint32_t crc, const unsigned char *p, size_t n) {
    while (n > 0x40000000u) {
        crc = (uint32_t)crc32(crc, p, 0x40000000u);
        p += 0x40000000u;
        n -= 0x40000000u;
    }
    return (uint32_t)crc32(crc, p, (unsigned int)n);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define TIERED_CLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

/* The raw (pre-inverted) CRC state after folding n bytes of p into state; n >= 64, n % 16 == 0. */
TIERED_CLMUL_TARGET static uint32_t tiered_crc32_fold(uint32_t state, const unsigned char *p, size_t n) {
    /* x^(4*128+32) mod P, x^(4*128-32) mod P (512-bit fold), then the 128-bit fold pair,
       x^64 mod P for the 64-bit step, and P' / mu for Barrett, all bit-reflected. */
    const __m128i fold512 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i fold128 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i fold64 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i barrett = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i a = _mm_loadu_si128((const __m128i *)(p + 0));
    __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(p + 48));
    __m128i t, u;

    a = _mm_xor_si128(a, _mm_cvtsi32_si128((int)state));
    p += 64;
    n -= 64;
    while (n >= 64) {
        t = _mm_clmulepi64_si128(a, fold512, 0x00);
        a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, fold512, 0x11), t),
                          _mm_loadu_si128((const __m128i *)(p + 0)));
        t = _mm_clmulepi64_si128(b, fold512, 0x00);
        b = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(b, fold512, 0x11), t),
                          _mm_loadu_si128((const __m128i *)(p + 16)));
        t = _mm_clmulepi64_si128(c, fold512, 0x00);
        c = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(c, fold512, 0x11), t),
                          _mm_loadu_si128((const __m128i *)(p + 32)));
        t = _mm_clmulepi64_si128(d, fold512, 0x00);
        d = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(d, fold512, 0x11), t),
                          _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        n -= 64;
    }
    /* four lanes into one */
    t = _mm_clmulepi64_si128(a, fold128, 0x00);
    a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, fold128, 0x11), t), b);
    t = _mm_clmulepi64_si128(a, fold128, 0x00);
    a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, fold128, 0x11), t), c);
    t = _mm_clmulepi64_si128(a, fold128, 0x00);
    a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, fold128, 0x11), t), d);
    while (n >= 16) {
        t = _mm_clmulepi64_si128(a, fold128, 0x00);
        a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, fold128, 0x11), t),
                          _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    /* 128 bits to 64 */
    t = _mm_clmulepi64_si128(a, fold128, 0x10);
    a = _mm_xor_si128(_mm_srli_si128(a, 8), t);
    u = _mm_srli_si128(a, 4);
    a = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), fold64, 0x00), u);
    /* Barrett reduction to 32 bits */
    t = _mm_clmulepi64_si128(_mm_and_si128(a, low32), barrett, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), barrett, 0x00);
    a = _mm_xor_si128(a, t);
    return (uint32_t)_mm_extract_epi32(a, 1);
}

static int tiered_crc32_clmul_state = -1; /* -1 unknown, 0 absent, 1 present */

static int tiered_crc32_has_clmul(void) {
    if (tiered_crc32_clmul_state < 0) {
        __builtin_cpu_init();
        tiered_crc32_clmul_state = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    }
    return tiered_crc32_clmul_state;
}

/* zlib's crc32(crc, p, n); use_clmul = 0 forces zlib's code (tests compare both). */
static uint32_t tiered_crc32_with(uint32_t crc, const unsigned char *p, size_t n, int use_clmul) {
    if (use_clmul && n >= 64 && tiered_crc32_has_clmul()) {
        size_t bulk = n & ~(size_t)15;
        crc = ~tiered_crc32_fold(~crc, p, bulk);
        p += bulk;
        n -= bulk;
        if (n == 0)
            return crc;
    }
    return tiered_crc32_zlib(crc, p, n);
}

#else

static int tiered_crc32_has_clmul(void) { return 0; }

static uint32_t tiered_crc32_with(uint32_t crc, const unsigned char *p, size_t n, int use_clmul) {
    (void)use_clmul;
    return tiered_crc32_zlib(crc, p, n);
}

#endif

static uint32_t tiered_crc32(uint32_t crc, const unsigned char *p, size_t n) {
    return tiered_crc32_with(crc, p, n, 1);
}

#endif
