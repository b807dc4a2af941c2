// Fused LinUCB steps on the per-arm inverse Gram matrices, for float and double.
//
// A torch C++ extension (torch.utils.cpp_extension), built and loaded by
// torchroute/functional/ridge_kernel.py, which documents the math and checks every argument
// before the call. Every array is C-contiguous: a_inv [R, K, d, d] (symmetric),
// theta [R, K, d], x [R, B, d]. Trials share nothing and are split over at::parallel_for,
// which honours torch's thread settings (torch.set_num_threads, OMP_NUM_THREADS).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

namespace {

// item(0..n-1) on up to `threads` of torch's intra-op threads (the caller alone for 1). The
// threads claim one item at a time from a shared counter rather than a fixed share each, so a
// thread that the machine does not schedule holds up only the item it has claimed: the others
// (the caller included) take the rest.
template <typename F>
void run(int64_t n, int64_t threads, const F &item) {
    if (threads <= 1 || n <= 1) {
        for (int64_t i = 0; i < n; ++i) item(i);
        return;
    }
    std::atomic<int64_t> next{0};
    at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
        for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
             i = next.fetch_add(1, std::memory_order_relaxed))
            item(i);
    });
}

template <typename T>
T *scratch(int64_t size) {
    thread_local std::vector<T> buffer;
    if (int64_t(buffer.size()) < size) buffer.resize(size);
    return buffer.data();
}

constexpr int64_t kTile = 32;  // rows (and columns) per diagonal block of the quadratic form

// x^T A x for a symmetric A [d, d] from its block upper triangle: with the rows cut into
// blocks of kTile, diag[j] = sum_{i in block(j)} x_i A_ij and upper[j] = the same sum over the
// rows of the blocks before j's, so x^T A x = sum_j x_j (diag[j] + 2 upper[j]). Rows are added
// four at a time (axpy form: no reduction chain in the inner loop). Reads about half of A.
template <typename T>
T quad_form(const T *a, const T *x, int64_t d, T *diag, T *upper) {
    for (int64_t j = 0; j < d; ++j) diag[j] = upper[j] = 0;
    for (int64_t i0 = 0; i0 < d; i0 += kTile) {
        const int64_t i1 = i0 + kTile < d ? i0 + kTile : d;
        int64_t i = i0;
        for (; i + 4 <= i1; i += 4) {
            const T *r0 = a + i * d, *r1 = r0 + d, *r2 = r1 + d, *r3 = r2 + d;
            const T x0 = x[i], x1 = x[i + 1], x2 = x[i + 2], x3 = x[i + 3];
#pragma omp simd
            for (int64_t j = i0; j < i1; ++j)
                diag[j] += x0 * r0[j] + x1 * r1[j] + x2 * r2[j] + x3 * r3[j];
#pragma omp simd
            for (int64_t j = i1; j < d; ++j)
                upper[j] += x0 * r0[j] + x1 * r1[j] + x2 * r2[j] + x3 * r3[j];
        }
        for (; i < i1; ++i) {
            const T *r0 = a + i * d;
            const T x0 = x[i];
#pragma omp simd
            for (int64_t j = i0; j < i1; ++j) diag[j] += x0 * r0[j];
#pragma omp simd
            for (int64_t j = i1; j < d; ++j) upper[j] += x0 * r0[j];
        }
    }
    T quad = 0;
#pragma omp simd reduction(+ : quad)
    for (int64_t j = 0; j < d; ++j) quad += x[j] * (diag[j] + 2 * upper[j]);
    return quad;
}

