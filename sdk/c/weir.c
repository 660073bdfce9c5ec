/*
 * The Weir C SDK: both exports of the `stage-fast` world over the author's `weir_process`.
 * The typed export converts wit-bindgen's records; the packed export decodes the batch layout
 * documented in wit/weir.wit in place (no copy of the input) and answers `keep` without copying
 * anything back.
 */
#include "weir.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_fast.h"

#define ABSENT 0xFFFFFFFFu
#define MAGIC 0x57454952u
#define NO_TIMESTAMP INT64_MIN

/* ---- memory ------------------------------------------------------------------------------- */

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) __builtin_trap(); /* out of memory: the host contains the trap */
    return q;
}

static uint8_t *dup_bytes(const void *p, size_t n) {
    if (!n) return NULL;
    uint8_t *q = xrealloc(NULL, n);
    memcpy(q, p, n);
    return q;
}

/* ---- config ------------------------------------------------------------------------------- */

struct weir_config {
    size_t len;
    char **keys;
    char **values;
};

static weir_config CONFIG;

static char *cstr(const uint8_t *p, size_t n) {
    char *s = xrealloc(NULL, n + 1);
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}

const char *weir_config_get(const weir_config *c, const char *key) {
    for (size_t i = 0; i < c->len; i++)
        if (strcmp(c->keys[i], key) == 0) return c->values[i];
    return NULL;
}
const char *weir_config_non_empty(const weir_config *c, const char *key) {
    const char *v = weir_config_get(c, key);
    return v && *v ? v : NULL;
}
size_t weir_config_len(const weir_config *c) { return c->len; }
const char *weir_config_key(const weir_config *c, size_t i) { return i < c->len ? c->keys[i] : NULL; }
const char *weir_config_value(const weir_config *c, size_t i) { return i < c->len ? c->values[i] : NULL; }

__attribute__((weak)) const char *weir_init(const weir_config *config) {
    (void)config;
    return NULL;
}

/* ---- outcomes and emitted messages -------------------------------------------------------- */

typedef struct buf {
    uint8_t *ptr;
    size_t len;
    bool some;
} buf;

typedef struct out_header {
    buf key;
    buf value;
} out_header;

struct weir_out {
    buf key, value, topic;
    bool has_timestamp;
    int64_t timestamp;
    out_header *headers;
    size_t header_count, header_cap;
};

/* The messages emitted during the current call, and the current reason. */
static weir_out *OUTS;
static size_t OUT_COUNT, OUT_CAP;
static char *REASON;
static size_t REASON_LEN;

/* The current input's headers as `weir_header`s, reused by both exports. */
static weir_header *IN_HEADERS;
static size_t IN_HEADER_CAP;

static weir_header *in_headers(size_t n) {
    if (n > IN_HEADER_CAP) {
        IN_HEADER_CAP = n;
        IN_HEADERS = xrealloc(IN_HEADERS, n * sizeof *IN_HEADERS);
    }
    return IN_HEADERS;
}

static void set_buf(buf *b, const void *p, size_t n) {
    free(b->ptr);
    b->some = p != NULL;
    b->ptr = p ? dup_bytes(p, n) : NULL;
    b->len = p ? n : 0;
}

static void free_out(weir_out *o) {
    free(o->key.ptr);
    free(o->value.ptr);
    free(o->topic.ptr);
    for (size_t i = 0; i < o->header_count; i++) {
        free(o->headers[i].key.ptr);
        free(o->headers[i].value.ptr);
    }
    free(o->headers);
}

static void reset_call(void) {
    for (size_t i = 0; i < OUT_COUNT; i++) free_out(&OUTS[i]);
    OUT_COUNT = 0;
    free(REASON);
    REASON = NULL;
    REASON_LEN = 0;
}

weir_out *weir_emit(void) {
    if (OUT_COUNT == OUT_CAP) {
        OUT_CAP = OUT_CAP ? OUT_CAP * 2 : 4;
        OUTS = xrealloc(OUTS, OUT_CAP * sizeof *OUTS);
    }
    weir_out *o = &OUTS[OUT_COUNT++];
    memset(o, 0, sizeof *o);
    return o;
}

/* Appends a header with copies of the key (never absent) and value bytes. */
static void push_header(weir_out *o, const void *key, size_t key_len, const void *value, size_t len) {
    if (o->header_count == o->header_cap) {
        o->header_cap = o->header_cap ? o->header_cap * 2 : 4;
        o->headers = xrealloc(o->headers, o->header_cap * sizeof *o->headers);
    }
    out_header *h = &o->headers[o->header_count++];
    memset(h, 0, sizeof *h);
    set_buf(&h->key, key ? key : "", key_len);
    set_buf(&h->value, value, len);
}

