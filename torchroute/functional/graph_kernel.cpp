// The SquareCB-G interior-point solver, one instance per work item, in float64.
//
// Part of the torch C++ extension built by torchroute/functional/ridge_kernel.py; the
// operator is wrapped (and its arguments checked) by torchroute/functional/graph_kernel.py.
// The iteration is the one of torchroute/functional/graph_program.py (its module docstring
// has the math), written as plain loops on K x K arrays: f [N, K] are the scaled losses
// f' = gamma (f - min f), g [N, K, K] the graph with its diagonal (0/1), scale [N] = tol
// gamma. Instances are independent and are claimed in small chunks by torch's intra-op
// threads (at::parallel_for), so a thread that the machine does not schedule delays only
// the chunk it holds.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr double kSigma = 0.1;       // centring
constexpr double kSigmaFull = 0.03;  // ... after a full step
constexpr double kFull = 0.99;
constexpr double kEta = 0.99;   // fraction to the boundary
constexpr double kFloor = 0.3;  // floor of the complementarity target / threshold
constexpr double kTrials[4] = {1.0, 0.7, 0.4, 0.1};

// min / max that return NaN when either side is NaN (as torch's amin / amax do).
inline double nmin(double a, double b) { return (a < b || std::isnan(a)) ? a : b; }
inline double nmax(double a, double b) { return (a > b || std::isnan(a)) ? a : b; }

inline double sum(const double *a, int64_t k) {
    double acc = 0;
    for (int64_t i = 0; i < k; ++i) acc += a[i];
    return acc;
}

inline double dot(const double *a, const double *b, int64_t k) {
    double acc = 0;
    for (int64_t i = 0; i < k; ++i) acc += a[i] * b[i];
    return acc;
}

// out_j = sum_i v_i G_ij (w = G^T p).
inline void apply_gt(const double *g, const double *v, double *out, int64_t k) {
    for (int64_t j = 0; j < k; ++j) out[j] = 0;
    for (int64_t i = 0; i < k; ++i) {
        const double vi = v[i];
        const double *row = g + i * k;
        for (int64_t j = 0; j < k; ++j) out[j] += vi * row[j];
    }
}

// out_i = sum_j G_ij v_j ("G applied").
inline void apply_g(const double *g, const double *v, double *out, int64_t k) {
    for (int64_t i = 0; i < k; ++i) out[i] = dot(g + i * k, v, k);
}

// Upper Cholesky factor of the symmetric n x n a (a = U^T U, U in u); false unless positive
// definite (LAPACK potrf's info != 0).
bool cholesky(const double *a, double *u, int64_t n) {
    for (int64_t i = 0; i < n * n; ++i) u[i] = 0;
    for (int64_t j = 0; j < n; ++j) {
        double s = a[j * n + j];
        for (int64_t q = 0; q < j; ++q) s -= u[q * n + j] * u[q * n + j];
        if (!(s > 0)) return false;  // also NaN
        const double ujj = std::sqrt(s);
        u[j * n + j] = ujj;
        for (int64_t i = j + 1; i < n; ++i) {
            double t = a[j * n + i];
            for (int64_t q = 0; q < j; ++q) t -= u[q * n + j] * u[q * n + i];
            u[j * n + i] = t / ujj;
        }
    }
    return true;
}

// x = (U^T U)^{-1} b, in place.
void cholesky_solve(const double *u, double *x, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
        double t = x[j];
        for (int64_t q = 0; q < j; ++q) t -= u[q * n + j] * x[q];
        x[j] = t / u[j * n + j];
    }
    for (int64_t j = n - 1; j >= 0; --j) {
        double t = x[j];
        for (int64_t q = j + 1; q < n; ++q) t -= u[j * n + q] * x[q];
        x[j] = t / u[j * n + j];
    }
}

// A step direction on x = [p, lambda, s, w, z]: pointers into one array of 4K + 1.
struct Direction {
    double *dp, *dlam, *ds, *dw, *dz;
    Direction(double *base, int64_t k)
        : dp(base), dlam(base + k), ds(base + 2 * k), dw(base + 3 * k), dz(base + 4 * k) {}
};

