/*
 * tile_emu.c: a plain-C emulation of the AMX tile instructions of tile.h,
 * per thread, following the Intel SDM's pseudocode: LDTILECFG (palette 0
 * releases, palette 1 checks every field and zeroes the tiles),
 * TILELOADD / TILESTORED (rows x colsb bytes, the rest of a loaded tile
 * zeroed), TILEZERO, TDPBSSD / TDPBUSD / TDPBSUD (four byte products summed into an
 * int32 that wraps, K = colsb(A) / 4) and TDPBF16PS (bf16 pairs, inputs
 * and outputs flushed to zero, each add rounded to nearest even). What the
 * hardware refuses (#GP / #UD) is counted as a fault and changes nothing.
 * Tests only: the backend runs the real instructions (amx_gemm.inc).
 * Not for: speed.
 */
#include "tile.h"

#include <stdbool.h>
#include <string.h>

typedef struct tile_state {
    bool configured;
    pagoda_tile_config cfg;
    uint8_t t[PAGODA_TILE_COUNT][PAGODA_TILE_MAX_ROWS][PAGODA_TILE_MAX_COLSB];
    int faults;
} tile_state;

static _Thread_local tile_state ts;

static void fault(void)
{
    ts.faults++;
}

int pagoda_tile_emu_faults(void)
{
    int f = ts.faults;
    ts.faults = 0;
    return f;
}

void pagoda_tile_emu_release(void)
{
    ts.configured = false;
    memset(&ts.cfg, 0, sizeof ts.cfg);
    memset(ts.t, 0, sizeof ts.t);
}

void pagoda_tile_emu_loadconfig(const pagoda_tile_config *cfg)
{
    if (cfg->palette_id == 0) {
        pagoda_tile_emu_release();
        return;
    }
    if (cfg->palette_id != 1 || cfg->start_row != 0) { fault(); return; }
    for (int i = 0; i < 14; i++)
        if (cfg->reserved[i]) { fault(); return; }
    for (int i = 0; i < 16; i++) {
        int rows = cfg->rows[i], colsb = cfg->colsb[i];
        if (i >= PAGODA_TILE_COUNT ? rows || colsb
                                   : rows > PAGODA_TILE_MAX_ROWS || colsb > PAGODA_TILE_MAX_COLSB ||
                                         (rows == 0) != (colsb == 0)) {
            fault();
            return;
        }
    }
    ts.cfg = *cfg;
    ts.configured = true;
    memset(ts.t, 0, sizeof ts.t);
}

/* Is tile t usable (configured, in range, with a shape)? */
static bool valid(int t)
{
    return ts.configured && t >= 0 && t < PAGODA_TILE_COUNT && ts.cfg.rows[t] > 0;
}

void pagoda_tile_emu_zero(int t)
{
    if (!valid(t)) { fault(); return; }
    memset(ts.t[t], 0, sizeof ts.t[t]);
}

void pagoda_tile_emu_load(int t, const void *base, long stride)
{
    if (!valid(t)) { fault(); return; }
    int rows = ts.cfg.rows[t], colsb = ts.cfg.colsb[t];
    memset(ts.t[t], 0, sizeof ts.t[t]);
    for (int r = 0; r < rows; r++) memcpy(ts.t[t][r], (const uint8_t *)base + (long)r * stride, (size_t)colsb);
}

void pagoda_tile_emu_store(int t, void *base, long stride)
{
    if (!valid(t)) { fault(); return; }
    int rows = ts.cfg.rows[t], colsb = ts.cfg.colsb[t];
    for (int r = 0; r < rows; r++) memcpy((uint8_t *)base + (long)r * stride, ts.t[t][r], (size_t)colsb);
}

/* The #UD checks every tile dot product makes: three distinct valid tiles,
 * C rows = A rows, C colsb = B colsb, B rows = A colsb / 4, colsb of C and
 * A whole dwords. */
static bool dp_shapes_ok(int c, int a, int b)
{
    if (!valid(c) || !valid(a) || !valid(b) || c == a || c == b || a == b) return false;
    const pagoda_tile_config *g = &ts.cfg;
    return g->colsb[c] % 4 == 0 && g->colsb[a] % 4 == 0 && g->rows[b] == g->colsb[a] / 4 &&
           g->rows[c] == g->rows[a] && g->colsb[c] == g->colsb[b];
}

static int32_t rd32(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void wr32(uint8_t *p, int32_t v)
{
    memcpy(p, &v, 4);
}

/* C[m][n] += sum over k, i of A[m][4k+i] * B[k][4n+i], bytes signed or
 * not per operand, in uint32 arithmetic (the hardware's int32 wraps). */
static void dp_int8(int c, int a, int b, bool a_signed, bool b_signed)
{
    if (!dp_shapes_ok(c, a, b)) { fault(); return; }
    int rows = ts.cfg.rows[c], nn = ts.cfg.colsb[c] / 4, kk = ts.cfg.colsb[a] / 4;
    for (int m = 0; m < rows; m++)
        for (int n = 0; n < nn; n++) {
            uint32_t acc = (uint32_t)rd32(&ts.t[c][m][4 * n]);
            for (int k = 0; k < kk; k++)
                for (int i = 0; i < 4; i++) {
                    uint8_t x = ts.t[a][m][4 * k + i], y = ts.t[b][k][4 * n + i];
                    int32_t xv = a_signed ? (int8_t)x : x, yv = b_signed ? (int8_t)y : y;
                    acc += (uint32_t)(xv * yv);
                }
            wr32(&ts.t[c][m][4 * n], (int32_t)acc);
        }
}

void pagoda_tile_emu_dpbssd(int c, int a, int b)
{
    dp_int8(c, a, b, true, true);
}

void pagoda_tile_emu_dpbusd(int c, int a, int b)
{
    dp_int8(c, a, b, false, true);
}

void pagoda_tile_emu_dpbsud(int c, int a, int b)
{
    dp_int8(c, a, b, true, false);
}

static float bf16_daz(uint16_t h)
{
    if ((h & 0x7f80) == 0) h &= 0x8000;  /* denormal inputs are zero */
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float ftz(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    memcpy(&f, &u, 4);
    return f;
}

void pagoda_tile_emu_dpbf16ps(int c, int a, int b)
{
    if (!dp_shapes_ok(c, a, b)) { fault(); return; }
    int rows = ts.cfg.rows[c], nn = ts.cfg.colsb[c] / 4, kk = ts.cfg.colsb[a] / 4;
    for (int m = 0; m < rows; m++)
        for (int n = 0; n < nn; n++) {
            float acc;
            memcpy(&acc, &ts.t[c][m][4 * n], 4);
            for (int k = 0; k < kk; k++)
                for (int i = 0; i < 2; i++) {
                    uint16_t x, y;
                    memcpy(&x, &ts.t[a][m][4 * k + 2 * i], 2);
                    memcpy(&y, &ts.t[b][k][4 * n + 2 * i], 2);
                    /* a bf16 x bf16 product is exact in fp32: one rounding, the add */
                    acc = ftz(acc + bf16_daz(x) * bf16_daz(y));
                }
            memcpy(&ts.t[c][m][4 * n], &acc, 4);
        }
}
