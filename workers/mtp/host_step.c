/* The MTP head's step on the host in C: HostHead.step (workers/mtp/host_head.py) without NumPy's
 * per-call overhead. workers/mtp/host_native.py builds it with the system's C compiler and calls
 * it through ctypes; shapes as there: B rows, W pairs a row, H hidden, NH / NK query / key-value
 * heads of D, F the MLP's width, S the cache's slots a row. Weights are [in, out] (nn.Linear's
 * transposed): HostLinear's own copies, which NumPy's route reads too, so the head is held once.
 *
 * Why: on the 2-core CPU VM a chained step cost 0.2-0.37 ms in NumPy, of which ~60 us were its
 * products (bandwidth: 3.6 MB of weights) and the rest ~40 NumPy calls of 1-5 us each
 * (bench/results/s46). Same arithmetic, other summation orders: drafts only decide how many
 * tokens a round emits (host_head.py's docstring). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef float v8 __attribute__((vector_size(32)));

typedef struct {
  int64_t H, NH, NK, D, F, V, post_norm;
  double scale;
  double eps[7];          /* e, h, ln1, ln2, q, k, out */
  const float *norm[7];   /* their weights: [H] but q and k [D] */
  const float *embed;     /* [V, H], the target's */
  const float *fc;        /* [2H, H] over concat(norm_e(embed), norm_h(hidden)) */
  const float *q_proj;    /* [H, NH D] */
  const float *kv_proj;   /* [H, 2 NK D]: k then v */
  const float *o_proj;    /* [NH D, H] */
  const float *gate_up;   /* [H, 2F]: gate then up */
  const float *down;      /* [F, H] */
} Head;

enum { E, HID, LN1, LN2, Q, K, OUT };

static float dot(const float *a, const float *b, int64_t n) {
  v8 s0 = {0}, s1 = {0};
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    v8 a0, a1, b0, b1;
    memcpy(&a0, a + k, 32), memcpy(&a1, a + k + 8, 32);
    memcpy(&b0, b + k, 32), memcpy(&b1, b + k + 8, 32);
    s0 += a0 * b0, s1 += a1 * b1;
  }
  s0 += s1;
  float s = 0;
  for (int i = 0; i < 8; i++) s += s0[i];
  for (; k < n; k++) s += a[k] * b[k];
  return s;
}

/* y [rows, N] += x [rows, 4] times w [4, N] (4 consecutive weight rows): rows (1-4) a constant
 * where inlined. The 4 weight rows stream contiguously (the prefetchers follow them; a block of
 * columns walking down [K, N] at a stride of N floats lost them), each 8 floats loaded once for
 * all the rows; a row's 8 outputs are read and written once for the 4 weight rows. */
static inline __attribute__((always_inline)) void rows4(const float *x, int rows, int64_t K,
                                                        const float *w, int64_t N, float *y) {
  float s[4][4];
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < 4; j++) s[r][j] = x[r * K + j];
  int64_t n = 0;
  for (; n + 8 <= N; n += 8) {
    v8 w0, w1, w2, w3;
    memcpy(&w0, w + n, 32), memcpy(&w1, w + N + n, 32);
    memcpy(&w2, w + 2 * N + n, 32), memcpy(&w3, w + 3 * N + n, 32);
    for (int r = 0; r < rows; r++) {
      v8 acc;
      memcpy(&acc, y + r * N + n, 32);
      acc += s[r][0] * w0 + s[r][1] * w1 + s[r][2] * w2 + s[r][3] * w3;
      memcpy(y + r * N + n, &acc, 32);
    }
  }
  for (; n < N; n++)
    for (int r = 0; r < rows; r++)
      y[r * N + n] += s[r][0] * w[n] + s[r][1] * w[N + n] + s[r][2] * w[2 * N + n] +
                      s[r][3] * w[3 * N + n];
}

/* y [M, N] = x [M, K] times w [K, N] ([in, out]): up to 4 rows at a time, the weight read
 * once for them, 4 of its rows at a time. */
static void linear(const float *x, int64_t M, int64_t K, const float *w, int64_t N, float *y) {
  memset(y, 0, sizeof(float) * M * N);
  for (int64_t m0 = 0; m0 < M; m0 += 4) {
    const int rows = M - m0 < 4 ? (int)(M - m0) : 4;
    const float *xm = x + m0 * K;
    float *ym = y + m0 * N;
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) switch (rows) {
      case 4: rows4(xm + k, 4, K, w + k * N, N, ym); break;
      case 3: rows4(xm + k, 3, K, w + k * N, N, ym); break;
      case 2: rows4(xm + k, 2, K, w + k * N, N, ym); break;
      default: rows4(xm + k, 1, K, w + k * N, N, ym);
    }
    for (; k < K; k++)  /* weight rows past the last 4 */
      for (int r = 0; r < rows; r++)
        for (int64_t n = 0; n < N; n++) ym[r * N + n] += xm[r * K + k] * w[k * N + n];
  }
}

