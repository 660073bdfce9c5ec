/*
 * weir.h — write a Weir stage in C.
 *
 * Define one function, `weir_process`, over a message and return an outcome; optionally define
 * `weir_init` to read the stage's `config` from the pipeline YAML. This SDK supplies the rest:
 * both exports of the `stage-fast` world (the typed per-message `stage` and the packed `batch`
 * fast path, which the host prefers), input decoding, output encoding and memory ownership.
 *
 *     #include "weir.h"
 *
 *     static const char *field;
 *
 *     const char *weir_init(const weir_config *config) {
 *         field = weir_config_get(config, "field");
 *         return field ? NULL : "`field` is required";
 *     }
 *
 *     weir_outcome weir_process(const weir_message *msg) {
 *         if (!msg->value.ptr) return weir_reject("no value");
 *         weir_out *out = weir_emit_copy(msg);
 *         weir_out_header(out, "seen-by", "c", 1);
 *         return weir_next();
 *     }
 *
 * Build with `sdk/c/weir-build-c stage.c -o stage.wasm` (see docs/languages/c.md).
 *
 * Lifetimes: everything a `weir_message` points at, and every `weir_out`, is valid only during
 * the `weir_process` call it was given to. Strings from `weir_config_get` live for the
 * instance's lifetime. Running out of memory traps the instance; the host contains it.
 */
#ifndef WEIR_H
#define WEIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A byte string; `ptr == NULL` means absent (a Kafka null), `len == 0` with a pointer is empty. */
typedef struct weir_bytes {
    const uint8_t *ptr;
    size_t len;
} weir_bytes;

/** One header: the key is UTF-8 (not NUL-terminated); the value may be absent. */
typedef struct weir_header {
    weir_bytes key;
    weir_bytes value;
} weir_header;

/** An input message and where it came from. */
typedef struct weir_message {
    weir_bytes key;
    weir_bytes value;
    const weir_header *headers;
    size_t header_count;
    /** Milliseconds since the Unix epoch, when `has_timestamp`. */
    bool has_timestamp;
    int64_t timestamp;
    /** Source topic (UTF-8), partition and offset. */
    weir_bytes topic;
    int32_t partition;
    int64_t offset;
} weir_message;

/** What becomes of the input. */
typedef enum weir_verdict {
    WEIR_KEEP = 0,   /**< continues unchanged (nothing copied back: the cheapest answer) */
    WEIR_NEXT = 1,   /**< the messages emitted during this call continue instead (none: filtered) */
    WEIR_REJECT = 2, /**< goes to the reject path / dead-letter queue with a reason */
    WEIR_FAIL = 3,   /**< the pipeline stops; nothing at or after this message is committed */
} weir_verdict;

/** A stage's answer; build it with the functions below. */
typedef struct weir_outcome {
    weir_verdict verdict;
} weir_outcome;

/** The stage's `config` map from the YAML (values rendered as text). */
typedef struct weir_config weir_config;

/** The value of `key` (NUL-terminated), or NULL when the YAML does not set it. */
const char *weir_config_get(const weir_config *config, const char *key);
/**
 * The value of `key`, or NULL when the YAML does not set it or sets it empty (`--config word=`
 * and `word: ""` give an empty value): for keys where empty means "not given".
 *     const char *prefix = weir_config_non_empty(config, "prefix");
 *     if (!prefix) prefix = "eu-";
 */
const char *weir_config_non_empty(const weir_config *config, const char *key);
/** Number of config entries, and the i-th key and value (for iterating). */
size_t weir_config_len(const weir_config *config);
const char *weir_config_key(const weir_config *config, size_t i);
const char *weir_config_value(const weir_config *config, size_t i);

/* ---- Defined by the stage author ---------------------------------------------------------- */

/**
 * Called once per instance before any message. Return NULL when ready, or an error text: the
 * pipeline then stops at start-up, naming the stage. Optional: the default accepts any config.
 */
const char *weir_init(const weir_config *config);

/** Decides one message. Required. */
weir_outcome weir_process(const weir_message *msg);

/* ---- Outcomes ----------------------------------------------------------------------------- */

