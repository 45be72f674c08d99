/*
 * unicode.c: UTF-8 helpers and GPT-2's byte-to-unicode map (see unicode.h).
 * Not for: character classes or normalization.
 */
#include "unicode.h"

size_t pagoda_utf8_seq_len(uint8_t lead)
{
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return 4;
    return 1;
}

/* Length of the valid sequence starting at s, 0 if invalid, or -(needed)
 * encoded as SIZE_MAX when s is a valid but truncated start. */
#define SEQ_TRUNCATED ((size_t)-1)
static size_t seq_check(const uint8_t *s, size_t len, uint32_t *cp_out)
{
    uint8_t c = s[0];
    size_t n;
    uint32_t cp, min;
    if (c < 0x80) { if (cp_out) *cp_out = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    for (size_t i = 1; i < n; i++) {
        if (i >= len) {
            /* Valid so far; but reject prefixes that can never complete
             * (overlong or surrogate leads are caught by the second byte). */
            return SEQ_TRUNCATED;
        }
        uint8_t d = s[i];
        if ((d & 0xC0) != 0x80) return 0;
        if (i == 1) {
            /* The second byte decides overlongs, surrogates and > U+10FFFF,
             * so a truncated sequence that passed it is a real prefix. */
            if (c == 0xE0 && d < 0xA0) return 0;
            if (c == 0xED && d > 0x9F) return 0;
            if (c == 0xF0 && d < 0x90) return 0;
            if (c == 0xF4 && d > 0x8F) return 0;
        }
        cp = (cp << 6) | (d & 0x3F);
    }
    if (cp < min) return 0;
    if (cp_out) *cp_out = cp;
    return n;
}

size_t pagoda_utf8_decode(const char *s, size_t len, uint32_t *cp)
{
    size_t n = seq_check((const uint8_t *)s, len, cp);
    if (n == 0 || n == SEQ_TRUNCATED) {
        *cp = 0xFFFD;
        return 1;
    }
    return n;
}

size_t pagoda_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp <= 0x10FFFF) {
        out[0] = (char)(0xF0 | (cp >> 18));
        out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (char)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}

bool pagoda_utf8_valid(const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        size_t n = seq_check(p + i, len - i, NULL);
        if (n == 0 || n == SEQ_TRUNCATED) return false;
        i += n;
    }
    return true;
}

size_t pagoda_utf8_complete_prefix(const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        size_t n = seq_check(p + i, len - i, NULL);
        if (n == SEQ_TRUNCATED) return i; /* hold back the unfinished tail */
        i += n ? n : 1;                   /* invalid bytes pass through */
    }
    return len;
}

/* bytes_to_unicode keeps '!'..'~', 0xA1..0xAC and 0xAE..0xFF as
 * themselves and numbers the other 68 bytes from 256 in byte order:
 * 0x00..0x20 (33), 0x7F..0xA0 (34), then 0xAD. */
uint32_t pagoda_bpe_byte_to_cp(uint8_t b)
{
    if (b <= 0x20) return 256u + b;
    if (b >= 0x7F && b <= 0xA0) return 256u + 33u + (uint32_t)(b - 0x7F);
    if (b == 0xAD) return 256u + 33u + 34u;
    return b;
}

int pagoda_bpe_cp_to_byte(uint32_t cp)
{
    if (cp < 256) {
        if (cp <= 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return -1;
        return (int)cp;
    }
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 33 + 34) return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 33 + 34) return 0xAD;
    return -1;
}
