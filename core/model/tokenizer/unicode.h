/*
 * unicode.h: the few UTF-8 facts the tokenizer and the detokenizer need:
 * sequence lengths, decoding and encoding one code point, whether a byte
 * string is valid UTF-8, how much of a streamed buffer can be emitted
 * without splitting a character, and GPT-2's byte-to-unicode map used by
 * byte-level BPE vocabularies.
 * Not for: normalization, case folding or character classes (the BPE
 * pre-tokenizer leaves those to PCRE2 with Unicode properties).
 */
#ifndef PAGODA_UNICODE_H
#define PAGODA_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the sequence a lead byte announces (1..4); 1 for a
 * continuation or invalid lead byte, so scanners always make progress. */
size_t pagoda_utf8_seq_len(uint8_t lead);

/* Decode one code point at s (len > 0). Returns the bytes consumed (1..4)
 * and sets *cp; an invalid or truncated sequence consumes one byte and
 * yields U+FFFD. */
size_t pagoda_utf8_decode(const char *s, size_t len, uint32_t *cp);

/* Encode cp (<= 0x10FFFF) into out; returns the byte count (1..4), or 0
 * for a value that is not a Unicode scalar. */
size_t pagoda_utf8_encode(uint32_t cp, char out[4]);

/* True when s[0..len) is well-formed UTF-8 (no overlongs, no surrogates,
 * nothing above U+10FFFF). */
bool pagoda_utf8_valid(const char *s, size_t len);

/* Length of the longest prefix of s[0..len) that ends on a character
 * boundary: only a trailing sequence that is valid so far but incomplete
 * is held back. Invalid bytes count as complete, so a stream with garbage
 * in it is never held back forever. For streaming detokenization. */
size_t pagoda_utf8_complete_prefix(const char *s, size_t len);

/* GPT-2's bytes_to_unicode(): every byte maps to a printable code point
 * (printable Latin-1 bytes to themselves, the rest to U+0100..U+0143). */
uint32_t pagoda_bpe_byte_to_cp(uint8_t b);
/* The inverse: the byte, or -1 for a code point outside the map. */
int pagoda_bpe_cp_to_byte(uint32_t cp);

#endif /* PAGODA_UNICODE_H */