// Scratch of one instance: every vector below, carved from one thread-local buffer.
struct Work {
    int64_t k;
    double *gt, *iw, *ip, *r, *omw, *coef, *gf, *u, *iu, *d, *r2, *cl, *cd, *cu, *g_r2, *g_cl,
        *g_cd, *g_cu, *c, *grad, *sp, *m, *q, *e, *du, *du2, *pt, *tmp, *tmp2, *v2;
    double *rhs, *unit, *rhs2;  // K + 1
    double *mat, *chol;         // (K + 1)^2
    double *delta, *delta2;     // 4K + 1

    explicit Work(int64_t k_) : k(k_) {
        const int64_t n1 = k + 1;
        thread_local std::vector<double> buffer;
        const int64_t need = k * k + 29 * k + 3 * n1 + 2 * n1 * n1 + 2 * (4 * k + 1);
        if (int64_t(buffer.size()) < need) buffer.resize(need);
        double *at = buffer.data();
        auto take = [&at](int64_t size) {
            double *out = at;
            at += size;
            return out;
        };
        gt = take(k * k);
        double **vectors[] = {&iw,   &ip,   &r,    &omw,  &coef, &gf,  &u,  &iu, &d,  &r2,
                              &cl,   &cd,   &cu,   &g_r2, &g_cl, &g_cd, &g_cu, &c, &grad, &sp,
                              &m,    &q,    &e,    &du,   &du2,  &pt,  &tmp, &tmp2, &v2};
        for (double **v : vectors) *v = take(k);
        rhs = take(n1);
        unit = take(n1);
        rhs2 = take(n1);
        mat = take(n1 * n1);
        chol = take(n1 * n1);
        delta = take(4 * k + 1);
        delta2 = take(4 * k + 1);
    }
};

// min(1, eta alpha_max): alpha_max keeps p, lambda, s (the first 3K entries) positive.
double longest(const double *x, const double *delta, int64_t k) {
    double worst = INFINITY;
    for (int64_t i = 0; i < 3 * k; ++i) worst = nmin(worst, delta[i] / x[i]);
    return -kEta / nmin(worst, -kEta);
}

// The longest of the trial steps along delta (fractions of `longest`) at which -h stays
// above 1% of u on the chord from 0 (graph_program.py's line search).
double chord_search(const double *x, const double *delta, const double *f, const Work &wk,
                    double top) {
    const int64_t k = wk.k;
    const double *p = x, *w = x + 3 * k, z = x[4 * k];
    const double *dp = delta, *dw = delta + 3 * k, dz = delta[4 * k];
    double best = -INFINITY;
    for (double frac : kTrials) {
        const double t = top * frac;
        double spr = 0;
        for (int64_t a = 0; a < k; ++a) {
            const double pc = p[a] + t * dp[a];
            const double iwc = 1.0 / (w[a] + t * dw[a]);
            wk.tmp[a] = pc * iwc;  // rc
            wk.tmp2[a] = iwc;
            spr += pc * wk.tmp[a];
        }
        const double uc = z + t * dz - spr;
        double ratio = INFINITY;
        for (int64_t a = 0; a < k; ++a) {
            const double bound = 0.99 * wk.u[a];
            double excess = (f[a] - 0.01 * wk.u[a]) - (wk.tmp2[a] - 2.0 * wk.tmp[a]) + uc;
            excess = std::isnan(excess) ? excess : (excess < 0 ? excess : 0.0);
            ratio = nmin(ratio, bound / (bound - excess));
        }
        best = nmax(best, t * ratio);
    }
    return best;
}

// (dp, dw, du, dz) from a solution sol of the bordered system in (dp, dz - c.dp).
void direction(double *sol, const Work &wk, const double *g, Direction out, double *du) {
    const int64_t k = wk.k;
    const double t = sum(sol, k);
    for (int64_t i = 0; i <= k; ++i) sol[i] -= wk.unit[i] * t;
    for (int64_t i = 0; i < k; ++i) out.dp[i] = sol[i];
    const double dzc = sol[k];
    apply_gt(g, out.dp, out.dw, k);
    for (int64_t i = 0; i < k; ++i) du[i] = dzc + wk.coef[i] * out.dw[i] + 2.0 * out.dp[i] * wk.iw[i];
    *out.dz = dot(wk.c, out.dp, k) + dzc;
}