weir_out *weir_emit_copy(const weir_message *m) {
    weir_out *o = weir_emit();
    weir_out_key(o, m->key.ptr, m->key.len);
    weir_out_value(o, m->value.ptr, m->value.len);
    for (size_t i = 0; i < m->header_count; i++) {
        const weir_header *h = &m->headers[i];
        push_header(o, h->key.ptr, h->key.len, h->value.ptr, h->value.len);
    }
    if (m->has_timestamp) weir_out_timestamp(o, m->timestamp);
    return o;
}

void weir_out_key(weir_out *o, const void *p, size_t n) { set_buf(&o->key, p, n); }
void weir_out_value(weir_out *o, const void *p, size_t n) { set_buf(&o->value, p, n); }
void weir_out_topic(weir_out *o, const char *t) { set_buf(&o->topic, t, t ? strlen(t) : 0); }
void weir_out_topic_n(weir_out *o, const char *t, size_t n) { set_buf(&o->topic, t, n); }
void weir_out_timestamp(weir_out *o, int64_t ms) {
    o->has_timestamp = true;
    o->timestamp = ms;
}
void weir_out_header(weir_out *o, const char *key, const void *value, size_t len) {
    push_header(o, key, strlen(key), value, len);
}
void weir_out_header_n(weir_out *o, const char *key, size_t key_len, const void *value, size_t len) {
    push_header(o, key, key_len, value, len);
}

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF. */
bool weir_utf8_valid(const void *ptr, size_t len) {
    const uint8_t *s = ptr;
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            return false;
        }
        if (len - i - 1 < n) return false;
        if (s[i + 1] < lo || s[i + 1] > hi) return false;
        for (size_t k = 2; k <= n; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        i += n + 1;
    }
    return true;
}

weir_outcome weir_keep(void) { return (weir_outcome){WEIR_KEEP}; }
weir_outcome weir_next(void) { return (weir_outcome){WEIR_NEXT}; }
weir_outcome weir_drop(void) {
    for (size_t i = 0; i < OUT_COUNT; i++) free_out(&OUTS[i]);
    OUT_COUNT = 0;
    return (weir_outcome){WEIR_NEXT};
}

static void set_reason(const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n < 0) n = 0;
    free(REASON);
    REASON = xrealloc(NULL, (size_t)n + 1);
    vsnprintf(REASON, (size_t)n + 1, fmt, again);
    va_end(again);
    REASON_LEN = (size_t)n;
}

weir_outcome weir_reject(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_reason(fmt, ap);
    va_end(ap);
    return (weir_outcome){WEIR_REJECT};
}

weir_outcome weir_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_reason(fmt, ap);
    va_end(ap);
    return (weir_outcome){WEIR_FAIL};
}

void weir_log(weir_level level, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) n = sizeof line - 1;
    stage_fast_string_t s = {(uint8_t *)line, (size_t)n};
    weir_stage_log_log((weir_stage_log_level_t)level, &s);
}

/* ---- the typed export ----------------------------------------------------------------------- */

bool exports_weir_stage_stage_init(stage_fast_list_tuple2_string_string_t *config, stage_fast_string_t *err) {
    CONFIG.len = config->len;
    CONFIG.keys = xrealloc(NULL, config->len * sizeof(char *));
    CONFIG.values = xrealloc(NULL, config->len * sizeof(char *));
    for (size_t i = 0; i < config->len; i++) {
        CONFIG.keys[i] = cstr(config->ptr[i].f0.ptr, config->ptr[i].f0.len);
        CONFIG.values[i] = cstr(config->ptr[i].f1.ptr, config->ptr[i].f1.len);
    }
    stage_fast_list_tuple2_string_string_free(config);
    const char *e = weir_init(&CONFIG);
    if (!e) return true;
    size_t n = strlen(e);
    if (!n) {
        e = "init failed";
        n = strlen(e);
    }
    err->ptr = dup_bytes(e, n);
    err->len = n;
    return false;
}

static weir_bytes opt_bytes(const stage_fast_option_list_u8_t *o) {
    if (!o->is_some) return (weir_bytes){NULL, 0};
    /* Present but empty: a non-NULL pointer says "present". */
    return (weir_bytes){o->val.ptr ? o->val.ptr : (const uint8_t *)"", o->val.len};
}

