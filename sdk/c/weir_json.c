/*
 * The Weir C SDK's JSON helpers (weir.h, "JSON"): a small strict RFC 8259 scanner (UTF-8
 * checked, no lone surrogates, nesting up to 128 deep) that finds an object's top-level members
 * without building a tree, so a stage can read a field and splice its answer into the input's
 * own text.
 */
#include <stdlib.h>
#include <string.h>

#include "weir.h"

/* ---- the scanner --------------------------------------------------------------------------- */

enum { MAX_DEPTH = 128 };

typedef struct scan {
    const unsigned char *p, *end;
} scan;

static void ws(scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

static int hex4(scan *s, unsigned *out) {
    if (s->end - s->p < 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = s->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return 0;
    }
    s->p += 4;
    *out = v;
    return 1;
}

/* Appends code point `cp` as UTF-8 to `dst` (when not NULL) at `*n`. */
static void put_utf8(char *dst, size_t *n, unsigned cp) {
    char b[4];
    size_t k;
    if (cp < 0x80) { b[0] = (char)cp; k = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | cp >> 6); b[1] = (char)(0x80 | (cp & 0x3F)); k = 2; }
    else if (cp < 0x10000) { b[0] = (char)(0xE0 | cp >> 12); b[1] = (char)(0x80 | (cp >> 6 & 0x3F)); b[2] = (char)(0x80 | (cp & 0x3F)); k = 3; }
    else { b[0] = (char)(0xF0 | cp >> 18); b[1] = (char)(0x80 | (cp >> 12 & 0x3F)); b[2] = (char)(0x80 | (cp >> 6 & 0x3F)); b[3] = (char)(0x80 | (cp & 0x3F)); k = 4; }
    if (dst) memcpy(dst + *n, b, k);
    *n += k;
}

/* Length of the valid UTF-8 sequence at p (0 if invalid). */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned char c = *p;
    size_t k;
    unsigned cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) { k = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; cp = c & 0x07; }
    else return 0;
    if ((size_t)(end - p) < k) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if ((k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return k;
}

/* Parses a string at s->p (the opening quote); decodes it into dst (may be NULL) of *n bytes. */
static int string(scan *s, char *dst, size_t *n) {
    *n = 0;
    if (s->p >= s->end || *s->p != '"') return 0;
    s->p++;
    while (s->p < s->end) {
        unsigned char c = *s->p;
        if (c == '"') { s->p++; return 1; }
        if (c < 0x20) return 0;
        if (c == '\\') {
            s->p++;
            if (s->p >= s->end) return 0;
            unsigned char e = *s->p++;
            unsigned cp;
            switch (e) {
            case '"': case '\\': case '/': cp = e; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (!hex4(s, &cp)) return 0;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return 0; /* lone low surrogate */
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    unsigned lo;
                    if (s->end - s->p < 2 || s->p[0] != '\\' || s->p[1] != 'u') return 0;
                    s->p += 2;
                    if (!hex4(s, &lo) || lo < 0xDC00 || lo > 0xDFFF) return 0;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                break;
            default: return 0;
            }
            put_utf8(dst, n, cp);
            continue;
        }
        size_t k = utf8_len(s->p, s->end);
        if (!k) return 0;
        if (dst) memcpy(dst + *n, s->p, k);
        *n += k;
        s->p += k;
    }
    return 0;
}

static int digits(scan *s) {
    const unsigned char *start = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') s->p++;
    return s->p > start;
}

static int number(scan *s) {
    if (s->p < s->end && *s->p == '-') s->p++;
    if (s->p < s->end && *s->p == '0') s->p++;
    else if (!digits(s)) return 0;
    if (s->p < s->end && *s->p == '.') { s->p++; if (!digits(s)) return 0; }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-')) s->p++;
        if (!digits(s)) return 0;
    }
    return 1;
}

static int literal(scan *s, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return 0;
    s->p += n;
    return 1;
}

static int value(scan *s, int depth);