// Initial state x = [p, lambda, s, w, z] (4K + 1) as graph_program._start.
void start(const double *f, const double *g, double *x, Work &wk) {
    const int64_t k = wk.k;
    double *p = x, *lam = x + k, *s = x + 2 * k, *w = x + 3 * k;
    for (int64_t i = 0; i < k; ++i) p[i] = lam[i] = 1.0 / double(k);
    apply_gt(g, p, w, k);
    double spr = 0;
    for (int64_t i = 0; i < k; ++i) {
        wk.r[i] = p[i] / w[i];
        wk.omw[i] = (1 - 2 * p[i]) / w[i];
        spr += p[i] * wk.r[i];
    }
    double gmax = -INFINITY;
    for (int64_t i = 0; i < k; ++i) {
        wk.gf[i] = spr + wk.omw[i] - f[i];
        gmax = nmax(gmax, wk.gf[i]);
    }
    const double z = gmax + 1.0;
    for (int64_t i = 0; i < k; ++i) {
        wk.tmp[i] = wk.r[i] * wk.r[i];
        wk.tmp2[i] = wk.omw[i] / w[i] * lam[i];
    }
    apply_g(g, wk.tmp, wk.g_r2, k);
    apply_g(g, wk.tmp2, wk.g_cl, k);
    double gmin = INFINITY, mean = 0;
    for (int64_t i = 0; i < k; ++i) {
        wk.grad[i] = f[i] + 2 * wk.r[i] - wk.g_r2[i] - 2 * lam[i] / w[i] - wk.g_cl[i];
        gmin = nmin(gmin, wk.grad[i]);
        mean += lam[i] * (z - wk.gf[i]);
    }
    mean /= double(k);
    for (int64_t i = 0; i < k; ++i) s[i] = wk.grad[i] - gmin + mean / p[i];
    x[4 * k] = z;
}