// IEEE half <-> float, one value (the fallback of the vector loops below).
inline float half_to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu, bits;
    if (exponent == 0x1fu) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign;
    } else {  // subnormal: normalise
        int shift = 0;
        while (!(mantissa & 0x400u)) {
            mantissa <<= 1;
            ++shift;
        }
        bits = sign | (uint32_t(113 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// dst[j] = float16(scale * src[j]), rounded to nearest even.
inline void store_half(const float *src, uint16_t *dst, int64_t n, float scale) {
    int64_t j = 0;
#if defined(__F16C__) && defined(__AVX2__)
    const __m256 s = _mm256_set1_ps(scale);
    for (; j + 8 <= n; j += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(s, _mm256_loadu_ps(src + j)), 0);
        _mm_storeu_si128((__m128i *)(dst + j), h);
    }
#endif
    for (; j < n; ++j) dst[j] = std::bit_cast<uint16_t>(static_cast<_Float16>(scale * src[j]));
}

// quad_form on float16 rows h (of scale * A) with float accumulation, divided by scale.
float quad_form_half(const uint16_t *h, const float *x, int64_t d, float scale, float *diag,
                     float *upper) {
    for (int64_t j = 0; j < d; ++j) diag[j] = upper[j] = 0;
    for (int64_t i0 = 0; i0 < d; i0 += kTile) {
        const int64_t i1 = i0 + kTile < d ? i0 + kTile : d;
        for (int64_t i = i0; i < i1; ++i) {
            const uint16_t *row = h + i * d;
            const float xi = x[i];
            int64_t j = i0;
#if defined(__F16C__) && defined(__AVX2__)
            if (i + 4 <= i1) {  // four rows at a time, eight columns per step
                const uint16_t *r1 = row + d, *r2 = r1 + d, *r3 = r2 + d;
                const __m256 x0 = _mm256_set1_ps(xi), x1 = _mm256_set1_ps(x[i + 1]),
                             x2 = _mm256_set1_ps(x[i + 2]), x3 = _mm256_set1_ps(x[i + 3]);
                for (; j + 8 <= d; j += 8) {
                    auto load = [j](const uint16_t *r) {
                        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + j)));
                    };
                    __m256 acc = _mm256_mul_ps(x0, load(row));
                    acc = _mm256_fmadd_ps(x1, load(r1), acc);
                    acc = _mm256_fmadd_ps(x2, load(r2), acc);
                    acc = _mm256_fmadd_ps(x3, load(r3), acc);
                    float *target = j < i1 ? diag : upper;
                    _mm256_storeu_ps(target + j, _mm256_add_ps(_mm256_loadu_ps(target + j), acc));
                }
                for (int64_t jj = j; jj < d; ++jj) {
                    const float v = xi * half_to_float(row[jj]) + x[i + 1] * half_to_float(r1[jj]) +
                                    x[i + 2] * half_to_float(r2[jj]) +
                                    x[i + 3] * half_to_float(r3[jj]);
                    (jj < i1 ? diag : upper)[jj] += v;
                }
                i += 3;
                continue;
            }
#endif
            for (; j < d; ++j) (j < i1 ? diag : upper)[j] += xi * half_to_float(row[j]);
        }
    }
    float quad = 0;
#pragma omp simd reduction(+ : quad)
    for (int64_t j = 0; j < d; ++j) quad += x[j] * (diag[j] + 2 * upper[j]);
    return quad / scale;
}

template <typename T>
T dot(const T *a, const T *b, int64_t d) {
    T acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t j = 0; j < d; ++j) acc += a[j] * b[j];
    return acc;
}

// Optional per-arm shortcuts shared by the two steps (null pointers: none).
// prior [R, K]: c >= 0 while arm k of trial r is still at its prior A^{-1} = c I, theta = 0
//   (then x^T A^{-1} x = c |x|^2 without reading A); -1 once it has an observation.
// half [R, K, d, d], half_scale [R]: float16 copies of half_scale_r * A^{-1} (upper block
//   triangle kept current), read for the widths instead of A^{-1} (float32 only).
template <typename T>
struct Shortcuts {
    T *prior;
    uint16_t *half;
    const T *half_scale;
};

// out [R, B, K] = x^T theta_k + alpha_r sqrt(max(x^T A_k^{-1} x, 0)), alpha_r = alpha when
// alpha_r is null (one value for all trials).
template <typename T>
void scores(const T *a_inv, const T *theta, const T *x, double alpha, const T *alpha_r,
            Shortcuts<T> cut, T *out, int64_t r_total, int64_t k_total, int64_t b_total, int64_t d,
            int64_t threads) {
    run(r_total, threads, [&](int64_t r) {
        T *work = scratch<T>(2 * d);
        const T scale = alpha_r ? alpha_r[r] : T(alpha);
        for (int64_t k = 0; k < k_total; ++k) {
            const int64_t arm = r * k_total + k;
            const T prior = cut.prior ? cut.prior[arm] : T(-1);
            for (int64_t b = 0; b < b_total; ++b) {
                const T *xb = x + (r * b_total + b) * d;
                T mean = 0, quad;
                if (prior >= 0) {
                    quad = prior * dot(xb, xb, d);
                } else {
                    mean = dot(theta + arm * d, xb, d);
                    if constexpr (std::is_same_v<T, float>) {
                        if (cut.half) {
                            quad = quad_form_half(cut.half + arm * d * d, xb, d,
                                                  cut.half_scale[r], work, work + d);
                        } else {
                            quad = quad_form(a_inv + arm * d * d, xb, d, work, work + d);
                        }
                    } else {
                        quad = quad_form(a_inv + arm * d * d, xb, d, work, work + d);
                    }
                }
                const T width = std::sqrt(quad > 0 ? quad : T(0));
                out[(r * b_total + b) * k_total + k] = mean + scale * width;
            }
        }
    });
}