static void rms_norm(const Head *h, int which, const float *x, int64_t n, float *y) {
  const float *w = h->norm[which];
  float r = 1.0f / sqrtf(dot(x, x, n) / (float)n + (float)h->eps[which]);
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

/* MLX's non-traditional RoPE at position pos, in place: the halves rotate (tables [P, D/2]). */
static void rope(float *x, int64_t d, int64_t pos, const float *cos_t, const float *sin_t) {
  const float *c = cos_t + pos * (d / 2), *s = sin_t + pos * (d / 2);
  for (int64_t i = 0; i < d / 2; i++) {
    float x1 = x[i], x2 = x[i + d / 2];
    x[i] = x1 * c[i] - x2 * s[i];
    x[i + d / 2] = x1 * s[i] + x2 * c[i];
  }
}

/* HostHead.step: writes the W pairs' keys and values of each row b at slots lengths[b].. of
 * ck / cv [B, S, NK, D]; where last is not NULL, the head's output at pair last[b] of each row
 * into chain and normed [B, H]. The products run over all rows at once (the weights read once
 * a step). Returns 0, or -1 if its scratch could not be allocated. */
int specfleet_head_step(const Head *h, int64_t B, int64_t W, const float *hidden,
                        const int64_t *tokens, const int64_t *lengths, const int64_t *last,
                        float *ck, float *cv, int64_t S, const float *cos_t, const float *sin_t,
                        float *chain, float *normed) {
  const int64_t H = h->H, NH = h->NH, NK = h->NK, D = h->D, F = h->F, KV = NK * D, M = B * W;
  for (int64_t r = 0; r < M; r++)
    if (tokens[r] < 0 || tokens[r] >= h->V) return -2;
  for (int64_t b = 0; b < B; b++)
    if (lengths[b] < 0 || lengths[b] + W > S || (last && (last[b] < 0 || last[b] >= W))) return -2;
  float *cat = malloc(sizeof(float) * (M * (2 * H + 2 * H + 2 * KV) + S +
                                       B * (2 * NH * D + 4 * H + 3 * F)));
  if (!cat) return -1;
  float *x = cat + M * 2 * H, *a = x + M * H, *kv = a + M * H, *p = kv + M * 2 * KV;
  float *q = p + S, *att = q + B * NH * D, *x1 = att + B * NH * D, *t = x1 + B * H;
  float *o = t + B * H, *al = o + B * H, *gu = al + B * H, *m = gu + B * 2 * F;
  for (int64_t r = 0; r < M; r++) {  /* r = b * W + w */
    rms_norm(h, E, h->embed + tokens[r] * H, H, cat + r * 2 * H);
    rms_norm(h, HID, hidden + r * H, H, cat + r * 2 * H + H);
  }
  linear(cat, M, 2 * H, h->fc, H, x);
  for (int64_t r = 0; r < M; r++) rms_norm(h, LN1, x + r * H, H, a + r * H);
  linear(a, M, H, h->kv_proj, 2 * KV, kv);
  for (int64_t r = 0; r < M; r++) {
    int64_t b = r / W, pos = lengths[b] + r % W;
    float *kd = ck + (b * S + pos) * KV, *vd = cv + (b * S + pos) * KV;
    for (int64_t j = 0; j < NK; j++) {
      rms_norm(h, K, kv + r * 2 * KV + j * D, D, kd + j * D);
      rope(kd + j * D, D, pos, cos_t, sin_t);
    }
    memcpy(vd, kv + r * 2 * KV + KV, sizeof(float) * KV);
  }
  if (last) {
    for (int64_t b = 0; b < B; b++) memcpy(al + b * H, a + (b * W + last[b]) * H, sizeof(float) * H);
    linear(al, B, H, h->q_proj, NH * D, q);
    for (int64_t b = 0; b < B; b++) {
      int64_t at = lengths[b] + last[b];
      for (int64_t i = 0; i < NH; i++) {
        float *qi = q + (b * NH + i) * D, *ai = att + (b * NH + i) * D;
        rms_norm(h, Q, qi, D, qi);
        rope(qi, D, at, cos_t, sin_t);
        int64_t j = i / (NH / NK);  /* query head i reads key-value head i / (NH / NK) */
        float top = -INFINITY, sum = 0;
        for (int64_t s = 0; s <= at; s++) {
          p[s] = dot(qi, ck + (b * S + s) * KV + j * D, D) * (float)h->scale;
          top = p[s] > top ? p[s] : top;
        }
        for (int64_t s = 0; s <= at; s++) sum += (p[s] = expf(p[s] - top));
        memset(ai, 0, sizeof(float) * D);
        for (int64_t s = 0; s <= at; s++) {
          const float *v = cv + (b * S + s) * KV + j * D;
          float ps = p[s] / sum;
          for (int64_t c = 0; c < D; c++) ai[c] += ps * v[c];
        }
      }
    }
    linear(att, B, NH * D, h->o_proj, H, o);
    for (int64_t b = 0; b < B; b++) {
      const float *xl = x + (b * W + last[b]) * H;
      for (int64_t i = 0; i < H; i++) x1[b * H + i] = xl[i] + o[b * H + i];
      rms_norm(h, LN2, x1 + b * H, H, t + b * H);
    }
    linear(t, B, H, h->gate_up, 2 * F, gu);
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < F; i++) {
        float g = gu[b * 2 * F + i];
        m[b * F + i] = g / (1.0f + expf(-g)) * gu[b * 2 * F + F + i];
      }
    linear(m, B, F, h->down, H, o);
    for (int64_t b = 0; b < B; b++) {
      for (int64_t i = 0; i < H; i++) x1[b * H + i] += o[b * H + i];
      rms_norm(h, OUT, x1 + b * H, H, normed + b * H);
      memcpy(chain + b * H, h->post_norm ? normed + b * H : x1 + b * H, sizeof(float) * H);
    }
  }
  free(cat);
  return 0;
}
