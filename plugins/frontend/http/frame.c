/*
 * frame.c: see frame.h. RFC 9112's request grammar, strict where framing
 * is decided (a request two parsers could split differently is refused:
 * two lengths, length and chunked together, a folded or space-before-colon
 * header) and lenient where it is harmless (bare LF line ends, leading
 * empty lines, chunk extensions and trailers, as MHD also accepts them).
 * Not for: I/O (gate.c) or anything after the framing.
 */
#include "frame.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define FAIL(st, ...) do { f->status = (st); snprintf(f->msg, sizeof f->msg, __VA_ARGS__); \
                           return FRAME_ERROR; } while (0)

static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The line at buf[pos..n): its end (the '\n') or NULL; *len is the line's
 * length without CR LF / LF. */
static const char *line_at(const char *buf, size_t pos, size_t n, size_t *len)
{
    const char *nl = memchr(buf + pos, '\n', n - pos);
    if (!nl) return NULL;
    size_t l = (size_t)(nl - (buf + pos));
    if (l && buf[pos + l - 1] == '\r') l--;
    *len = l;
    return nl;
}

/* Field value bytes: HTAB, SP, visible ASCII, obs-text; no other control. */
static int value_ok(const char *v, size_t l)
{
    for (size_t i = 0; i < l; i++) {
        unsigned char c = (unsigned char)v[i];
        if ((c < 0x20 && c != '\t') || c == 0x7F) return 0;
    }
    return 1;
}

/* Trims optional whitespace at both ends of [*v, *v + *l). */
static void ows_trim(const char **v, size_t *l)
{
    while (*l && (**v == ' ' || **v == '\t')) { (*v)++; (*l)--; }
    while (*l && ((*v)[*l - 1] == ' ' || (*v)[*l - 1] == '\t')) (*l)--;
}

static int name_is(const char *name, size_t nl, const char *want)
{
    return nl == strlen(want) && strncasecmp(name, want, nl) == 0;
}

/* Checks a request line that has not ended yet: a method of token bytes,
 * then only bytes a request line may hold. Catches what is not HTTP (a TLS
 * hello, binary) at once instead of at the timeout. */
static int partial_line_ok(const char *p, size_t l)
{
    size_t i = 0;
    while (i < l && is_tchar((unsigned char)p[i])) i++;
    if (i < l && p[i] != ' ') return 0;
    for (; i < l; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 && !(c == '\r' && i == l - 1)) return 0;
        if (c == 0x7F) return 0;
    }
    return 1;
}

static int request_line(const char *p, size_t l, int *http10, http_frame *f)
{
    size_t i = 0;
    while (i < l && is_tchar((unsigned char)p[i])) i++;
    if (i == 0 || i >= l || p[i] != ' ') FAIL(400, "malformed request line (expected METHOD SP TARGET SP HTTP/1.1)");
    size_t t0 = ++i;
    while (i < l && (unsigned char)p[i] > 0x20 && (unsigned char)p[i] < 0x7F) i++;
    if (i == t0 || i >= l || p[i] != ' ') FAIL(400, "malformed request line (expected METHOD SP TARGET SP HTTP/1.1)");
    const char *v = p + i + 1;
    size_t vl = l - i - 1;
    if (vl == 8 && !memcmp(v, "HTTP/1.1", 8)) *http10 = 0;
    else if (vl == 8 && !memcmp(v, "HTTP/1.0", 8)) *http10 = 1;
    else if (vl == 8 && !memcmp(v, "HTTP/", 5) && v[5] >= '0' && v[5] <= '9' && v[6] == '.' && v[7] >= '0' && v[7] <= '9')
        FAIL(505, "HTTP version %.8s is not supported (HTTP/1.0 and HTTP/1.1 are)", v);
    else FAIL(400, "malformed request line (expected METHOD SP TARGET SP HTTP/1.1)");
    return 0;
}

/* Content-Length's value: 1 to 18 digits, nothing else. */
static int parse_length(const char *v, size_t l, int64_t *out)
{
    if (l == 0 || l > 18) return -1;
    int64_t x = 0;
    for (size_t i = 0; i < l; i++) {
        if (v[i] < '0' || v[i] > '9') return -1;
        x = x * 10 + (v[i] - '0');
    }
    *out = x;
    return 0;
}

/* The chunked body from pos: sets f->body_complete when it is all there
 * and sound; an error as soon as a broken piece is seen. */