// One bandit observation per trial: arm k = arm[r], reward [R, K] read at k when
// observed [R, K] is set there (else the trial is left unchanged). With ax = A_k x (the axpy
// sum_i x_i A_i. of a symmetric A) and s = 1 / (1 + x^T ax): theta_k += s (y - x^T theta_k) ax
// and A_ij -= s (ax_i ax_j); ax_i ax_j is commutative, so a symmetric A stays exactly
// symmetric. Returns the number of trials whose arm is out of [0, K) (those are skipped).
// (ax from the block upper triangle, with a dot product per row for the lower part, reads
// half as much but measured 1.3x slower here: 3.5 vs 4.5 us at d = 128, compute-bound.)
template <typename T>
int64_t sherman_morrison_played(T *a_inv, T *theta, const T *x, const int64_t *arm,
                                const T *reward, const bool *observed, Shortcuts<T> cut,
                                int64_t r_total, int64_t k_total, int64_t d, int64_t threads) {
    std::atomic<int64_t> bad{0};
    run(r_total, threads, [&](int64_t r) {
        const int64_t k = arm[r];
        if (k < 0 || k >= k_total) {
            bad.fetch_add(1, std::memory_order_relaxed);
            return;
        }
        if (!observed[r * k_total + k]) return;
        T *a = a_inv + (r * k_total + k) * d * d;
        T *th = theta + (r * k_total + k) * d;
        const T *xr = x + r * d;
        T *ax = scratch<T>(d);
        for (int64_t j = 0; j < d; ++j) ax[j] = 0;
        for (int64_t i = 0; i < d; ++i) {
            const T *row = a + i * d;
            const T xi = xr[i];
#pragma omp simd
            for (int64_t j = 0; j < d; ++j) ax[j] += xi * row[j];
        }
        const T s = 1 / (1 + dot(ax, xr, d));
        const T step = s * (reward[r * k_total + k] - dot(th, xr, d));
        uint16_t *half = cut.half ? cut.half + (r * k_total + k) * d * d : nullptr;
        const float half_scale = cut.half ? float(cut.half_scale[r]) : 0.0f;
        (void)half_scale;
        for (int64_t i = 0; i < d; ++i) {
            T *row = a + i * d;
            const T c = ax[i];
#pragma omp simd
            for (int64_t j = 0; j < d; ++j) row[j] -= s * (c * ax[j]);
            th[i] += step * c;
            if constexpr (std::is_same_v<T, float>) {
                if (half) {  // the block upper triangle, from the first column of i's block
                    const int64_t j0 = i - i % kTile;
                    store_half(row + j0, half + i * d + j0, d - j0, half_scale);
                }
            }
        }
        if (cut.prior) cut.prior[r * k_total + k] = -1;
    });
    return bad.load();
}

// The torch operators: pointers come from tensors that ridge_kernel.py has checked
// (dtype, device, contiguity, shape); optional shortcuts are None or such tensors.
template <typename T>
T *ptr(const std::optional<at::Tensor> &t) {
    return t.has_value() ? t->data_ptr<T>() : nullptr;
}

template <typename T>
Shortcuts<T> shortcuts(const std::optional<at::Tensor> &prior,
                       const std::optional<at::Tensor> &half,
                       const std::optional<at::Tensor> &half_scale) {
    return Shortcuts<T>{ptr<T>(prior),
                        half.has_value() ? static_cast<uint16_t *>(half->data_ptr()) : nullptr,
                        ptr<T>(half_scale)};
}

void linucb_scores_op(const at::Tensor &a_inv, const at::Tensor &theta, const at::Tensor &x,
                      double alpha, const std::optional<at::Tensor> &alpha_r,
                      const std::optional<at::Tensor> &prior, const std::optional<at::Tensor> &half,
                      const std::optional<at::Tensor> &half_scale, const at::Tensor &out,
                      int64_t threads) {
    const int64_t r = a_inv.size(0), k = a_inv.size(1), d = a_inv.size(3), b = x.size(1);
    if (a_inv.scalar_type() == at::kFloat) {
        scores(a_inv.data_ptr<float>(), theta.data_ptr<float>(), x.data_ptr<float>(), alpha,
               ptr<float>(alpha_r), shortcuts<float>(prior, half, half_scale),
               out.data_ptr<float>(), r, k, b, d, threads);
    } else {
        scores(a_inv.data_ptr<double>(), theta.data_ptr<double>(), x.data_ptr<double>(), alpha,
               ptr<double>(alpha_r), shortcuts<double>(prior, half, half_scale),
               out.data_ptr<double>(), r, k, b, d, threads);
    }
}

