/*
 * sampler.c: next-token selection for one sequence (see sampler.h for the
 * order of operations and the logprob convention).
 * Not for: stop conditions or batching; the engine owns those.
 */
#include "sampler.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logsoftmax.h"
#include "pagoda/types.h"

/* ------------------------------------------------------------ token counts */

/* Open-addressing map token -> count. Keys are never removed (a count may
 * drop to 0 when a token leaves the repetition window), so lookups need no
 * tombstones; the map holds at most the distinct tokens of the history,
 * which keeps a sampler's penalty state O(history), not O(n_vocab). */
typedef struct count_map {
    int32_t *keys; /* -1: empty */
    int32_t *vals;
    uint32_t cap;  /* power of two, or 0 */
    uint32_t used;
} count_map;

static uint32_t cm_hash(int32_t key) { return (uint32_t)key * 2654435761u; }

static void cm_free(count_map *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static int cm_grow(count_map *m)
{
    uint32_t ncap = m->cap ? m->cap * 2 : 64;
    int32_t *nk = malloc(sizeof *nk * ncap), *nv = malloc(sizeof *nv * ncap);
    if (!nk || !nv) {
        free(nk);
        free(nv);
        return PAGODA_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < ncap; i++) nk[i] = -1;
    for (uint32_t i = 0; i < m->cap; i++) {
        if (m->keys[i] < 0) continue;
        uint32_t h = cm_hash(m->keys[i]) & (ncap - 1);
        while (nk[h] >= 0) h = (h + 1) & (ncap - 1);
        nk[h] = m->keys[i];
        nv[h] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = ncap;
    return PAGODA_OK;
}

/* Adds delta to key's count (inserting it at 0 first). */
static int cm_add(count_map *m, int32_t key, int32_t delta)
{
    if ((m->used + 1) * 2 > m->cap && cm_grow(m) != PAGODA_OK) return PAGODA_ERR_NOMEM;
    uint32_t h = cm_hash(key) & (m->cap - 1);
    while (m->keys[h] >= 0 && m->keys[h] != key) h = (h + 1) & (m->cap - 1);
    if (m->keys[h] < 0) {
        m->keys[h] = key;
        m->vals[h] = 0;
        m->used++;
    }
    m->vals[h] += delta;
    return PAGODA_OK;
}

static void cm_clear(count_map *m)
{
    for (uint32_t i = 0; i < m->cap; i++) m->keys[i] = -1;
    m->used = 0;
}

/* ---------------------------------------------------------------- sampler */

typedef struct cand {
    float l;
    int32_t id;
} cand;

struct pagoda_sampler {
    pagoda_sampler_params p;
    int32_t n_vocab;
    uint64_t seed_base; /* splitmix64 of the seed */
    uint64_t draws;     /* the whole RNG state */

    bool use_rep, use_out;
    count_map rep;      /* counts over the repetition window */
    int32_t *ring;      /* last penalty_last_n tokens, when the window is finite */
    int32_t ring_len, ring_head;
    count_map out;      /* counts over output tokens */

    cand *scratch;      /* [n_vocab], allocated on the first selection */
};

void pagoda_sampler_params_default(pagoda_sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 0.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
    p->penalty_last_n = 64;
}

int pagoda_sampler_params_validate(const pagoda_sampler_params *p, char *err, size_t err_len)
{
#define BAD(...) do { if (err && err_len) snprintf(err, err_len, __VA_ARGS__); return PAGODA_ERR_INVALID; } while (0)
    if (!p) BAD("sampler parameters: NULL");
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        BAD("temperature must be a finite number >= 0 (0 is greedy), got %g", (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        BAD("top_p must be in (0, 1] (1 is off), got %g", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        BAD("min_p must be in [0, 1] (0 is off), got %g", (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
        BAD("repetition_penalty must be a finite number > 0 (1 is off), got %g",
            (double)p->repetition_penalty);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        BAD("presence_penalty must be in [-2, 2] (0 is off), got %g", (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        BAD("frequency_penalty must be in [-2, 2] (0 is off), got %g", (double)p->frequency_penalty);
    return PAGODA_OK;
#undef BAD
}

static uint64_t mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The draws-th output of a splitmix64 stream started at seed_base, as a
 * double in [0, 1). Counter-based so the state is one integer. */
static double rng_uniform(pagoda_sampler *s)
{
    s->draws++;
    uint64_t x = mix64(s->seed_base + s->draws * 0x9E3779B97F4A7C15ull);
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

pagoda_sampler *pagoda_sampler_new(const pagoda_sampler_params *p, int32_t n_vocab)
{
    if (!p || n_vocab <= 0) return NULL;
    pagoda_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    /* Out-of-range values mean "off" here, so that NULL only ever means
     * out of memory; submit() tells the client with params_validate. */
    s->p = *p;
    if (!(s->p.temperature > 0.0f) || !isfinite(s->p.temperature)) s->p.temperature = 0.0f;
    if (!(s->p.top_p > 0.0f && s->p.top_p < 1.0f)) s->p.top_p = 1.0f;
    if (!(s->p.min_p > 0.0f)) s->p.min_p = 0.0f;
    if (s->p.min_p > 1.0f) s->p.min_p = 1.0f;
    if (!(s->p.repetition_penalty > 0.0f) || !isfinite(s->p.repetition_penalty)) s->p.repetition_penalty = 1.0f;
    if (!isfinite(s->p.presence_penalty)) s->p.presence_penalty = 0.0f;
    if (!isfinite(s->p.frequency_penalty)) s->p.frequency_penalty = 0.0f;
    s->n_vocab = n_vocab;
    s->use_rep = s->p.repetition_penalty != 1.0f;
    s->use_out = s->p.presence_penalty != 0.0f || s->p.frequency_penalty != 0.0f;
    if (s->use_rep && p->penalty_last_n > 0) {
        s->ring = malloc(sizeof *s->ring * (size_t)p->penalty_last_n);
        if (!s->ring) {
            free(s);
            return NULL;
        }
    }
    pagoda_sampler_reset(s);
    return s;
}

void pagoda_sampler_free(pagoda_sampler *s)
{
    if (!s) return;
    cm_free(&s->rep);
    cm_free(&s->out);
    free(s->ring);
    free(s->scratch);
    free(s);
}

void pagoda_sampler_reset(pagoda_sampler *s)
{
    if (!s) return;
    cm_clear(&s->rep);
    cm_clear(&s->out);
    s->ring_len = s->ring_head = 0;
    s->seed_base = mix64(s->p.seed + 0x9E3779B97F4A7C15ull);
    s->draws = 0;
}

uint64_t pagoda_sampler_rng_state(const pagoda_sampler *s) { return s ? s->draws : 0; }

void pagoda_sampler_set_rng_state(pagoda_sampler *s, uint64_t state)
{
    if (s) s->draws = state;
}

void pagoda_sampler_accept(pagoda_sampler *s, int32_t token, bool is_prompt)
{
    /* An allocation failure here only weakens a penalty; the request goes on. */
    if (!s || token < 0 || token >= s->n_vocab) return;
    if (s->use_rep) {
        if (s->ring) {
            int32_t cap = s->p.penalty_last_n;
            if (s->ring_len == cap) {
                (void)cm_add(&s->rep, s->ring[s->ring_head], -1);
                s->ring[s->ring_head] = token;
                s->ring_head = (s->ring_head + 1) % cap;
            } else {
                s->ring[(s->ring_head + s->ring_len) % cap] = token;
                s->ring_len++;
            }
        }
        (void)cm_add(&s->rep, token, 1);
    }
    if (s->use_out && !is_prompt) (void)cm_add(&s->out, token, 1);
}

static void apply_penalties(pagoda_sampler *s, float *logits)
{
    if (s->use_rep) {
        float r = s->p.repetition_penalty;
        for (uint32_t i = 0; i < s->rep.cap; i++) {
            if (s->rep.keys[i] < 0 || s->rep.vals[i] <= 0) continue;
            float *l = &logits[s->rep.keys[i]];
            *l = *l > 0.0f ? *l / r : *l * r;
        }
    }
    if (s->use_out) {
        float pres = s->p.presence_penalty, freq = s->p.frequency_penalty;
        for (uint32_t i = 0; i < s->out.cap; i++) {
            if (s->out.keys[i] < 0 || s->out.vals[i] <= 0) continue;
            logits[s->out.keys[i]] -= pres + freq * (float)s->out.vals[i];
        }
    }
}

/* NaN -> -inf and +inf -> FLT_MAX (so that l - max stays a number), and the
 * max with its lowest index. */
static float scan_max(float *logits, int32_t n, int32_t *argmax)
{
    float m = -INFINITY;
    int32_t am = 0;
    for (int32_t i = 0; i < n; i++) {
        float l = logits[i];
        if (isnan(l)) l = logits[i] = -INFINITY;
        else if (l == INFINITY) l = logits[i] = FLT_MAX;
        if (l > m) {
            m = l;
            am = i;
        }
    }
    *argmax = am;
    return m;
}

/* log of the softmax normalizer at temperature 1: m + log(sum exp(l - m)),
 * the sum in double (logsoftmax.c: AVX2 where the CPU has it). */
static double log_norm(const float *logits, int32_t n, float m)
{
    return (double)m + log(pagoda_logits_sumexp(logits, n, m));
}

/* ------------------------------------------------------------- selection */

/* The total order every selection uses: higher logit first, then lower id,
 * so results never depend on the selection algorithm. */
static inline bool better(cand a, cand b) { return a.l > b.l || (a.l == b.l && a.id < b.id); }

static int cand_cmp(const void *pa, const void *pb)
{
    cand a = *(const cand *)pa, b = *(const cand *)pb;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

static inline void cswap(cand *a, int32_t i, int32_t j)
{
    cand t = a[i];
    a[i] = a[j];
    a[j] = t;
}

/* Rearranges a[0..n) so that its k best entries are a[0..k), unordered.
 * Quickselect with a median-of-three pivot, expected O(n); a sort of the
 * remaining range bounds the rare bad case. */
static void select_best(cand *a, int32_t n, int32_t k)
{
    if (k <= 0 || k >= n) return;
    int32_t lo = 0, hi = n - 1, target = k - 1, rounds = 0;
    while (hi > lo) {
        if (++rounds > 64) {
            qsort(a + lo, (size_t)(hi - lo + 1), sizeof *a, cand_cmp);
            return;
        }
        int32_t mid = lo + (hi - lo) / 2;
        if (better(a[mid], a[lo])) cswap(a, mid, lo);
        if (better(a[hi], a[lo])) cswap(a, hi, lo);
        if (better(a[hi], a[mid])) cswap(a, hi, mid);
        cswap(a, mid, hi); /* the median is the pivot, parked at hi */
        cand pivot = a[hi];
        int32_t store = lo;
        for (int32_t i = lo; i < hi; i++)
            if (better(a[i], pivot)) cswap(a, i, store++);
        cswap(a, store, hi);
        if (store == target) return;
        if (store < target) lo = store + 1;
        else hi = store - 1;
    }
}

/* Makes a[0..k) the k best of a[0..n), in order. */
static void select_sorted(cand *a, int32_t n, int32_t k)
{
    if (k > n) k = n;
    select_best(a, n, k);
    qsort(a, (size_t)k, sizeof *a, cand_cmp);
}

static bool is_greedy(const pagoda_sampler *s) { return s->p.temperature <= 0.0f || s->p.top_k == 1; }

/* The candidate set of step 4 (sampler.h). When it returns true the set is
 * s->scratch[0..*n), best first; when false it is every id whose logit is
 * >= *thr (no selection was needed: temperature and min-p alone). */
static int truncate_candidates(pagoda_sampler *s, const float *logits, float m, int32_t *n_out, float *thr,
                               bool *listed)
{
    const int32_t V = s->n_vocab;
    const float T = s->p.temperature, invT = 1.0f / T;
    const bool use_k = s->p.top_k > 0 && s->p.top_k < V;
    const bool use_p = s->p.top_p < 1.0f;

    /* min-p on the tempered distribution: p_i >= min_p * p_max  <=>
     * (l_i - m) / T >= log(min_p). */
    *thr = s->p.min_p > 0.0f ? m + T * logf(s->p.min_p) : -INFINITY;
    if (!use_k && !use_p) {
        *listed = false;
        *n_out = 0;
        return PAGODA_OK;
    }

    if (!s->scratch) {
        s->scratch = malloc(sizeof *s->scratch * (size_t)V);
        if (!s->scratch) return PAGODA_ERR_NOMEM;
    }
    cand *c = s->scratch;
    for (int32_t i = 0; i < V; i++) {
        c[i].l = logits[i];
        c[i].id = i;
    }

    int32_t n; /* entries of c[] selected and sorted so far */
    double mass; /* of the set top-p is measured against */
    if (use_k) {
        n = s->p.top_k;
        select_sorted(c, V, n);
        mass = 0.0;
        for (int32_t i = 0; i < n; i++) mass += (double)expf((c[i].l - m) * invT);
    } else {
        n = 0;
        mass = 0.0;
        for (int32_t i = 0; i < V; i++) mass += (double)expf((logits[i] - m) * invT);
    }

    int32_t cut = n;
    if (use_p) {
        /* The smallest best-first prefix holding top_p of the mass. Without
         * top-k the prefix is grown in doubling chunks, each a selection
         * over the rest of the vocabulary, so only the nucleus is sorted. */
        const double target = (double)s->p.top_p * mass;
        int32_t chunk = 256, i = 0;
        double cum = 0.0;
        for (;;) {
            if (i == n) {
                if (use_k || n == V) break;
                /* Once a chunk would cover half of the rest, one sort of the
                 * rest is cheaper than more selection rounds (flat, hot
                 * distributions with top_p near 1). */
                int32_t take = chunk < (V - n) / 2 ? chunk : V - n;
                select_sorted(c + n, V - n, take);
                n += take;
                chunk *= 2;
            }
            cum += (double)expf((c[i].l - m) * invT);
            i++;
            if (cum >= target) break;
        }
        cut = i;
    }
    /* min-p last; the list is sorted so it is a prefix, never empty. */
    int32_t keep = 1;
    while (keep < cut && c[keep].l >= *thr) keep++;
    *n_out = keep;
    *listed = true;
    return PAGODA_OK;
}

/* One draw from the candidates with weights exp((l - m) / T). */
static int32_t draw(pagoda_sampler *s, const float *logits, float m, int32_t argmax)
{
    int32_t n = 0;
    float thr;
    bool listed;
    const float invT = 1.0f / s->p.temperature;
    if (truncate_candidates(s, logits, m, &n, &thr, &listed) != PAGODA_OK)
        return argmax; /* no scratch memory: degrade to greedy rather than fail the step */
    double u = rng_uniform(s);

    if (listed) {
        const cand *c = s->scratch;
        double sum = 0.0;
        for (int32_t i = 0; i < n; i++) sum += (double)expf((c[i].l - m) * invT);
        double target = u * sum, cum = 0.0;
        for (int32_t i = 0; i < n; i++) {
            double w = (double)expf((c[i].l - m) * invT);
            cum += w;
            if (cum > target && w > 0.0) return c[i].id;
        }
        return c[0].id;
    }
    const int32_t V = s->n_vocab;
    double sum = 0.0;
    for (int32_t i = 0; i < V; i++)
        if (logits[i] >= thr) sum += (double)expf((logits[i] - m) * invT);
    double target = u * sum, cum = 0.0;
    int32_t last = argmax;
    for (int32_t i = 0; i < V; i++) {
        if (logits[i] < thr) continue;
        double w = (double)expf((logits[i] - m) * invT);
        if (w <= 0.0) continue;
        cum += w;
        last = i;
        if (cum > target) return i;
    }
    return last; /* rounding left target just above the sum */
}

/* The n best (logit, id) of the vocabulary, best first: an insertion list,
 * since n is small (<= PAGODA_MAX_TOP_LOGPROBS in practice). */
/* A logit as sample() sees it after scan_max: NaN is -inf, +inf FLT_MAX. */
static inline float clean_logit(float l) { return isnan(l) ? -INFINITY : l == INFINITY ? FLT_MAX : l; }

static void top_n(const float *logits, int32_t V, int32_t n, cand *best)
{
    int32_t have = 0;
    for (int32_t i = 0; i < V; i++) {
        /* ids only grow, so once the list is full only a strictly larger
         * logit can enter (a NaN never does): one compare for nearly all */
        if (have == n && !(logits[i] > best[n - 1].l)) continue;
        cand x = {clean_logit(logits[i]), i};
        if (have == n && !better(x, best[n - 1])) continue;
        int32_t j = have < n ? have++ : n - 1;
        while (j > 0 && better(x, best[j - 1])) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = x;
    }
}

int32_t pagoda_sampler_sample(pagoda_sampler *s, float *logits, float *logprob, int32_t n_top,
                              int32_t *top_ids, float *top_lp)
{
    const int32_t V = s->n_vocab;
    int32_t argmax;
    apply_penalties(s, logits);
    float m = scan_max(logits, V, &argmax);
    /* Every logit -inf: nothing to weigh; the lowest id, as greedy would. */
    bool degenerate = m == -INFINITY;
    int32_t tok = is_greedy(s) || degenerate ? argmax : draw(s, logits, m, argmax);

    if (logprob || n_top > 0) {
        double lz = degenerate ? 0.0 : log_norm(logits, V, m);
        float flat = -logf((float)V);
        if (logprob) *logprob = degenerate ? flat : (float)((double)logits[tok] - lz);
        if (n_top > 0 && top_ids && top_lp) {
            int32_t k = n_top < V ? n_top : V;
            cand small[32], *best = k <= 32 ? small : malloc(sizeof *best * (size_t)k);
            if (!best) k = 0;
            if (k) top_n(logits, V, k, best);
            for (int32_t i = 0; i < n_top; i++) {
                top_ids[i] = i < k ? best[i].id : -1;
                top_lp[i] = i < k ? (degenerate ? flat : (float)((double)best[i].l - lz)) : -INFINITY;
            }
            if (best != small) free(best);
        }
    }
    return tok;
}

float pagoda_logprob_of(const float *logits, int32_t V, int32_t token, int32_t n_top,
                        int32_t *top_ids, float *top_lp)
{
    float m = pagoda_logits_max(logits, V);
    bool degenerate = m == -INFINITY;
    double lz = degenerate ? 0.0 : log_norm(logits, V, m);
    float flat = -logf((float)V);
    float lp = token < 0 || token >= V ? -INFINITY
               : degenerate ? flat : (float)((double)clean_logit(logits[token]) - lz);
    if (n_top > 0 && top_ids && top_lp) {
        int32_t k = n_top < V ? n_top : V;
        cand small[32], *best = k <= 32 ? small : malloc(sizeof *best * (size_t)k);
        if (!best) k = 0;
        if (k == 1) {
            /* the best alone (lm-evaluation-harness asks for 1): the first
             * logit equal to the maximum already found */
            int32_t i = 0;
            while (i < V - 1 && clean_logit(logits[i]) != m) i++;
            best[0] = (cand){clean_logit(logits[i]), i};
        } else if (k) {
            top_n(logits, V, k, best);
        }
        for (int32_t i = 0; i < n_top; i++) {
            top_ids[i] = i < k ? best[i].id : -1;
            top_lp[i] = i < k ? (degenerate ? flat : (float)((double)best[i].l - lz)) : -INFINITY;
        }
        if (best != small) free(best);
    }
    return lp;
}

int32_t pagoda_sampler_candidates(pagoda_sampler *s, float *logits, int32_t *ids, int32_t cap)
{
    const int32_t V = s->n_vocab;
    int32_t argmax, n = 0;
    apply_penalties(s, logits);
    float m = scan_max(logits, V, &argmax);
    if (is_greedy(s) || m == -INFINITY) {
        if (cap > 0) ids[0] = argmax;
        return 1;
    }
    float thr;
    bool listed;
    if (truncate_candidates(s, logits, m, &n, &thr, &listed) != PAGODA_OK) return 0;
    if (listed) {
        for (int32_t i = 0; i < n && i < cap; i++) ids[i] = s->scratch[i].id;
        return n;
    }
    /* Unlisted (debug path only): sort the survivors to report them best first. */
    cand *c = malloc(sizeof *c * (size_t)V);
    if (!c) return 0;
    for (int32_t i = 0; i < V; i++)
        if (logits[i] >= thr) c[n++] = (cand){logits[i], i};
    qsort(c, (size_t)n, sizeof *c, cand_cmp);
    for (int32_t i = 0; i < n && i < cap; i++) ids[i] = c[i].id;
    free(c);
    return n;
}