static int chunked_body(const char *buf, size_t pos, size_t n, int64_t max_body, http_frame *f)
{
    int64_t total = 0;
    for (;;) {
        size_t l = 0;
        const char *nl = line_at(buf, pos, n, &l);
        const char *s = buf + pos;
        size_t avail = nl ? l : n - pos;
        /* the size: hex digits (leading zeros allowed), then ';' extensions */
        size_t i = 0, sig = 0;
        uint64_t size = 0;
        while (i < avail && hexval((unsigned char)s[i]) >= 0) {
            if (size || s[i] != '0') sig++;
            if (sig > 15) FAIL(400, "chunk size %.*s... is too large", (int)(i < 20 ? i + 1 : 20), s);
            size = size * 16 + (uint64_t)hexval((unsigned char)s[i]);
            i++;
        }
        if (!nl) {
            /* incomplete: only what can still become a size line */
            if (i < avail && s[i] != ';' && s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
                FAIL(400, "bad chunk size line");
            return 0;
        }
        size_t j = i;
        while (j < l && (s[j] == ' ' || s[j] == '\t')) j++;
        if (i == 0 || (j < l && s[j] != ';') || !value_ok(s, l)) FAIL(400, "bad chunk size line");
        if ((int64_t)size > max_body || total + (int64_t)size > max_body)
            FAIL(413, "the chunked body is larger than max_body_bytes (%lld)", (long long)max_body);
        total += (int64_t)size;
        pos = (size_t)(nl - buf) + 1;
        if (size == 0) {
            /* trailer fields, then the empty line */
            for (;;) {
                nl = line_at(buf, pos, n, &l);
                if (!nl) return 0;
                if (l == 0) {
                    f->body_complete = 1;
                    return 0;
                }
                const char *t = buf + pos;
                size_t k = 0;
                while (k < l && is_tchar((unsigned char)t[k])) k++;
                if (k == 0 || k >= l || t[k] != ':' || !value_ok(t, l)) FAIL(400, "bad trailer field in the chunked body");
                pos = (size_t)(nl - buf) + 1;
            }
        }
        if (n - pos < size) return 0;
        pos += size;
        if (n - pos < 1) return 0;
        if (buf[pos] == '\n') pos += 1;
        else if (buf[pos] != '\r') FAIL(400, "chunk data is not followed by CRLF");
        else if (n - pos < 2) return 0;
        else if (buf[pos + 1] != '\n') FAIL(400, "chunk data is not followed by CRLF");
        else pos += 2;
    }
}

int http_frame_check(const char *buf, size_t n, size_t max_head, int64_t max_body, http_frame *f)
{
    memset(f, 0, sizeof *f);
    f->content_length = -1;
    size_t pos = 0;
    /* empty lines before the request line are ignored (RFC 9112 2.2) */
    for (int k = 0; k < 8 && pos < n; k++) {
        if (buf[pos] == '\n') pos++;
        else if (buf[pos] == '\r' && pos + 1 < n && buf[pos + 1] == '\n') pos += 2;
        else break;
    }
    size_t l = 0;
    const char *nl = line_at(buf, pos, n, &l);
    if (!nl) {
        if (!partial_line_ok(buf + pos, n - pos)) FAIL(400, "this is not an HTTP/1.x request");
        if (n > max_head) FAIL(414, "the request line is longer than %zu bytes", max_head);
        return FRAME_MORE;
    }
    if (l > max_head) FAIL(414, "the request line is longer than %zu bytes", max_head);
    int http10 = 0;
    if (request_line(buf + pos, l, &http10, f)) return FRAME_ERROR;
    pos = (size_t)(nl - buf) + 1;

    int n_cl = 0, n_te = 0;
    int64_t cl = -1;
    const char *te = NULL;
    size_t te_len = 0;
    for (;;) {
        nl = line_at(buf, pos, n, &l);
        if (!nl) {
            if (n > max_head) FAIL(431, "the request headers are larger than %zu bytes", max_head);
            return FRAME_MORE;
        }
        if ((size_t)(nl - buf) + 1 > max_head)
            FAIL(431, "the request headers are larger than %zu bytes", max_head);
        const char *h = buf + pos;
        pos = (size_t)(nl - buf) + 1;
        if (l == 0) break;
        if (h[0] == ' ' || h[0] == '\t') FAIL(400, "a header line starts with whitespace (obsolete line folding)");
        size_t k = 0;
        while (k < l && is_tchar((unsigned char)h[k])) k++;
        if (k == 0 || k >= l || h[k] != ':') FAIL(400, "malformed header line (expected name: value, no space before ':')");
        const char *v = h + k + 1;
        size_t vl = l - k - 1;
        if (!value_ok(v, vl)) FAIL(400, "a control character in the value of header %.*s", (int)(k < 64 ? k : 64), h);
        ows_trim(&v, &vl);
        if (name_is(h, k, "Content-Length")) {
            int64_t x;
            if (parse_length(v, vl, &x) < 0)
                FAIL(400, "Content-Length must be a number of bytes (1 to 18 digits), got '%.*s'",
                     (int)(vl < 40 ? vl : 40), v);
            if (n_cl++ && x != cl) FAIL(400, "two different Content-Length headers (%lld and %lld)", (long long)cl, (long long)x);
            cl = x;
        } else if (name_is(h, k, "Transfer-Encoding")) {
            n_te++;
            te = v;
            te_len = vl;
        } else if (name_is(h, k, "Expect")) {
            if (vl == 12 && !strncasecmp(v, "100-continue", 12)) f->expect_continue = 1;
        }
    }
    f->head_len = pos;

    if (n_te) {
        if (n_cl) FAIL(400, "both Content-Length and Transfer-Encoding: send one");
        if (http10) FAIL(400, "Transfer-Encoding in an HTTP/1.0 request");
        if (n_te > 1 || te_len != 7 || strncasecmp(te, "chunked", 7))
            FAIL(501, "Transfer-Encoding '%.*s' is not supported (only chunked)", (int)(te_len < 40 ? te_len : 40), te);
        f->chunked = 1;
        if (chunked_body(buf, pos, n, max_body, f)) return FRAME_ERROR;
        return FRAME_READY;
    }
    if (n_cl) {
        if (cl > max_body) FAIL(413, "the body is larger than max_body_bytes (%lld)", (long long)max_body);
        f->content_length = cl;
        f->body_complete = (int64_t)(n - pos) >= cl;
        return FRAME_READY;
    }
    f->body_complete = 1;
    return FRAME_READY;
}