// Solve one instance; p [K] receives the iterate at which the certificate held (or the last).
void solve_one(const double *f, const double *g, double scale, double tol, int64_t k,
               int64_t max_iter, double *p_out) {
    Work wk(k);
    const int64_t n1 = k + 1;
    std::vector<double> xs(4 * k + 1);
    double *x = xs.data();
    for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < k; ++j) wk.gt[j * k + i] = g[i * k + j];
    start(f, g, x, wk);
    double last = 0;
    double *p = x, *lam = x + k, *s = x + 2 * k, *w = x + 3 * k;
    for (int64_t it = 0; it < max_iter; ++it) {
        const double z = x[4 * k];
        double spr = 0, big = 0;
        for (int64_t i = 0; i < k; ++i) {
            wk.iw[i] = 1.0 / w[i];
            wk.ip[i] = 1.0 / p[i];
            wk.r[i] = p[i] * wk.iw[i];
            wk.omw[i] = wk.iw[i] - 2.0 * wk.r[i];
            wk.coef[i] = wk.omw[i] * wk.iw[i];
            spr += p[i] * wk.r[i];
            big += lam[i];
        }
        double gmax = -INFINITY;
        for (int64_t i = 0; i < k; ++i) {
            wk.gf[i] = wk.omw[i] - f[i] + spr;
            gmax = nmax(gmax, wk.gf[i]);
            wk.u[i] = z - wk.gf[i];
            wk.iu[i] = 1.0 / wk.u[i];
            wk.d[i] = lam[i] * wk.iu[i];
            wk.r2[i] = wk.r[i] * wk.r[i];
            wk.cl[i] = lam[i] * wk.coef[i];
            wk.cd[i] = wk.d[i] * wk.coef[i];
            wk.cu[i] = wk.iu[i] * wk.coef[i];
        }
        apply_g(g, wk.r2, wk.g_r2, k);
        apply_g(g, wk.cl, wk.g_cl, k);
        apply_g(g, wk.cd, wk.g_cd, k);
        apply_g(g, wk.cu, wk.g_cu, k);
        double gmin = INFINITY;
        for (int64_t i = 0; i < k; ++i) {
            wk.c[i] = 2.0 * wk.r[i] - wk.g_r2[i];
            const double jl = big * wk.c[i] - (wk.g_cl[i] + 2.0 * lam[i] * wk.iw[i]);
            wk.grad[i] = f[i] + jl / big;
            gmin = nmin(gmin, wk.grad[i]);
        }
        // certificate: V'(p) - lower bound (graph_program._step)
        double cert_l = 0, cert_p = 0;
        for (int64_t i = 0; i < k; ++i) {
            cert_l += (gmax - wk.gf[i]) * lam[i];
            cert_p += (wk.grad[i] - gmin) * p[i];
        }
        const double cert = cert_l / big + cert_p;
        const double vp = dot(p, f, k) + gmax;
        const double thr = nmax(scale, tol * std::fabs(vp));
        if (cert <= thr) break;
        // Newton matrix on (dp, dz - c.dp), bordered by m and sum(d)
        double sum_d = 0;
        for (int64_t i = 0; i < k; ++i) {
            wk.sp[i] = s[i] * wk.ip[i];
            wk.m[i] = wk.g_cd[i] + 2.0 * wk.d[i] * wk.iw[i];
            wk.q[i] = (wk.cd[i] - big * wk.r[i] + lam[i] * wk.iw[i]) * wk.iw[i];
            wk.e[i] = wk.coef[i] * wk.cd[i] + 2.0 * wk.iw[i] * (wk.cl[i] + big * wk.r2[i]);
            sum_d += wk.d[i];
        }
        double *mat = wk.mat;
        for (int64_t i = 0; i < k; ++i) {
            double *row = mat + i * n1;
            for (int64_t l = 0; l < k; ++l)  // 2 (Y + Y^T), Y_il = q_i G_li
                row[l] = 2.0 * (wk.q[i] * g[l * k + i] + wk.q[l] * g[i * k + l]);
            for (int64_t j = 0; j < k; ++j) {  // + G diag(e) G^T
                const double a = g[i * k + j] * wk.e[j];
                if (a == 0) continue;
                const double *col = wk.gt + j * k;  // G_lj over l
                for (int64_t l = 0; l < k; ++l) row[l] += a * col[l];
            }
            row[i] += wk.sp[i] + 2.0 * wk.iw[i] * big + 4.0 * wk.d[i] * wk.iw[i] * wk.iw[i];
            row[k] = wk.m[i];
            mat[k * n1 + i] = wk.m[i];
        }
        mat[k * n1 + k] = sum_d;
        const bool ok = cholesky(mat, wk.chol, n1);
        if (!ok) {  // no step (as the eager path: move is false)
            last = 0;
            continue;
        }
        const double sigma = (last >= kFull ? kSigmaFull : kSigma) / double(2 * k);
        double tau = sigma * (dot(lam, wk.u, k) + dot(s, p, k));
        tau = nmax(tau, thr * (kFloor / double(2 * k)));
        for (int64_t i = 0; i < k; ++i) {
            wk.rhs[i] = (wk.g_cu[i] + wk.ip[i] + 2.0 * wk.iu[i] * wk.iw[i]) * tau - f[i] -
                        big * wk.c[i];
            wk.unit[i] = 1.0;
        }
        wk.rhs[k] = -big + tau * sum(wk.iu, k);
        wk.unit[k] = 0.0;
        cholesky_solve(wk.chol, wk.rhs, n1);
        cholesky_solve(wk.chol, wk.unit, n1);
        const double su = sum(wk.unit, k);
        for (int64_t i = 0; i <= k; ++i) wk.unit[i] /= su;
        Direction d1(wk.delta, k);
        direction(wk.rhs, wk, g, d1, wk.du);
        for (int64_t i = 0; i < k; ++i) {
            d1.dlam[i] = tau * wk.iu[i] - lam[i] - wk.d[i] * wk.du[i];
            d1.ds[i] = tau * wk.ip[i] - s[i] - wk.sp[i] * d1.dp[i];
        }
        // second-order correction at the longest step
        const double at = longest(x, wk.delta, k);
        double sprt = 0;
        for (int64_t i = 0; i < k; ++i) {
            wk.pt[i] = p[i] + at * d1.dp[i];
            wk.tmp2[i] = 1.0 / (w[i] + at * d1.dw[i]);  // iwt
            wk.tmp[i] = wk.pt[i] * wk.tmp2[i];           // rt
            sprt += wk.pt[i] * wk.tmp[i];
        }
        const double zt = z + at * *d1.dz - sprt;
        for (int64_t i = 0; i < k; ++i) {
            const double ut = f[i] - (wk.tmp2[i] - 2.0 * wk.tmp[i]) + zt;
            wk.v2[i] = (wk.u[i] + at * wk.du[i] - ut) * wk.d[i] / at;
            wk.tmp[i] = wk.coef[i] * wk.v2[i];
        }
        apply_g(g, wk.tmp, wk.rhs2, k);
        for (int64_t i = 0; i < k; ++i) wk.rhs2[i] += 2.0 * wk.v2[i] * wk.iw[i];
        wk.rhs2[k] = sum(wk.v2, k);
        cholesky_solve(wk.chol, wk.rhs2, n1);
        Direction d2(wk.delta2, k);
        direction(wk.rhs2, wk, g, d2, wk.du2);
        for (int64_t i = 0; i < k; ++i) {
            d2.dlam[i] = wk.v2[i] - wk.d[i] * wk.du2[i];
            d2.ds[i] = -wk.sp[i] * d2.dp[i];
        }
        for (int64_t i = 0; i < 4 * k + 1; ++i) wk.delta2[i] += wk.delta[i];
        // line search on both directions
        const double alpha1 = chord_search(x, wk.delta, f, wk, at);
        const double alpha2 = chord_search(x, wk.delta2, f, wk, longest(x, wk.delta2, k));
        const bool pick = alpha2 > alpha1;
        const double alpha = pick ? alpha2 : alpha1;
        if (alpha > 0) {
            const double *step = pick ? wk.delta2 : wk.delta;
            for (int64_t i = 0; i < 4 * k + 1; ++i) x[i] += alpha * step[i];
            last = alpha;
        } else {
            last = 0;
        }
    }
    for (int64_t i = 0; i < k; ++i) p_out[i] = p[i];
}