weir_outcome weir_keep(void);
/** `next` with no message: the input is filtered out. */
weir_outcome weir_drop(void);
/** `next` with the messages emitted by `weir_emit`/`weir_emit_copy` during this call. */
weir_outcome weir_next(void);
/** Reject / fail with a printf-style reason. */
weir_outcome weir_reject(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
weir_outcome weir_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- Emitting messages (for weir_next) ----------------------------------------------------- */

typedef struct weir_out weir_out;

/** A new, empty output message (no key, no value, no headers, no timestamp). */
weir_out *weir_emit(void);
/** A new output message copying the input's key, value, headers and timestamp. */
weir_out *weir_emit_copy(const weir_message *msg);
/** Set the key / value (the bytes are copied; `ptr == NULL` makes it absent). */
void weir_out_key(weir_out *out, const void *ptr, size_t len);
void weir_out_value(weir_out *out, const void *ptr, size_t len);
/** Append a header (key NUL-terminated; `value == NULL` is an absent value). */
void weir_out_header(weir_out *out, const char *key, const void *value, size_t len);
/** Append a header whose key is `key_len` bytes of UTF-8 (not NUL-terminated). */
void weir_out_header_n(weir_out *out, const char *key, size_t key_len, const void *value, size_t len);
/** Route to this topic instead of the sink's default (NULL: the default). */
void weir_out_topic(weir_out *out, const char *topic);
/** Route to the topic in `len` bytes of UTF-8 at `topic` (not NUL-terminated; a slice of the
 *  input's key or value is fine, the bytes are copied). NULL: the sink's default. */
void weir_out_topic_n(weir_out *out, const char *topic, size_t len);
void weir_out_timestamp(weir_out *out, int64_t millis);

/* ---- Text ------------------------------------------------------------------------------- */

/**
 * Whether `len` bytes at `ptr` are valid UTF-8 (strict: no overlong forms, no surrogates,
 * nothing above U+10FFFF). Topics, header keys and reasons must be UTF-8; keys and values are
 * bytes, so check before treating them as text.
 */
bool weir_utf8_valid(const void *ptr, size_t len);

/* ---- JSON (strict RFC 8259; weir_json.c) ------------------------------------------------- */

/** What a document is. */
typedef enum weir_json_kind {
    WEIR_JSON_MALFORMED = 0, /**< not one JSON text (bad syntax, invalid UTF-8, too deep) */
    WEIR_JSON_OBJECT = 1,    /**< an object */
    WEIR_JSON_OTHER = 2,     /**< valid JSON that is not an object */
} weir_json_kind;

/** One top-level member of an object: its key decoded (UTF-8, `key_len` bytes, not
 *  NUL-terminated, valid during the callback) and its value's JSON text, unparsed. */
typedef struct weir_json_member {
    const char *key;
    size_t key_len;
    weir_bytes value;
} weir_json_member;

typedef void (*weir_json_each)(const weir_json_member *member, void *ctx);

/**
 * Checks that `doc` is exactly one JSON text (strict: UTF-8 checked, no lone surrogates,
 * nesting up to 128 deep) and, when it is an object, calls `each` (may be NULL) with every
 * top-level member in order (a duplicate key comes twice: the last one wins, as in the other
 * languages' JSON libraries). `*close` (may be NULL) gets the offset of the object's closing
 * brace, where a member can be spliced in.
 */
weir_json_kind weir_json_object(weir_bytes doc, weir_json_each each, void *ctx, size_t *close);
/** Whether the JSON value text `v` is an integer (no fraction, no exponent) within int64. */
bool weir_json_int(weir_bytes v, int64_t *out);
/** Decodes the JSON string value text `v` into `dst` (room for `v.len` bytes); false when `v`
 *  is not a string. */
bool weir_json_string(weir_bytes v, char *dst, size_t *len);
/** Writes `len` bytes of UTF-8 `text` as a JSON string literal into `dst` (room for
 *  `6 * len + 2` bytes); returns the literal's length. */
size_t weir_json_quote(char *dst, const char *text, size_t len);

/* ---- State (docs/state.md; weir_state.c) --------------------------------------------------- */

/**
 * One of the stage's buckets, declared under `state.buckets` in the pipeline YAML. A bucket is
 * per stage and per source partition: a message sees the writes of every message before it in
 * its partition, and its writes are kept only when its outcome is delivered (`reject`
 * included); a message that fails, traps or times out leaves none.
 *
 * These calls are the host's `wasi:keyvalue@0.2.0-draft2` (store and atomics) over byte
 * strings; its batch calls are in the generated "stage_fast.h" (wasi_keyvalue_batch_*). Each
 * returns true, or false with the reason in weir_state_error(). Keys are UTF-8, `key_len`
 * bytes. State is open only while a message is processed (not in weir_init).
 */
typedef struct weir_bucket weir_bucket;

/** Opens bucket `name` (later calls with the same name return the same bucket); NULL with the
 *  reason in weir_state_error() (e.g. "access-denied: ..." when the YAML does not declare it). */
weir_bucket *weir_bucket_open(const char *name);
/** Why the last state call failed (valid until the next state call). */
const char *weir_state_error(void);
/** The value of `key`: `value->ptr == NULL` when it has none. The bytes are valid until the
 *  next state call. */
bool weir_state_get(weir_bucket *b, const char *key, size_t key_len, weir_bytes *value);
/** The value of `key` as a number written by weir_state_increment/weir_state_set_i64 (8
 *  little-endian bytes); `*found` false when it has none. */
bool weir_state_get_i64(weir_bucket *b, const char *key, size_t key_len, bool *found, int64_t *value);
/** Sets `key` (the bytes are copied). A value over `state.max_value` is an error. */
bool weir_state_set(weir_bucket *b, const char *key, size_t key_len, const void *value, size_t len);
/** Sets `key` to a number, as weir_state_increment stores it. */
bool weir_state_set_i64(weir_bucket *b, const char *key, size_t key_len, int64_t value);
/** Removes `key` (a tombstone in the changelog). */
bool weir_state_delete(weir_bucket *b, const char *key, size_t key_len);
/** Whether `key` has a value. */
bool weir_state_exists(weir_bucket *b, const char *key, size_t key_len, bool *exists);
/** Adds `delta` to the number at `key` (absent: 0); `*total` gets the sum (wrapping). */
bool weir_state_increment(weir_bucket *b, const char *key, size_t key_len, int64_t delta, int64_t *total);
/** Calls `each` with every key of the bucket in this partition, in order. */
bool weir_state_keys(weir_bucket *b, void (*each)(const char *key, size_t key_len, void *ctx), void *ctx);

/* ---- Logging into the host's logs, tagged with the stage's name --------------------------- */

typedef enum weir_level {
    WEIR_TRACE = 0,
    WEIR_DEBUG = 1,
    WEIR_INFO = 2,
    WEIR_WARN = 3,
    WEIR_ERROR = 4,
} weir_level;

void weir_log(weir_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif /* WEIR_H */