static stage_fast_option_list_u8_t take_opt(buf *b) {
    stage_fast_option_list_u8_t o = {b->some, {b->len ? b->ptr : NULL, b->len}};
    if (!b->len) free(b->ptr);
    b->ptr = NULL;
    return o;
}

static stage_fast_string_t take_str(buf *b) {
    stage_fast_string_t s = {b->len ? b->ptr : NULL, b->len};
    if (!b->len) free(b->ptr);
    b->ptr = NULL;
    return s;
}

void exports_weir_stage_stage_process(exports_weir_stage_stage_message_t *in,
                                      exports_weir_stage_stage_metadata_t *meta,
                                      exports_weir_stage_stage_outcome_t *ret) {
    reset_call();
    weir_header *headers = in_headers(in->headers.len);
    for (size_t i = 0; i < in->headers.len; i++) {
        headers[i].key = (weir_bytes){in->headers.ptr[i].key.ptr, in->headers.ptr[i].key.len};
        headers[i].value = opt_bytes(&in->headers.ptr[i].value);
    }
    weir_message msg = {
        .key = opt_bytes(&in->key),
        .value = opt_bytes(&in->value),
        .headers = headers,
        .header_count = in->headers.len,
        .has_timestamp = in->timestamp.is_some,
        .timestamp = in->timestamp.val,
        .topic = {meta->topic.ptr, meta->topic.len},
        .partition = meta->partition,
        .offset = meta->offset,
    };
    weir_outcome out = weir_process(&msg);
    exports_weir_stage_stage_message_free(in);
    exports_weir_stage_stage_metadata_free(meta);
    switch (out.verdict) {
    case WEIR_KEEP:
        ret->tag = WEIR_STAGE_TYPES_OUTCOME_KEEP;
        break;
    case WEIR_NEXT: {
        ret->tag = WEIR_STAGE_TYPES_OUTCOME_NEXT;
        weir_stage_types_message_t *msgs = OUT_COUNT ? xrealloc(NULL, OUT_COUNT * sizeof *msgs) : NULL;
        for (size_t i = 0; i < OUT_COUNT; i++) {
            weir_out *o = &OUTS[i];
            weir_stage_types_message_t *m = &msgs[i];
            m->key = take_opt(&o->key);
            m->value = take_opt(&o->value);
            m->timestamp = (stage_fast_option_s64_t){o->has_timestamp, o->timestamp};
            m->topic.is_some = o->topic.some;
            m->topic.val = take_str(&o->topic);
            m->headers.len = o->header_count;
            m->headers.ptr = o->header_count ? xrealloc(NULL, o->header_count * sizeof *m->headers.ptr) : NULL;
            for (size_t j = 0; j < o->header_count; j++) {
                m->headers.ptr[j].key = take_str(&o->headers[j].key);
                m->headers.ptr[j].value = take_opt(&o->headers[j].value);
            }
            free(o->headers);
            o->headers = NULL;
            o->header_count = 0;
        }
        /* Ownership moved into the result, which the post-return frees. */
        ret->val.next = (weir_stage_types_list_message_t){msgs, OUT_COUNT};
        OUT_COUNT = 0;
        break;
    }
    case WEIR_REJECT:
    case WEIR_FAIL:
    default:
        ret->tag = out.verdict == WEIR_REJECT ? WEIR_STAGE_TYPES_OUTCOME_REJECT : WEIR_STAGE_TYPES_OUTCOME_FAIL;
        ret->val.reject = (stage_fast_string_t){REASON_LEN ? (uint8_t *)REASON : NULL, REASON_LEN};
        if (!REASON_LEN) free(REASON);
        REASON = NULL;
        REASON_LEN = 0;
        break;
    }
}

/* ---- the packed export ---------------------------------------------------------------------- */

typedef struct reader {
    const uint8_t *p, *end;
} reader;

static void need(const reader *r, size_t n) {
    if ((size_t)(r->end - r->p) < n) __builtin_trap(); /* malformed batch: the host sent it */
}
static uint32_t rd_u32(reader *r) {
    uint32_t v;
    need(r, 4);
    memcpy(&v, r->p, 4);
    r->p += 4;
    return v;
}
static int64_t rd_i64(reader *r) {
    int64_t v;
    need(r, 8);
    memcpy(&v, r->p, 8);
    r->p += 8;
    return v;
}
static weir_bytes rd_bytes(reader *r, uint32_t len) {
    if (len == ABSENT) return (weir_bytes){NULL, 0};
    need(r, len);
    weir_bytes b = {r->p, len};
    r->p += len;
    return b;
}