void graph_squarecb_solve_op(const at::Tensor &f, const at::Tensor &g, const at::Tensor &scale,
                             double tol, int64_t max_iter, const at::Tensor &out,
                             int64_t threads) {
    const int64_t n = f.size(0), k = f.size(1);
    const double *fp = f.data_ptr<double>(), *gp = g.data_ptr<double>();
    const double *sp = scale.data_ptr<double>();
    double *op = out.data_ptr<double>();
    auto one = [&](int64_t i) { solve_one(fp + i * k, gp + i * k * k, sp[i], tol, k, max_iter, op + i * k); };
    if (threads <= 1 || n <= 1) {
        for (int64_t i = 0; i < n; ++i) one(i);
        return;
    }
    constexpr int64_t kChunk = 4;  // instances claimed at a time
    std::atomic<int64_t> next{0};
    at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
        for (;;) {
            const int64_t i0 = next.fetch_add(kChunk, std::memory_order_relaxed);
            if (i0 >= n) return;
            const int64_t i1 = i0 + kChunk < n ? i0 + kChunk : n;
            for (int64_t i = i0; i < i1; ++i) one(i);
        }
    });
}

}  // namespace

TORCH_LIBRARY(torchroute_graph, m) {
    m.def(
        "graph_squarecb_solve(Tensor f, Tensor g, Tensor scale, float tol, int max_iter, "
        "Tensor(a!) out, int threads) -> ()",
        &graph_squarecb_solve_op);
}
