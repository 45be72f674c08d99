/* test_seqno.c: core/model/seqno.h, the layout of pagoda_batch.seq_no.
 *  - kinds_never_meet: every kind of key the core builds (an engine step,
 *    its sliding-window view, a draft model pass, and an MLA absorbed or
 *    decompressed sub-batch of each) over the first and the last 1000
 *    counter values and sub-batch indices 0..7 and 2^20 - 1: all distinct.
 *    The layout before seqno.h failed this: the draft's pass k was
 *    1 << 62 | k, and step k's first absorbed MLA sub-batch k | 1 << 62.
 *  - fields_stay_apart: each builder sets only its own field (a counter
 *    past 2^40 wraps within its bits, the largest sub-batch index stops
 *    below bit 60), and the two MLA kinds of one index differ. */
#include <stdint.h>
#include <stdlib.h>

#include "seqno.h"
#include "testutil.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

enum { N_COUNT = 2000, N_SUB = 9, N_BASE = 3 };

START_TEST(kinds_never_meet)
{
    static const int32_t subs[N_SUB] = {0, 1, 2, 3, 4, 5, 6, 7, (1 << 20) - 1};
    static const uint64_t kinds[2] = {PAGODA_SEQNO_MLA_ABSORBED, PAGODA_SEQNO_MLA_DECOMPRESSED};
    size_t cap = (size_t)N_COUNT * N_BASE * (1 + 2 * N_SUB), n = 0;
    uint64_t *all = malloc(sizeof(uint64_t) * cap);
    ck_assert_ptr_nonnull(all);
    for (int32_t i = 0; i < N_COUNT; i++) {
        /* 1..1000, then the 1000 counters below 2^40 */
        uint64_t c = i < N_COUNT / 2 ? (uint64_t)i + 1 : PAGODA_SEQNO_COUNT_MASK - (uint64_t)(i - N_COUNT / 2);
        uint64_t step = pagoda_seqno_step(c);
        uint64_t base[N_BASE] = {step, pagoda_seqno_window(step), pagoda_seqno_draft(c)};
        for (int bi = 0; bi < N_BASE; bi++) {
            all[n++] = base[bi];
            for (int k = 0; k < 2; k++)
                for (int s = 0; s < N_SUB; s++) all[n++] = pagoda_seqno_mla_sub(base[bi], kinds[k], subs[s]);
        }
    }
    ck_assert_uint_eq(n, cap);
    qsort(all, n, sizeof *all, cmp_u64);
    for (size_t i = 1; i < n; i++)
        ck_assert_msg(all[i] != all[i - 1], "two kinds share the key %#llx", (unsigned long long)all[i]);
    free(all);
}
END_TEST

START_TEST(fields_stay_apart)
{
    const uint64_t tags = PAGODA_SEQNO_MLA_DECOMPRESSED | PAGODA_SEQNO_MLA_ABSORBED | PAGODA_SEQNO_DRAFT |
                          PAGODA_SEQNO_WINDOW;
    /* the fields tile the 64 bits without overlap */
    ck_assert_uint_eq(PAGODA_SEQNO_COUNT_MASK & PAGODA_SEQNO_SUB_MASK, 0);
    ck_assert_uint_eq((PAGODA_SEQNO_COUNT_MASK | PAGODA_SEQNO_SUB_MASK) & tags, 0);
    ck_assert_uint_eq(PAGODA_SEQNO_COUNT_MASK | PAGODA_SEQNO_SUB_MASK | tags, UINT64_MAX);
    /* a step is its counter; past 2^40 it wraps, never reaching a tag bit */
    ck_assert_uint_eq(pagoda_seqno_step(7), 7);
    ck_assert_uint_eq(pagoda_seqno_step((1ull << 40) + 5), 5);
    ck_assert_uint_eq(pagoda_seqno_draft((1ull << 40) + 5), PAGODA_SEQNO_DRAFT | 5);
    ck_assert_uint_eq(pagoda_seqno_window(9), PAGODA_SEQNO_WINDOW | 9);
    /* the largest index stays in its field; the parent's bits are kept */
    uint64_t sub = pagoda_seqno_mla_sub(pagoda_seqno_draft(3), PAGODA_SEQNO_MLA_ABSORBED, (1 << 20) - 1);
    ck_assert_uint_eq(sub & PAGODA_SEQNO_COUNT_MASK, 3);
    ck_assert_uint_eq((sub & PAGODA_SEQNO_SUB_MASK) >> PAGODA_SEQNO_SUB_SHIFT, (1u << 20) - 1);
    ck_assert_uint_eq(sub & tags, PAGODA_SEQNO_DRAFT | PAGODA_SEQNO_MLA_ABSORBED);
    /* the two MLA kinds of one index differ */
    ck_assert_uint_ne(pagoda_seqno_mla_sub(12, PAGODA_SEQNO_MLA_DECOMPRESSED, 4),
                      pagoda_seqno_mla_sub(12, PAGODA_SEQNO_MLA_ABSORBED, 4));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("seqno");
    TCase *tc = tcase_create("layout");
    tcase_add_test(tc, kinds_never_meet);
    tcase_add_test(tc, fields_stay_apart);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