// LinUCB's act in one call: the scores of linucb_scores_op, then per context the arm with the
// largest score, ties (scores equal to the maximum) broken by the largest noise [R, B, K]
// (the first such arm on equal noise; arm 0 when no score compares, e.g. NaN), as
// torchroute.functional.sampling.argmax_random_ties does with the same draws. Writes
// action [R, B] (int64) and the one-hot probs [R, B, K].
template <typename T, typename N>
void pick(const T *scores, const N *noise, int64_t *action, T *probs, int64_t rows, int64_t k) {
    for (int64_t i = 0; i < rows; ++i) {
        const T *s = scores + i * k;
        const N *u = noise + i * k;
        T best = s[0];
        for (int64_t a = 1; a < k; ++a)
            if (std::isnan(s[a]) || s[a] > best) best = s[a];  // NaN sticks (torch's amax)
        int64_t arm = 0;
        N top = N(-1);
        for (int64_t a = 0; a < k; ++a) {
            const N v = s[a] >= best ? u[a] : N(-1);
            if (v > top) {
                top = v;
                arm = a;
            }
        }
        action[i] = arm;
        for (int64_t a = 0; a < k; ++a) probs[i * k + a] = a == arm ? T(1) : T(0);
    }
}

void linucb_act_op(const at::Tensor &a_inv, const at::Tensor &theta, const at::Tensor &x,
                   double alpha, const std::optional<at::Tensor> &alpha_r,
                   const std::optional<at::Tensor> &prior, const std::optional<at::Tensor> &half,
                   const std::optional<at::Tensor> &half_scale, const at::Tensor &noise,
                   const at::Tensor &action, const at::Tensor &probs, int64_t threads) {
    const int64_t r = a_inv.size(0), k = a_inv.size(1), b = x.size(1);
    const at::Tensor scores = at::empty({r, b, k}, a_inv.options());
    linucb_scores_op(a_inv, theta, x, alpha, alpha_r, prior, half, half_scale, scores, threads);
    int64_t *act = action.data_ptr<int64_t>();
    auto run_pick = [&](auto *s, auto *p) {
        if (noise.scalar_type() == at::kFloat) {
            pick(s, noise.data_ptr<float>(), act, p, r * b, k);
        } else {
            pick(s, noise.data_ptr<double>(), act, p, r * b, k);
        }
    };
    if (a_inv.scalar_type() == at::kFloat) {
        run_pick(scores.data_ptr<float>(), probs.data_ptr<float>());
    } else {
        run_pick(scores.data_ptr<double>(), probs.data_ptr<double>());
    }
}

int64_t sherman_morrison_played_op(const at::Tensor &a_inv, const at::Tensor &theta,
                                   const at::Tensor &x, const at::Tensor &arm,
                                   const at::Tensor &reward, const at::Tensor &observed,
                                   const std::optional<at::Tensor> &prior,
                                   const std::optional<at::Tensor> &half,
                                   const std::optional<at::Tensor> &half_scale, int64_t threads) {
    const int64_t r = a_inv.size(0), k = a_inv.size(1), d = a_inv.size(3);
    const int64_t *arms = arm.data_ptr<int64_t>();
    const bool *seen = observed.data_ptr<bool>();
    if (a_inv.scalar_type() == at::kFloat) {
        return sherman_morrison_played(a_inv.data_ptr<float>(), theta.data_ptr<float>(),
                                       x.data_ptr<float>(), arms, reward.data_ptr<float>(), seen,
                                       shortcuts<float>(prior, half, half_scale), r, k, d,
                                       threads);
    }
    return sherman_morrison_played(a_inv.data_ptr<double>(), theta.data_ptr<double>(),
                                   x.data_ptr<double>(), arms, reward.data_ptr<double>(), seen,
                                   shortcuts<double>(prior, half, half_scale), r, k, d, threads);
}

}  // namespace

TORCH_LIBRARY(torchroute_ridge, m) {
    m.def(
        "linucb_scores(Tensor a_inv, Tensor theta, Tensor x, float alpha, Tensor? alpha_r, "
        "Tensor? prior, Tensor? half, Tensor? half_scale, Tensor(a!) out, int threads) -> ()",
        &linucb_scores_op);
    m.def(
        "linucb_act(Tensor a_inv, Tensor theta, Tensor x, float alpha, Tensor? alpha_r, "
        "Tensor? prior, Tensor? half, Tensor? half_scale, Tensor noise, Tensor(a!) action, "
        "Tensor(b!) probs, int threads) -> ()",
        &linucb_act_op);
    m.def(
        "sherman_morrison_played(Tensor(a!) a_inv, Tensor(b!) theta, Tensor x, Tensor arm, "
        "Tensor reward, Tensor observed, Tensor(c!)? prior, Tensor(d!)? half, "
        "Tensor? half_scale, int threads) -> int",
        &sherman_morrison_played_op);
}