static int container(scan *s, int depth, char open, char close) {
    if (depth >= MAX_DEPTH) return 0;
    s->p++; /* the opening bracket */
    ws(s);
    if (s->p < s->end && *s->p == close) { s->p++; return 1; }
    for (;;) {
        size_t n;
        if (open == '{') {
            if (!string(s, NULL, &n)) return 0;
            ws(s);
            if (s->p >= s->end || *s->p++ != ':') return 0;
        }
        if (!value(s, depth + 1)) return 0;
        ws(s);
        if (s->p >= s->end) return 0;
        if (*s->p == ',') { s->p++; ws(s); continue; }
        if (*s->p == close) { s->p++; return 1; }
        return 0;
    }
}

static int value(scan *s, int depth) {
    size_t n;
    ws(s);
    if (s->p >= s->end) return 0;
    switch (*s->p) {
    case '{': return container(s, depth, '{', '}');
    case '[': return container(s, depth, '[', ']');
    case '"': return string(s, NULL, &n);
    case 't': return literal(s, "true");
    case 'f': return literal(s, "false");
    case 'n': return literal(s, "null");
    default: return number(s);
    }
}

/* ---- the API -------------------------------------------------------------------------------- */

weir_json_kind weir_json_object(weir_bytes doc, weir_json_each each, void *ctx, size_t *close) {
    scan s = {doc.ptr, doc.ptr + doc.len};
    if (!doc.ptr) return WEIR_JSON_MALFORMED;
    ws(&s);
    if (s.p >= s.end) return WEIR_JSON_MALFORMED;
    if (*s.p != '{') {
        if (!value(&s, 0)) return WEIR_JSON_MALFORMED;
        ws(&s);
        return s.p == s.end ? WEIR_JSON_OTHER : WEIR_JSON_MALFORMED;
    }
    char *key = malloc(doc.len + 1);
    if (!key) __builtin_trap();
    s.p++;
    ws(&s);
    int ok = 1;
    if (s.p < s.end && *s.p == '}') {
        s.p++;
    } else {
        for (;;) {
            size_t key_n;
            if (!string(&s, key, &key_n)) { ok = 0; break; }
            ws(&s);
            if (s.p >= s.end || *s.p++ != ':') { ok = 0; break; }
            ws(&s);
            const unsigned char *v = s.p;
            if (!value(&s, 1)) { ok = 0; break; }
            if (each) {
                weir_json_member m = {key, key_n, {v, (size_t)(s.p - v)}};
                each(&m, ctx);
            }
            ws(&s);
            if (s.p >= s.end) { ok = 0; break; }
            if (*s.p == ',') { s.p++; ws(&s); continue; }
            if (*s.p == '}') { s.p++; break; }
            ok = 0;
            break;
        }
    }
    free(key);
    if (!ok) return WEIR_JSON_MALFORMED;
    size_t at = (size_t)(s.p - doc.ptr) - 1;
    ws(&s);
    if (s.p != s.end) return WEIR_JSON_MALFORMED;
    if (close) *close = at;
    return WEIR_JSON_OBJECT;
}

bool weir_json_string(weir_bytes v, char *dst, size_t *len) {
    scan s = {v.ptr, v.ptr + v.len};
    size_t n = 0;
    if (!v.ptr || !string(&s, dst, &n) || s.p != s.end) return false;
    *len = n;
    return true;
}

bool weir_json_int(weir_bytes v, int64_t *out) {
    const unsigned char *p = v.ptr, *end = v.ptr + v.len;
    if (!p || p == end) return false;
    int negative = *p == '-';
    if (negative && ++p == end) return false;
    if (*p == '0' && end - p > 1) return false; /* a leading zero (or a fraction after 0) */
    uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, u = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9') return false; /* a fraction, an exponent: not an integer */
        unsigned d = *p - '0';
        if (u > (limit - d) / 10) return false;
        u = u * 10 + d;
    }
    *out = negative ? (int64_t)(0 - u) : (int64_t)u;
    return true;
}

size_t weir_json_quote(char *dst, const char *text, size_t len) {
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    dst[n++] = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '"' || c == '\\') { dst[n++] = '\\'; dst[n++] = (char)c; }
        else if (c < 0x20) { memcpy(dst + n, "\\u00", 4); n += 4; dst[n++] = hex[c >> 4]; dst[n++] = hex[c & 15]; }
        else dst[n++] = (char)c;
    }
    dst[n++] = '"';
    return n;
}