typedef struct writer {
    uint8_t *p;
    size_t len, cap;
} writer;

static void grow(writer *w, size_t n) {
    if (w->cap - w->len >= n) return;
    size_t cap = w->cap ? w->cap : 256;
    while (cap - w->len < n) cap *= 2;
    w->p = xrealloc(w->p, cap);
    w->cap = cap;
}
static void wr(writer *w, const void *p, size_t n) {
    grow(w, n);
    if (n) memcpy(w->p + w->len, p, n);
    w->len += n;
}
static void wr_u32(writer *w, uint32_t v) { wr(w, &v, 4); }
static void wr_i64(writer *w, int64_t v) { wr(w, &v, 8); }
static void wr_len(writer *w, const buf *b) { wr_u32(w, b->some ? (uint32_t)b->len : ABSENT); }

void exports_weir_stage_batch_process_batch(stage_fast_list_u8_t *input, stage_fast_list_u8_t *ret) {
    reader r = {input->ptr, input->ptr + input->len};
    if (rd_u32(&r) != MAGIC || rd_u32(&r) != 1) __builtin_trap();
    uint32_t count = rd_u32(&r);
    weir_bytes topic = rd_bytes(&r, rd_u32(&r));
    int32_t partition;
    need(&r, 4);
    memcpy(&partition, r.p, 4);
    r.p += 4;

    writer w = {0};
    grow(&w, 4 + (size_t)count);
    w.len = 4 + (size_t)count; /* count and verdicts, filled in as answered */
    uint32_t answered = 0;
    for (uint32_t i = 0; i < count; i++) {
        weir_message msg;
        msg.offset = rd_i64(&r);
        msg.timestamp = rd_i64(&r);
        msg.has_timestamp = msg.timestamp != NO_TIMESTAMP;
        uint32_t key_len = rd_u32(&r), value_len = rd_u32(&r), header_count = rd_u32(&r);
        msg.key = rd_bytes(&r, key_len);
        msg.value = rd_bytes(&r, value_len);
        weir_header *headers = in_headers(header_count);
        for (uint32_t h = 0; h < header_count; h++) {
            uint32_t hk = rd_u32(&r), hv = rd_u32(&r);
            headers[h].key = rd_bytes(&r, hk);
            headers[h].value = rd_bytes(&r, hv);
        }
        msg.headers = headers;
        msg.header_count = header_count;
        msg.topic = topic;
        msg.partition = partition;

        reset_call();
        weir_outcome out = weir_process(&msg);
        w.p[4 + answered++] = (uint8_t)out.verdict;
        if (out.verdict == WEIR_NEXT) {
            wr_u32(&w, (uint32_t)OUT_COUNT);
            for (size_t k = 0; k < OUT_COUNT; k++) {
                const weir_out *o = &OUTS[k];
                wr_i64(&w, o->has_timestamp ? o->timestamp : NO_TIMESTAMP);
                wr_len(&w, &o->topic);
                wr_len(&w, &o->key);
                wr_len(&w, &o->value);
                wr_u32(&w, (uint32_t)o->header_count);
                wr(&w, o->topic.ptr, o->topic.len);
                wr(&w, o->key.ptr, o->key.len);
                wr(&w, o->value.ptr, o->value.len);
                for (size_t h = 0; h < o->header_count; h++) {
                    wr_u32(&w, (uint32_t)o->headers[h].key.len);
                    wr_len(&w, &o->headers[h].value);
                    wr(&w, o->headers[h].key.ptr, o->headers[h].key.len);
                    wr(&w, o->headers[h].value.ptr, o->headers[h].value.len);
                }
            }
        } else if (out.verdict == WEIR_REJECT || out.verdict == WEIR_FAIL) {
            wr_u32(&w, (uint32_t)REASON_LEN);
            wr(&w, REASON, REASON_LEN);
        }
        if (out.verdict == WEIR_FAIL) break;
    }
    reset_call();
    if (answered < count) /* stopped at a fail: close the gap after the verdicts */
        memmove(w.p + 4 + answered, w.p + 4 + count, w.len - 4 - count);
    w.len -= count - answered;
    memcpy(w.p, &answered, 4);
    stage_fast_list_u8_free(input);
    ret->ptr = w.p;
    ret->len = w.len;
}
